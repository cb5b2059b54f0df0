// A local Modal-compatible server for the modal:// tests: Modal's control plane (ModalClient) and
// task command router (TaskCommandRouter) over gRPC on Node's reference implementation, with each
// sandbox a real container on the test dockerd (gVisor's runsc when the engine has it), so that
// commands really run, a blocked network is really blocked and files really land. Its
// faithfulness is proven by Modal's official JS SDK (../sdk_flow.mjs), which must pass against it
// before our client is tested against it.
//
//   node server.mjs --state DIR --ports-file FILE [--runtime runsc] [--tls-cert C --tls-key K]
// ports.json: {"grpc": h2c port, "grpcTls": TLS port (ALPN h2), ...}
//
// What the SDK does on the wire is in ../shared/modal-protocol/NOTES.md (from modal@0.11.1's
// dist). The router is served on the same port as the control plane: the SDK dials the router
// URL `https://localhost:PORT` in plaintext when MODAL_SERVER_URL is a loopback address.
//
// Credentials: MODAL_TOKEN_ID=ak-local-test MODAL_TOKEN_SECRET=as-local-test. AuthTokenGet
// answers a JWT (exp one hour on); every other control-plane call must carry it.
// Each sandbox's router JWT is its own, and the router refuses any other (UNAUTHENTICATED).
//
// Not served (a coded gRPC status says so): network allow-lists (ALLOWLIST), GPUs, tunnels to
// open ports, image builds beyond `FROM <local image>`, V1 sandbox stdio.
import { spawn, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync, appendFileSync, readFileSync, renameSync } from 'node:fs';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hostname } from 'node:os';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const here = dirname(fileURLToPath(import.meta.url));
const TOKEN_ID = 'ak-local-test';
const TOKEN_SECRET = 'as-local-test';
const FS_TOOLS = '/__modal/.bin/modal-sandbox-fs-tools';
const LABEL = 'io.sandboxio.test.modal-server';
const STATUS = { SUCCESS: 1, FAILURE: 2, TERMINATED: 3, TIMEOUT: 4 };
const NETWORK = { OPEN: 1, BLOCKED: 2, ALLOWLIST: 3 };
const CHUNK = 64 * 1024;

function parseArgs(argv) {
  const out = { runtime: '', tlsCert: '', tlsKey: '', docker: 'docker' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[key] = argv[i + 1];
  }
  if (!out.state || !out.portsFile) throw new Error('usage: server.mjs --state DIR --ports-file FILE');
  return out;
}
const args = parseArgs(process.argv.slice(2));
mkdirSync(join(args.state, 'volumes'), { recursive: true });

const packages = protoLoader.loadSync(
  ['modal_proto/api.proto', 'modal_proto/task_command_router.proto'],
  { includeDirs: [resolve(here, '../proto')], keepCase: true, longs: Number, defaults: true, oneofs: true },
);
const proto = grpc.loadPackageDefinition(packages);

// ---- errors and ids --------------------------------------------------------------------------

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}
const fail = (code, message) => { throw new RpcError(code, message); };
const id = (prefix, n = 20) => prefix + randomBytes(n).toString('base64url').replace(/[-_]/g, 'x').slice(0, n);

function jwt(claims) {
  const part = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.${randomBytes(16).toString('base64url')}`;
}

// ---- docker -----------------------------------------------------------------------------------

function docker(argv, { input } = {}) {
  return new Promise((resolve_, reject) => {
    const child = execFile(args.docker, argv, { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`docker ${argv[0]}: ${stderr.trim() || err.message}`));
      else resolve_(stdout);
    });
    if (input !== undefined) child.stdin.end(input);
  });
}

// ---- output kept by offset (the SDK reads after exit, and resumes by offset) -------------------

class Output {
  constructor() {
    this.chunks = [];
    this.length = 0;
    this.ended = false;
    this.waiters = new Set();
  }
  push(buf) {
    if (!buf.length) return;
    this.chunks.push({ at: this.length, buf });
    this.length += buf.length;
    this.wake();
  }
  end() {
    this.ended = true;
    this.wake();
  }
  wake() {
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }
  // The bytes from `offset` on, at most CHUNK of them; empty when nothing is there yet.
  slice(offset) {
    const parts = [];
    let size = 0;
    for (const { at, buf } of this.chunks) {
      if (at + buf.length <= offset) continue;
      const from = Math.max(0, offset - at);
      const part = buf.subarray(from, from + CHUNK - size);
      parts.push(part);
      size += part.length;
      if (size >= CHUNK) break;
    }
    return Buffer.concat(parts);
  }
  // Streams from `offset` to the end (or until the call is cancelled).
  async stream(call, offset, wrap) {
    let cancelled = false;
    call.on('cancelled', () => { cancelled = true; this.wake(); });
    while (!cancelled) {
      const data = this.slice(offset);
      if (data.length) {
        const more = call.write(wrap(data, offset));
        offset += data.length;
        if (!more) await new Promise((r) => call.once('drain', r));
        continue;
      }
      if (this.ended) break;
      await new Promise((r) => this.waiters.add(r));
    }
    if (!cancelled) call.end();
  }
}

// ---- stdin written by offset: a repeated write (a retry) is taken once ------------------------

class Stdin {
  constructor(sink) {
    this.sink = sink;
    this.written = 0;
    this.closed = false;
  }
  write(offset, data, eof) {
    if (this.closed) {
      if (data.length && offset + data.length > this.written) fail(grpc.status.FAILED_PRECONDITION, 'stdin is closed');
      return;
    }
    if (offset > this.written) fail(grpc.status.OUT_OF_RANGE, `stdin offset ${offset} is past the ${this.written} bytes written`);
    const fresh = data.subarray(this.written - offset);
    if (fresh.length) {
      this.written += fresh.length;
      if (this.sink.writable) this.sink.write(fresh);
    }
    if (eof) {
      this.closed = true;
      this.sink.end();
    }
  }
}

// ---- state ------------------------------------------------------------------------------------

const apps = new Map(); // environment/name -> app id
const appNames = new Map(); // app id -> name
const images = new Map(); // image id -> docker image
const volumes = new Map(); // volume id -> host directory
const volumeIds = new Map(); // environment/name -> volume id
const sandboxes = new Map(); // sandbox id -> Sandbox
const tasks = new Map(); // task id -> Sandbox
const authTokens = new Set();
let runtime = args.runtime;

class Exec {
  constructor(sb, execId) {
    this.sb = sb;
    this.execId = execId;
    this.out = [new Output(), new Output()];
    this.exit = null; // { code } or { signal }
    this.exitWaiters = new Set();
    this.stdin = null;
  }
  finish(exit) {
    this.exit = exit;
    for (const o of this.out) o.end();
    const waiters = [...this.exitWaiters];
    this.exitWaiters.clear();
    for (const w of waiters) w();
  }
}

class Sandbox {
  constructor() {
    this.id = id('sb-v2-', 20);
    this.taskId = id('ta-', 22);
    this.name = `modal-local-${this.id.toLowerCase()}`;
    this.jwt = jwt({ sub: this.taskId, exp: Math.floor(Date.now() / 1000) + 3600 });
    this.result = null;
    this.resultWaiters = new Set();
    this.execs = new Map();
    this.out = [new Output(), new Output()];
    this.timer = null;
    this.ending = null;
  }
  end(result) {
    if (this.result) return;
    this.result = result;
    clearTimeout(this.timer);
    for (const e of this.execs.values()) if (!e.exit) e.finish({ code: 137 });
    const waiters = [...this.resultWaiters];
    this.resultWaiters.clear();
    for (const w of waiters) w();
  }
  // Ends the sandbox with `result` and removes its container.
  terminate(result) {
    this.end(result);
    this.ending ??= docker(['rm', '-f', this.name]).catch(() => {});
    return this.ending;
  }
}

function sandboxOf(sandboxId) {
  return sandboxes.get(sandboxId) ?? fail(grpc.status.NOT_FOUND, `Sandbox ${sandboxId} not found`);
}
function taskOf(taskId) {
  return tasks.get(taskId) ?? fail(grpc.status.NOT_FOUND, `Task ${taskId} not found`);
}
function execOf(req) {
  const sb = taskOf(req.task_id);
  return sb.execs.get(req.exec_id) ?? fail(grpc.status.NOT_FOUND, `Exec ${req.exec_id} not found`);
}

// Resolves when `sb` ends, or after `seconds` (never when seconds is null).
function waitResult(sb, seconds, call) {
  if (sb.result || seconds === 0) return Promise.resolve();
  return new Promise((resolve_) => {
    const done = () => { clearTimeout(timer); sb.resultWaiters.delete(done); resolve_(); };
    const timer = seconds == null ? null : setTimeout(done, seconds * 1000);
    sb.resultWaiters.add(done);
    call?.on('cancelled', done);
  });
}

// ---- the sandbox's container ------------------------------------------------------------------

function envOf(sources) {
  const env = {};
  for (const s of sources ?? []) {
    if (s.env) Object.assign(env, s.env.contents);
    else if (s.secret_id) fail(grpc.status.NOT_FOUND, `Secret ${s.secret_id} not found (the local server has no named secrets)`);
  }
  return env;
}

async function createSandbox(definition, secretSources, app = '') {
  const image = images.get(definition.image_id) ?? fail(grpc.status.NOT_FOUND, `Image ${definition.image_id} not found`);
  const gpu = definition.resources?.gpu_config;
  if (gpu && (gpu.count || gpu.gpu_type)) {
    fail(grpc.status.RESOURCE_EXHAUSTED, `no GPU of type ${gpu.gpu_type || gpu.type} on the local server`);
  }
  const network = definition.network_access?.network_access_type || NETWORK.OPEN;
  if (network === NETWORK.ALLOWLIST) {
    fail(grpc.status.UNIMPLEMENTED, 'the local server does not enforce outbound allow-lists; use OPEN or BLOCKED');
  }
  if (definition.open_ports?.ports?.length) fail(grpc.status.UNIMPLEMENTED, 'the local server has no tunnels');
  const env = envOf(secretSources);
  const sb = new Sandbox();
  const argv = ['create', '-i', '--name', sb.name, '--label', `${LABEL}=${process.pid}`,
    '--label', `io.sandboxio.test.modal-sandbox=${sb.id}`, '--label', `io.sandboxio.test.modal-app=${app}`, '--cap-drop', 'ALL', '--security-opt', 'no-new-privileges'];
  if (runtime) argv.push('--runtime', runtime);
  if (network === NETWORK.BLOCKED || definition.block_network) argv.push('--network', 'none');
  const res = definition.resources ?? {};
  const memory = res.memory_mb_max || res.memory_mb;
  if (memory) argv.push('--memory', `${memory}m`);
  const cpu = res.milli_cpu_max || res.milli_cpu;
  if (cpu) argv.push('--cpus', String(cpu / 1000));
  if (definition.workdir) argv.push('-w', definition.workdir);
  for (const [k, v] of Object.entries(env)) argv.push('-e', `${k}=${v}`);
  for (const m of definition.volume_mounts ?? []) {
    const root = volumes.get(m.volume_id) ?? fail(grpc.status.NOT_FOUND, `Volume ${m.volume_id} not found`);
    const sub = m.sub_path.replace(/^\/+/, '');
    if (sub.split('/').includes('..')) fail(grpc.status.INVALID_ARGUMENT, `sub_path ${m.sub_path} leaves the volume`);
    const host = join(root, sub);
    mkdirSync(host, { recursive: true });
    argv.push('--mount', `type=bind,src=${host},dst=${m.mount_path}${m.read_only ? ',readonly' : ''}`);
  }
  const command = definition.entrypoint_args?.length ? definition.entrypoint_args : ['sleep', '2147483647'];
  argv.push('--entrypoint', command[0], image, ...command.slice(1));
  appendFileSync(join(args.state, 'creates.jsonl'), `${JSON.stringify({ sandbox_id: sb.id, definition, env_names: Object.keys(env) })}\n`);
  await docker(argv);
  sandboxes.set(sb.id, sb);
  tasks.set(sb.taskId, sb);
  // `docker start -a -i` attaches before it starts, so no output is lost; the container runs
  // once `docker start` (without -a) would have returned, which `docker inspect` shows.
  const child = spawn(args.docker, ['start', '-a', '-i', sb.name], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdout.on('data', (d) => sb.out[0].push(d));
  child.stderr.on('data', (d) => sb.out[1].push(d));
  child.stdin.on('error', () => {});
  sb.stdin = new Stdin(child.stdin);
  child.on('close', (code) => {
    sb.out[0].end();
    sb.out[1].end();
    sb.end(code === 0 ? { status: STATUS.SUCCESS, exitcode: 0 } : { status: STATUS.FAILURE, exitcode: code ?? 137 });
    docker(['rm', '-f', sb.name]).catch(() => {});
  });
  await untilRunning(sb);
  const seconds = definition.timeout_secs || 300;
  sb.timer = setTimeout(() => sb.terminate({ status: STATUS.TIMEOUT, exception: `Sandbox timed out after ${seconds}s` }), seconds * 1000);
  return sb;
}

async function untilRunning(sb) {
  for (let i = 0; i < 600 && !sb.result; i++) {
    const state = await docker(['inspect', '-f', '{{.State.Status}}', sb.name]).catch(() => 'gone');
    if (state.trim() !== 'created') return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

// ---- commands ---------------------------------------------------------------------------------

function startExec(sb, req) {
  if (sb.result) fail(grpc.status.NOT_FOUND, `Sandbox ${sb.id} has ended`);
  if (sb.execs.has(req.exec_id)) return; // a retried start
  const exec = new Exec(sb, req.exec_id);
  sb.execs.set(req.exec_id, exec);
  if (req.command_args[0] === FS_TOOLS) return fsTools(exec, req.command_args[1] ?? '');
  const argv = ['exec', '-i'];
  if (req.workdir) argv.push('-w', req.workdir);
  for (const [k, v] of Object.entries({ ...req.env, ...envOf(req.secret_sources) })) argv.push('-e', `${k}=${v}`);
  // Every process of the exec carries its id, so that a timeout kills its whole tree (as Modal
  // does) without a wrapper process on its command line.
  // Through `exec` in a shell, which leaves nothing of itself behind: a missing program is 127
  // with the shell's message on stderr, as a process runtime reports it, where gVisor's own
  // exec would print its error on stdout and exit 126.
  argv.push('-e', `MODAL_LOCAL_EXEC=${exec.execId}`, sb.name, 'sh', '-c', 'exec "$@"', 'sh', ...req.command_args);
  const sink = (out, piped) => (piped ? (d) => out.push(d) : null);
  run(exec, argv, [sink(exec.out[0], req.stdout_config === 1), sink(exec.out[1], req.stderr_config === 1)]);
  if (req.timeout_secs) {
    const timer = setTimeout(() => {
      docker(['exec', sb.name, 'sh', '-c', KILL_EXEC, 'sh', exec.execId]).catch(() => {});
    }, req.timeout_secs * 1000);
    exec.exitWaiters.add(() => clearTimeout(timer));
  }
}

const KILL_EXEC = 'for p in /proc/[0-9]*; do grep -qz "^MODAL_LOCAL_EXEC=$1\\$" "$p/environ" 2>/dev/null && ' +
  'kill -KILL "${p#/proc/}" 2>/dev/null; done; exit 0';

// Runs `docker argv` as the exec's process. `sinks` take its stdout and stderr (null drops them);
// `onExit` may turn the exit code into another.
function run(exec, argv, sinks, onExit = (code) => code) {
  const child = spawn(args.docker, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdout.on('data', (d) => sinks[0]?.(d));
  child.stderr.on('data', (d) => sinks[1]?.(d));
  child.stdin.on('error', () => {});
  exec.stdin = new Stdin(child.stdin);
  child.on('close', (code, signal) => {
    if (!exec.exit) exec.finish(signal ? { signal: 9 } : { code: onExit(code) });
  });
}

// modal-sandbox-fs-tools, emulated: a shell script in the container does the work and says what
// went wrong by its exit code, which becomes the tool's JSON error on stderr.
// `entry PATH` prints `PATH\0`, a line of kind/size/mode/permissions/owner/group/mtime, and the
// symlink's target line, or nothing for a path that is not there: GNU find where it is (gVisor
// refuses coreutils' statx), busybox stat elsewhere.
const FS_ENTRY = 'entry() { [ -e "$1" ] || [ -L "$1" ] || return 1; ' +
  'find "$1" -maxdepth 0 -printf "%p\\0%y/%s/%m/%M/%u/%g/%T@\\n%l\\n" 2>/dev/null && return 0; ' +
  'printf "%s\\0" "$1"; stat -c "%F/%s/%a/%A/%U/%G/%Y" -- "$1"; readlink -- "$1" || echo; }; ';
const FS_ERRORS = {
  10: 'NotFound', 11: 'IsDirectory', 12: 'NotDirectory', 13: 'PermissionDenied',
  14: 'PathAlreadyExists', 15: 'DirectoryNotEmpty', 16: 'NotSupported',
};
const FS_SCRIPTS = {
  ReadFile: '[ -e "$1" ] || exit 10; [ -d "$1" ] && exit 11; [ -r "$1" ] || exit 13; exec cat -- "$1"',
  WriteFile: 'd=$(dirname -- "$1"); [ -d "$1" ] && exit 11; mkdir -p -- "$d" 2>/dev/null || exit 12; ' +
    '[ -d "$d" ] || exit 12; exec cat > "$1" || exit 13',
  MakeDirectory: 'if [ "$2" = true ]; then mkdir -p -- "$1" 2>/dev/null || exit 12; exit 0; fi; ' +
    '[ -e "$1" ] && exit 14; [ -d "$(dirname -- "$1")" ] || exit 10; mkdir -- "$1" || exit 13',
  Remove: '[ -e "$1" ] || [ -L "$1" ] || exit 10; if [ -d "$1" ] && [ ! -L "$1" ]; then ' +
    'if [ "$2" = true ]; then rm -rf -- "$1" || exit 13; else rmdir -- "$1" 2>/dev/null || exit 15; fi; ' +
    'else rm -f -- "$1" || exit 13; fi',
  Stat: 'entry "$1" || exit 10',
  ListFiles: '[ -e "$1" ] || exit 10; [ -d "$1" ] || exit 12; for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do ' +
    'entry "$f" || :; done',
};

// Each entry is `PATH\0`, then stat's line, then readlink's line (empty unless a symlink).
function fileEntries(text) {
  const parts = text.split('\0');
  const entries = [];
  let path = parts[0];
  for (const part of parts.slice(1)) {
    const lines = part.split('\n');
    const [kind, size, mode, permissions, owner, group, mtime] = lines[0].split('/');
    entries.push({
      name: path.split('/').filter(Boolean).pop() ?? '/',
      path,
      type: { l: 'symlink', 'symbolic link': 'symlink', d: 'directory', directory: 'directory' }[kind] ?? 'file',
      size: Number(size), mode: parseInt(mode, 8), permissions, owner, group,
      modified_time: Math.floor(Number(mtime)), symlink_target: lines[1] || null,
    });
    path = lines.slice(2).join('\n');
  }
  return entries;
}

function fsTools(exec, json) {
  let request = {};
  try {
    request = JSON.parse(json) ?? {};
  } catch {
    // answered below as not served
  }
  const [op] = Object.keys(request);
  const params = request[op] ?? {};
  const script = FS_SCRIPTS[op];
  const error = (kind, message) => exec.out[1].push(Buffer.from(JSON.stringify({ error_kind: kind, message, detail: params.path ?? null })));
  if (!script || typeof params.path !== 'string') {
    error('NotSupported', `${op ?? json} is not served by the local server`);
    exec.finish({ code: 1 });
    return;
  }
  const flag = String(op === 'Remove' ? !!params.recursive : params.parents !== false);
  const listing = op === 'Stat' || op === 'ListFiles';
  const raw = [];
  const stdout = listing ? (d) => raw.push(d) : (d) => exec.out[0].push(d);
  const argv = ['exec', '-i', exec.sb.name, 'sh', '-c', listing ? FS_ENTRY + script : script, 'sh', params.path, flag];
  run(exec, argv, [stdout, null], (code) => {
    if (code !== 0) {
      const kind = FS_ERRORS[code] ?? 'Unknown';
      error(kind, kind.replace(/([a-z])([A-Z])/g, '$1 $2'));
    } else if (listing) {
      const entries = fileEntries(Buffer.concat(raw).toString());
      const value = op === 'Stat' ? entries[0] : entries.sort((a, b) => a.name.localeCompare(b.name));
      exec.out[0].push(Buffer.from(JSON.stringify(value)));
    }
    return code;
  });
}

// ---- the control plane ------------------------------------------------------------------------

function checkControlPlane(call, method) {
  const md = call.metadata;
  if (md.get('x-modal-token-id')[0] !== TOKEN_ID || md.get('x-modal-token-secret')[0] !== TOKEN_SECRET) {
    fail(grpc.status.UNAUTHENTICATED, 'Invalid token id or secret (the local server takes ak-local-test / as-local-test)');
  }
  if (method !== 'AuthTokenGet' && !authTokens.has(md.get('x-modal-auth-token')[0])) {
    fail(grpc.status.UNAUTHENTICATED, 'Missing or expired auth token');
  }
}

function routerUrl(port) {
  return `https://localhost:${port}`;
}

function controlPlane(port) {
  return {
    async AuthTokenGet() {
      const token = jwt({ sub: TOKEN_ID, exp: Math.floor(Date.now() / 1000) + 3600 });
      authTokens.add(token);
      return { token };
    },
    async AppGetOrCreate(req) {
      const key = `${req.environment_name}/${req.app_name}`;
      if (!apps.has(key)) {
        if (req.object_creation_type !== 1) fail(grpc.status.NOT_FOUND, `App ${req.app_name} not found`);
        apps.set(key, id('ap-', 22));
        appNames.set(apps.get(key), req.app_name);
      }
      return { app_id: apps.get(key) };
    },
    async EnvironmentGetOrCreate(req) {
      return { environment_id: 'en-local', metadata: { name: req.deployment_name || 'main', settings: { image_builder_version: '2024.10' } } };
    },
    async ImageGetOrCreate(req) {
      const from = (req.image?.dockerfile_commands ?? []).find((c) => /^FROM\s+/i.test(c));
      const tag = from?.replace(/^FROM\s+/i, '').trim();
      const extra = (req.image?.dockerfile_commands ?? []).filter((c) => c.trim() && c !== from);
      if (!tag) fail(grpc.status.INVALID_ARGUMENT, 'the local server builds only `FROM <image>`');
      if (extra.length) {
        return { image_id: '', result: { status: STATUS.FAILURE, exception: `the local server does not build images (${extra[0]})` } };
      }
      try {
        await docker(['image', 'inspect', '--format', '{{.Id}}', tag]);
      } catch {
        return { image_id: '', result: { status: STATUS.FAILURE, exception: `image ${tag} is not on the local engine, and the local server pulls nothing` } };
      }
      const imageId = `im-${Buffer.from(tag).toString('hex').slice(0, 40)}`;
      images.set(imageId, tag);
      return { image_id: imageId, result: { status: STATUS.SUCCESS } };
    },
    async ImageFromId(req) {
      if (!images.has(req.image_id)) fail(grpc.status.NOT_FOUND, `Image ${req.image_id} not found`);
      return { image_id: req.image_id };
    },
    async SandboxCreateV2(req) {
      // The tests' slow create (cancellation while it is in flight): an app named sbx-slow-create*.
      const app = appNames.get(req.app_id) ?? '';
      if (app.startsWith('sbx-slow-create')) await new Promise((r) => setTimeout(r, 3000));
      const sb = await createSandbox(req.definition ?? {}, req.secret_sources, app);
      return { sandbox_id: sb.id, task_id: sb.taskId, tunnels: [], command_router_access: { jwt: sb.jwt, url: routerUrl(port) } };
    },
    async SandboxCreate() {
      fail(grpc.status.UNIMPLEMENTED, 'the local server serves V2 sandboxes only (MODAL_SANDBOX_V2 must not be 0)');
    },
    async SandboxGetTaskIdV2(req) {
      const sb = sandboxOf(req.sandbox_id);
      return { task_id: sb.taskId, task_result: sb.result ?? undefined };
    },
    async SandboxGetCommandRouterAccess(req) {
      const sb = sandboxOf(req.sandbox_id);
      if (sb.result) fail(grpc.status.FAILED_PRECONDITION, 'Command router access is not available: the sandbox has ended');
      return { jwt: sb.jwt, url: routerUrl(port) };
    },
    async SandboxWaitV2(req, call) {
      const sb = sandboxOf(req.sandbox_id);
      await waitResult(sb, req.timeout, call);
      return { result: sb.result ?? undefined };
    },
    async SandboxTerminateV2(req) {
      const sb = sandboxOf(req.sandbox_id);
      const existing = sb.result;
      await sb.terminate({ status: STATUS.TERMINATED, exitcode: 137 });
      return { existing_result: existing ?? undefined };
    },
    async SandboxGetTunnelsV2(req) {
      sandboxOf(req.sandbox_id);
      return { result: { status: STATUS.SUCCESS }, tunnels: [] };
    },
    async VolumeGetOrCreate(req) {
      const key = `${req.environment_name}/${req.deployment_name}`;
      if (!/^[A-Za-z0-9._-]{1,64}$/.test(req.deployment_name)) fail(grpc.status.INVALID_ARGUMENT, `invalid volume name ${req.deployment_name}`);
      if (!volumeIds.has(key)) {
        if (req.object_creation_type !== 1) fail(grpc.status.NOT_FOUND, `Volume ${req.deployment_name} not found`);
        const volumeId = id('vo-', 22);
        const dir = join(args.state, 'volumes', volumeId);
        mkdirSync(dir, { recursive: true });
        volumes.set(volumeId, dir);
        volumeIds.set(key, volumeId);
      }
      return { volume_id: volumeIds.get(key), version: 0 };
    },
  };
}

// ---- the task command router ------------------------------------------------------------------

function checkRouter(call, taskId) {
  const sb = taskOf(taskId);
  if (call.metadata.get('authorization')[0] !== `Bearer ${sb.jwt}`) {
    fail(grpc.status.UNAUTHENTICATED, 'Invalid or missing command router token');
  }
  return sb;
}

const router = {
  async TaskExecStart(req) {
    startExec(taskOf(req.task_id), req);
    return {};
  },
  async TaskExecStdioRead(req, call) {
    const exec = execOf(req);
    await exec.out[req.file_descriptor === 1 ? 1 : 0].stream(call, req.offset, (data) => ({ data }));
  },
  async TaskExecStdinWrite(req) {
    execOf(req).stdin.write(req.offset, req.data, req.eof);
    return {};
  },
  async TaskExecStdinWriteStream(_, call) {
    let exec = null;
    let offset = 0;
    for await (const msg of call) {
      if (msg.start) {
        checkRouter(call, msg.start.task_id);
        exec = execOf(msg.start);
        offset = msg.start.offset;
      } else if (!exec) {
        fail(grpc.status.INVALID_ARGUMENT, 'the first message must be start');
      } else if (msg.data) {
        exec.stdin.write(offset, msg.data, false);
        offset += msg.data.length;
      } else if (msg.end) {
        exec.stdin.write(offset, Buffer.alloc(0), true);
      }
    }
    return {};
  },
  async TaskExecStdinStatus(req) {
    const { stdin } = execOf(req);
    return { num_bytes_written: stdin.written, closed: stdin.closed };
  },
  async TaskExecWait(req, call) {
    const exec = execOf(req);
    if (!exec.exit) {
      await new Promise((resolve_) => {
        exec.exitWaiters.add(resolve_);
        call.on('cancelled', resolve_);
      });
    }
    return exec.exit ?? {};
  },
  async TaskExecPoll(req) {
    return execOf(req).exit ?? {};
  },
  async SandboxStdinWriteV2(req) {
    taskOf(req.task_id).stdin.write(req.offset, req.data, req.eof);
    return {};
  },
  async SandboxStdioReadV2(req, call) {
    const sb = taskOf(req.task_id);
    await sb.out[req.file_descriptor === 1 ? 1 : 0].stream(call, req.offset, (data, at) => ({ data, starting_offset: at }));
  },
};

// ---- plumbing ---------------------------------------------------------------------------------

// grpc-js handlers from `handlers` (request, call) => response: unary and client-streaming calls
// answer through the callback, server-streaming ones write to the call; a thrown RpcError becomes
// its status, anything else INTERNAL.
function serve(handlers, check) {
  const out = {};
  for (const [method, fn] of Object.entries(handlers)) {
    out[method] = async (call, callback) => {
      try {
        check(call, method);
        const value = await fn(call.request, call);
        callback?.(null, value);
      } catch (e) {
        const status = { code: e instanceof RpcError ? e.code : grpc.status.INTERNAL, details: e.message };
        if (callback) callback(status);
        else call.destroy(status);
      }
    };
  }
  return out;
}

// `routerPort`: where the router URLs point. Clients of a control plane on this machine dial the
// router in plaintext whatever its URL says (the SDKs' rule), so both servers name the h2c port.
async function listen(creds, routerPort = null) {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 100 << 20, 'grpc.max_send_message_length': 100 << 20 });
  const port = await new Promise((resolve_, reject) => {
    server.bindAsync('127.0.0.1:0', creds, (err, p) => (err ? reject(err) : resolve_(p)));
  });
  server.addService(proto.modal.client.ModalClient.service, serve(controlPlane(routerPort ?? port), checkControlPlane));
  server.addService(proto.modal.task_command_router.TaskCommandRouter.service,
    serve(router, (call, method) => {
      if (method === 'TaskExecStdinWriteStream') return;
      checkRouter(call, call.request.task_id);
    }));
  return { server, port };
}

async function main() {
  if (runtime) {
    const runtimes = await docker(['info', '--format', '{{json .Runtimes}}']).catch(() => '{}');
    if (!(runtime in JSON.parse(runtimes))) {
      console.error(`the engine has no runtime ${runtime}; sandboxes run on its default`);
      runtime = '';
    }
  }
  const plain = await listen(grpc.ServerCredentials.createInsecure());
  const ports = { pid: process.pid, grpc: plain.port, runtime: runtime || 'default', host: hostname() };
  const servers = [plain.server];
  if (args.tlsCert) {
    const creds = grpc.ServerCredentials.createSsl(null, [{ cert_chain: readFileSync(args.tlsCert), private_key: readFileSync(args.tlsKey) }], false);
    const tls = await listen(creds, plain.port);
    ports.grpcTls = tls.port;
    servers.push(tls.server);
  }
  writeFileSync(`${args.portsFile}.tmp`, JSON.stringify(ports));
  renameSync(`${args.portsFile}.tmp`, args.portsFile);
  const shutdown = async () => {
    await Promise.all([...sandboxes.values()].map((sb) => sb.terminate({ status: STATUS.TERMINATED, exitcode: 137 })));
    for (const s of servers) s.forceShutdown();
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
