// A local E2B-compatible server for sandboxio's tests: the control plane (REST), envd (Connect
// RPC with the JSON codec, and /files) and the code interpreter (/execute, /contexts), over
// plain HTTP and over TLS (HTTP/2 and HTTP/1.1). Its faithfulness to E2B is proven by driving
// it with the official `e2b` and `@e2b/code-interpreter` npm packages (sdk_scenario.mjs).
//
// It really runs what it is asked to run. A sandbox is an overlay of a Debian root filesystem
// with its own mount, PID and network namespaces; commands enter those namespaces with nsenter,
// as the template's default user `user` unless the call names another. The network namespace
// has only loopback, so egress is denied, unless network.allowOut lists destinations: then
// firewall.py enforces allowOut and denyOut the way E2B documents them, reaching only the test
// routes registered on this server. Killing a sandbox (DELETE, or its timeout running out)
// kills its PID namespace's init, which ends every process in it. Needs root (mount, unshare,
// iptables).
//
//   node server.mjs --rootfs DIR --state DIR --ports-file FILE [--api-key KEY]
//                   [--tls-cert PEM --tls-key PEM]
// FILE receives {"api":P,"sandbox":P,"apiTls":P,"sandboxTls":P,"pid":N} once every port
// listens (127.0.0.1, ports chosen by the kernel). SIGTERM kills every sandbox and exits.
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const KERNEL = fs.readFileSync(path.join(here, 'kernel.py'), 'utf8');
const FIREWALL = path.join(here, 'firewall.py');
// Test resolvers and routes by token, registered through POST /_sandboxio/test-network and
// named by a sandbox's metadata (TEST_NETWORK_KEY): the names its firewall answers and where
// its allowed connections go on this machine. An extension of this test server; E2B has none.
const TEST_NETWORK_KEY = 'sandboxio-test-network';
const testNetworks = new Map();
const ENVD_VERSION = '0.6.13';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const HOME = '/home/user';
// E2B runs commands as the template's default user, `user` (uid 1000, home /home/user), unless
// a call names another (envd's Basic authorization, or `username=` on /files); files written
// through envd are owned by that user. Code-interpreter contexts run as root, as E2B's do.
// (https://e2b.dev/docs/template/user-and-workdir; envd's upload.go chowns what it writes.)
const DEFAULT_USER = 'user';

function parseArgs(argv) {
  const out = { apiKey: 'e2b_local_test_key' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[key] = argv[i + 1];
  }
  for (const need of ['rootfs', 'state', 'portsFile']) {
    if (!out[need]) throw new Error(`missing --${need}`);
  }
  return out;
}

const opts = parseArgs(process.argv.slice(2));
const sandboxes = new Map();  // the running ones, by id
const allSandboxes = new Set();  // until their mount is removed
const rateLimited = new Map();  // create requests seen per session, for sbx-rate-limited*
const log = (...a) => process.stderr.write(`[e2b-local] ${a.join(' ')}\n`);

// ---------------------------------------------------------------- helpers

function sendJson(res, status, value, headers = {}) {
  const body = value === undefined ? '' : JSON.stringify(value);
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(body);
}

const apiError = (res, status, message) => sendJson(res, status, { code: status, message });

function readBody(req, limit = 1 << 30) {
  return new Promise((resolve, reject) => {
    const parts = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(new Error('body too large'));
        req.destroy();
      } else parts.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

async function readJson(req) {
  const raw = await readBody(req, 16 << 20);
  if (raw.length === 0) return {};
  return JSON.parse(raw.toString('utf8'));
}

// Cuts a response off the way a vanished sandbox does: no end of body, no end-stream envelope.
function abort(res) {
  if (res.stream) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  else if (res.socket) res.socket.destroy();
}

const rfc3339 = (ms) => new Date(ms).toISOString();

// ---------------------------------------------------------------- sandboxes

function sandboxJson(sb) {
  return {
    sandboxID: sb.id,
    templateID: sb.templateID,
    clientID: '6532622b',
    envdVersion: ENVD_VERSION,
    envdAccessToken: sb.accessToken,
    trafficAccessToken: null,
    domain: null,
    alias: sb.templateID,
  };
}

function listedJson(sb) {
  return {
    sandboxID: sb.id,
    templateID: sb.templateID,
    clientID: '6532622b',
    alias: sb.templateID,
    startedAt: rfc3339(sb.startedAt),
    endAt: rfc3339(sb.endAt),
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 2048,
    envdVersion: ENVD_VERSION,
    state: sb.state,
    metadata: sb.metadata,
  };
}

// The sandbox's PID 1, once it is ready: it has chrooted, mounted its /proc and devpts and
// become the python3 reaper. Until then a command entered through its namespaces (nsenter
// --root) would run in the host's root, or without /proc: a sandbox is ready only after.
function waitForChild(pid) {
  const deadline = Date.now() + 5000;
  let child = 0;
  for (;;) {
    try {
      const kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
      if (kids) child = Number(kids.split(/\s+/)[0]);
      if (child && /python3/.test(fs.readlinkSync(`/proc/${child}/exe`))) return child;
    } catch {
      if (!child) return 0;
    }
    if (Date.now() > deadline) return child;
    execFileSync('sleep', ['0.01']);
  }
}

// The template's default user, added to the sandbox's own copy of /etc when the root
// filesystem lacks it.
function addDefaultUser(root) {
  const passwd = path.join(root, 'etc/passwd');
  if (!/^user:/m.test(fs.readFileSync(passwd, 'utf8'))) {
    fs.appendFileSync(passwd, `${DEFAULT_USER}:x:1000:1000::${HOME}:/bin/bash\n`);
    fs.appendFileSync(path.join(root, 'etc/group'), `${DEFAULT_USER}:x:1000:\n`);
  }
  fs.mkdirSync(path.join(root, HOME), { recursive: true });
  fs.chownSync(path.join(root, HOME), 1000, 1000);
}

// A user of the sandbox by name, from its /etc/passwd: { name, uid, gid, home }.
function lookupUser(sb, name) {
  for (const line of fs.readFileSync(path.join(sb.root, 'etc/passwd'), 'utf8').split('\n')) {
    const f = line.split(':');
    if (f[0] === name && f.length >= 6) {
      return { name, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || '/' };
    }
  }
  return null;
}

// The user a call runs as: the one its Basic authorization names (envd's RPCs), or the
// default user. An unknown name is refused, as envd refuses it.
function callUser(sb, req, named) {
  let name = named;
  const auth = /^Basic\s+(\S+)/i.exec(req.headers.authorization ?? '');
  if (!name && auth) name = Buffer.from(auth[1], 'base64').toString('utf8').split(':')[0];
  const u = lookupUser(sb, name || DEFAULT_USER);
  if (!u) throw new ConnectError('unauthenticated', `invalid username: '${name}'`);
  return u;
}

// Gives what a call made to the user it ran as, as envd does: the new file or directory, and
// every directory it had to create on the way.
function chownMade(sb, made, user) {
  for (const host of made) {
    try { fs.chownSync(host, user.uid, user.gid); } catch { /* gone meanwhile */ }
  }
}

// mkdir -p that reports which directories it created (host paths, outermost first).
function makeDirs(host) {
  const made = [];
  let at = host;
  while (!fs.existsSync(at)) {
    made.unshift(at);
    at = path.dirname(at);
  }
  fs.mkdirSync(host, { recursive: true });
  return made;
}

function createSandbox(body) {
  const id = 'i' + crypto.randomBytes(10).toString('hex');
  const dir = path.join(opts.state, id);
  const root = path.join(dir, 'root');
  for (const d of ['upper', 'work', 'root']) fs.mkdirSync(path.join(dir, d), { recursive: true });
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o',
    `lowerdir=${opts.rootfs},upperdir=${dir}/upper,workdir=${dir}/work`, root]);
  addDefaultUser(root);
  // PID 1 of the sandbox: mounts its /proc and its own pseudo-terminals, then reaps orphans
  // until it is killed.
  const init = spawn('unshare', ['--net', '--pid', '--mount', '--fork', '--kill-child',
    '--propagation', 'private', 'chroot', root, '/bin/sh', '-c',
    'mount -t proc proc /proc && ' +
    'mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && ' +
    'mount --bind /dev/pts/ptmx /dev/ptmx && exec python3 -c "import os, signal\n' +
    'while True:\n    try: os.wait()\n    except ChildProcessError: signal.pause()"'],
  { stdio: 'ignore' });
  const nsPid = waitForChild(init.pid);
  const timeout = Number(body.timeout ?? 300);
  const sb = {
    id, dir, root, init, nsPid,
    templateID: body.templateID,
    metadata: body.metadata ?? {},
    envVars: body.envVars ?? {},
    internet: body.allow_internet_access ?? true,
    network: body.network ?? null,
    accessToken: 'tok_' + crypto.randomBytes(12).toString('hex'),
    startedAt: Date.now(),
    endAt: Date.now() + timeout * 1000,
    timer: null,
    state: 'running',
    procs: new Map(),
    contexts: new Map(),
    responses: new Set(),
    connections: new Set(),
  };
  setTimeout_(sb, timeout);
  sandboxes.set(id, sb);
  allSandboxes.add(sb);
  init.on('exit', () => destroySandbox(sb));
  sb.ready = startFirewall(sb);
  log('created', id, 'timeout', timeout, 's');
  return sb;
}

// network.allowOut gets the sandbox a route out, through firewall.py: a veth pair inside its
// network namespace carries the default route, and iptables there sends every TCP connection
// (and, when a domain is allowed, DNS for 8.8.8.8) to the firewall on the sandbox's loopback.
// Anything else leaving is rejected. Without allowOut the namespace keeps loopback alone.
async function startFirewall(sb) {
  const allowOut = sb.network?.allowOut ?? [];
  if (allowOut.length === 0) return;
  const isDomain = (entry) => !/^[0-9.]+(\/\d+)?$/.test(entry) && !entry.includes(':');
  const withDomains = allowOut.some(isDomain);
  const denyOut = [...(sb.network?.denyOut ?? [])];
  if (!sb.internet) denyOut.push('0.0.0.0/0');
  const test = testNetworks.get(sb.metadata[TEST_NETWORK_KEY]) ?? {};
  const config = { allowOut, denyOut, names: test.names ?? {}, routes: test.routes ?? {} };
  if (withDomains) fs.writeFileSync(path.join(sb.root, 'etc/resolv.conf'), 'nameserver 8.8.8.8\n');
  const ns = `/proc/${sb.nsPid}/ns/net`;
  execFileSync('nsenter', [`--net=${ns}`, 'sh', '-ec', [
    'ip link set lo up',
    'ip link add sbx0 type veth peer name sbx1',
    'ip addr add 10.250.0.2/32 dev sbx0',
    'ip link set sbx0 up', 'ip link set sbx1 up',
    'ip route add default dev sbx0',
    'iptables -t nat -A OUTPUT -p tcp ! -d 127.0.0.0/8 -j REDIRECT --to-ports 15001',
    ...(withDomains
      ? ['iptables -t nat -A OUTPUT -p udp -d 8.8.8.8 --dport 53 -j REDIRECT --to-ports 15053']
      : []),
    // Redirected packets, and the firewall's answers on loopback, pass; nothing else leaves.
    'iptables -A OUTPUT -o lo -j ACCEPT',
    'iptables -A OUTPUT -m conntrack --ctstate DNAT,ESTABLISHED,RELATED -j ACCEPT',
    'iptables -A OUTPUT -j REJECT',
  ].join('\n')], { stdio: 'pipe' });
  const fw = spawn('python3', [FIREWALL, ns, JSON.stringify(config)],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  sb.firewall = fw;
  fw.stderr.on('data', (d) => process.stderr.write(`[${sb.id}] ${d}`));
  await new Promise((resolve, reject) => {
    fw.stdout.once('data', (d) => (String(d).startsWith('ready') ? resolve() : reject(new Error(String(d)))));
    fw.once('exit', (code) => reject(new Error(`the firewall ended (${code})`)));
  });
}

function setTimeout_(sb, seconds) {
  clearTimeout(sb.timer);
  sb.endAt = Date.now() + seconds * 1000;
  sb.timer = setTimeout(() => {
    log('timeout ran out for', sb.id);
    killSandbox(sb);
  }, seconds * 1000);
}

// Stops or continues every process of a sandbox (its PID namespace), as pausing a VM does.
function freeze(sb, signal) {
  let ns;
  try { ns = fs.readlinkSync(`/proc/${sb.nsPid}/ns/pid`); } catch { return; }
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readlinkSync(`/proc/${entry}/ns/pid`) === ns) process.kill(Number(entry), signal);
    } catch { /* gone meanwhile */ }
  }
}

function killSandbox(sb) {
  if (!sandboxes.has(sb.id)) return;
  sandboxes.delete(sb.id);
  clearTimeout(sb.timer);
  try { process.kill(sb.init.pid, 'SIGKILL'); } catch { /* already gone */ }
  for (const res of sb.responses) abort(res);
  sb.responses.clear();
}

function destroySandbox(sb) {
  killSandbox(sb);
  if (sb.destroyed) return;
  sb.destroyed = true;
  for (const ctx of sb.contexts.values()) try { ctx.kernel.kill('SIGKILL'); } catch { /* gone */ }
  for (const p of sb.procs.values()) try { p.child.kill('SIGKILL'); } catch { /* gone */ }
  if (sb.firewall) try { sb.firewall.kill('SIGKILL'); } catch { /* gone */ }
  let tries = 0;
  const cleanup = () => {
    try {
      execFileSync('umount', [sb.root], { stdio: 'ignore' });
      fs.rmSync(sb.dir, { recursive: true, force: true });
      sb.removed = true;
      allSandboxes.delete(sb);
      log('removed', sb.id);
    } catch {
      if (++tries < 50) {
        setTimeout(cleanup, 100);  // a process still leaving the mount
      } else {
        let holders = '';
        try {
          holders = execFileSync('fuser', ['-vm', sb.root], { encoding: 'utf8', stdio: 'pipe' });
        } catch (e) { holders = String(e.stderr ?? ''); }
        log('could not unmount', sb.root, holders);
      }
    }
  };
  cleanup();
}

// Runs argv inside the sandbox's namespaces, in `cwd`, with `env`. Returns the ChildProcess
// (nsenter; it forwards the exit status and the signal of what it ran).
function enter(sb, argv, { cwd = HOME, env = {}, stdin = false, user = null } = {}) {
  const full = {
    PATH: DEFAULT_PATH, HOME: user?.home ?? HOME, USER: user?.name ?? 'root', LANG: 'C.UTF-8',
    ...sb.envVars, ...env,
  };
  const as = user && user.uid !== 0 ? ['-S', String(user.uid), '-G', String(user.gid)] : [];
  return spawn('nsenter', ['-t', String(sb.nsPid), '--net', '--pid', '--mount', '--root', '--wd',
    ...as, '--', '/bin/sh', '-c', 'cd "$0" && exec "$@"', cwd, ...argv],
  { env: full, stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
}

// The process nsenter started (the one envd would signal), or nsenter itself.
function innerPid(child) {
  try {
    const kids = fs.readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim();
    if (kids) return Number(kids.split(/\s+/)[0]);
  } catch { /* ended */ }
  return child.pid;
}

// A path inside the sandbox as a host path under its root (".." cannot climb out).
function hostPath(sb, p) {
  const abs = path.posix.resolve(HOME, p || HOME);
  return { abs, host: path.join(sb.root, abs) };
}

// ---------------------------------------------------------------- control plane

async function api(req, res) {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  if (p === '/health') return sendJson(res, 200, { message: 'Health check successful' });
  // Test-only: TLS handshakes so far, full and resumed.
  if (p === '/_test/tls' && req.method === 'GET') return sendJson(res, 200, handshakes);
  // Test-only: how many TCP connections carried requests for a sandbox (keep-alive tests).
  if (p === '/_test/connections' && req.method === 'GET') {
    const sb = sandboxes.get(url.searchParams.get('sandbox') ?? '');
    if (!sb) return apiError(res, 404, 'no such sandbox');
    const addresses = [...sb.connections];
    return sendJson(res, 200, {
      connections: sb.connections.size,
      addresses,
      resumed: addresses.filter((a) => resumedFrom.has(a)).length,
    });
  }
  if (req.headers['x-api-key'] !== opts.apiKey) {
    return apiError(res, 401, 'Invalid API key, it must start with e2b_ and be 40 chars long');
  }
  let m;
  if (req.method === 'POST' && p === '/_sandboxio/test-network') {
    // {"names": {NAME: ADDRESS}, "routes": {"ADDRESS:PORT": "127.0.0.1:PORT"}} -> {"token"}.
    const body = await readJson(req);
    const bad = Object.values(body.routes ?? {}).find((to) => !/^127\.0\.0\.1:\d+$/.test(to));
    if (bad) return apiError(res, 400, `routes lead to this machine's loopback only, not ${bad}`);
    const token = crypto.randomBytes(8).toString('hex');
    testNetworks.set(token, { names: body.names ?? {}, routes: body.routes ?? {} });
    return sendJson(res, 201, { token });
  }
  if (req.method === 'POST' && (p === '/v2/sandboxes' || p === '/sandboxes')) {
    const body = await readJson(req);
    if (!body.templateID) return apiError(res, 400, 'templateID is required');
    if (body.templateID === 'sbx-v1-only' && p === '/v2/sandboxes') {
      // For the fallback test: a control plane that predates POST /v2/sandboxes.
      return apiError(res, 404, 'Not Found');
    }
    if (p === '/sandboxes' && body.secure !== true && body.templateID === 'sbx-v1-only') {
      return apiError(res, 400, 'v1 creates from sandboxio must ask for secure: true');
    }
    if (body.templateID === 'no-such-template') {
      return apiError(res, 404, `template '${body.templateID}' not found`);
    }
    if (body.templateID.startsWith('sbx-rate-limited')) {
      // For the retry tests: 429 with Retry-After: 1 on the first request of each session,
      // every time for sbx-rate-limited-always.
      const key = body.metadata?.['io.sandboxio.session'] ?? '';
      const seen = rateLimited.get(key) ?? 0;
      rateLimited.set(key, seen + 1);
      if (body.templateID === 'sbx-rate-limited-always' || seen === 0) {
        res.writeHead(429, { 'Content-Type': 'application/json', 'Retry-After': '1' });
        return res.end(JSON.stringify({ code: 429, message: 'rate limit exceeded' }));
      }
    }
    if (body.templateID === 'sbx-slow-create') {
      // For the create-timeout and cancellation tests: the answer takes 3 s, and a client that
      // hangs up before then gets no sandbox.
      const gone = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(false), 3000);
        res.on('close', () => { clearTimeout(timer); resolve(true); });
      });
      if (gone) return undefined;
    }
    const sb = createSandbox(body);
    try {
      await sb.ready;
    } catch (e) {
      log('the firewall of', sb.id, 'failed:', e.message);
      killSandbox(sb);
      return apiError(res, 500, `the sandbox's network could not be set up: ${e.message}`);
    }
    return sendJson(res, 201, sandboxJson(sb));
  }
  if (req.method === 'GET' && (p === '/v2/sandboxes' || p === '/sandboxes')) {
    const want = new URLSearchParams(url.searchParams.get('metadata') ?? '');
    const states = (url.searchParams.get('state') ?? 'running').split(',');
    const list = [...sandboxes.values()].filter((sb) => {
      if (!states.includes(sb.state)) return false;
      for (const [k, v] of want) if (sb.metadata[k] !== v) return false;
      return true;
    });
    return sendJson(res, 200, list.map(listedJson), { 'X-Next-Token': '' });
  }
  if ((m = p.match(/^\/sandboxes\/([^/]+)$/))) {
    const sb = sandboxes.get(m[1]);
    if (!sb) return apiError(res, 404, `sandbox "${m[1]}" not found`);
    if (req.method === 'DELETE') {
      killSandbox(sb);
      res.writeHead(204);
      return res.end();
    }
    if (req.method === 'GET') {
      return sendJson(res, 200, {
        ...listedJson(sb), envdAccessToken: sb.accessToken, domain: null,
        allowInternetAccess: sb.internet,
      });
    }
  }
  if ((m = p.match(/^(?:\/v2)?\/sandboxes\/([^/]+)\/(connect|timeout|pause)$/)) && req.method === 'POST') {
    const body = await readJson(req);
    const sb = sandboxes.get(m[1]);
    if (!sb) return apiError(res, 404, `sandbox "${m[1]}" not found`);
    if (m[2] === 'pause') {
      if (sb.state === 'paused') return apiError(res, 409, `sandbox ${sb.id} is already paused`);
      freeze(sb, 'SIGSTOP');
      sb.state = 'paused';
      clearTimeout(sb.timer);  // a paused sandbox does not time out
      res.writeHead(204);
      return res.end();
    }
    const seconds = Number(body.timeout ?? 300);
    if (m[2] === 'timeout') {
      setTimeout_(sb, seconds);
      res.writeHead(204);
      return res.end();
    }
    if (sb.state === 'paused') {  // connecting resumes
      freeze(sb, 'SIGCONT');
      sb.state = 'running';
      setTimeout_(sb, seconds);
      return sendJson(res, 201, sandboxJson(sb));
    }
    if (sb.endAt < Date.now() + seconds * 1000) setTimeout_(sb, seconds);
    return sendJson(res, 200, sandboxJson(sb));
  }
  return apiError(res, 404, `no route for ${req.method} ${p}`);
}

// ---------------------------------------------------------------- Connect protocol

const CONNECT_STATUS = {
  canceled: 499, unknown: 500, invalid_argument: 400, deadline_exceeded: 504, not_found: 404,
  already_exists: 409, permission_denied: 403, resource_exhausted: 429,
  failed_precondition: 400, aborted: 409, out_of_range: 400, unimplemented: 501, internal: 500,
  unavailable: 503, data_loss: 500, unauthenticated: 401,
};

class ConnectError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function envelope(flags, value) {
  const body = Buffer.from(JSON.stringify(value));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

function checkConnect(req, streaming) {
  const type = (req.headers['content-type'] ?? '').split(';')[0];
  const want = streaming ? 'application/connect+json' : 'application/json';
  if (type !== want) throw new ConnectError('invalid_argument', `expected ${want}, got ${type}`);
  if (!streaming && req.headers['connect-protocol-version'] !== '1') {
    throw new ConnectError('invalid_argument', 'missing Connect-Protocol-Version: 1');
  }
}

async function readEnvelope(req) {
  const raw = await readBody(req, 16 << 20);
  if (raw.length < 5 || raw.readUInt32BE(1) !== raw.length - 5 || raw[0] !== 0) {
    throw new ConnectError('invalid_argument', 'the request is not one uncompressed envelope');
  }
  return JSON.parse(raw.subarray(5).toString('utf8'));
}

// Go's os.ProcessState.String() for a signal, as envd reports it.
const GO_SIGNAL = {
  SIGKILL: 'killed', SIGTERM: 'terminated', SIGINT: 'interrupt', SIGHUP: 'hangup',
  SIGQUIT: 'quit', SIGABRT: 'aborted', SIGSEGV: 'segmentation fault', SIGPIPE: 'broken pipe',
  SIGUSR1: 'user defined signal 1', SIGUSR2: 'user defined signal 2', SIGALRM: 'alarm clock',
};

function endEvent(code, signal) {
  if (signal) {
    const status = `signal: ${GO_SIGNAL[signal] ?? signal}`;
    return { exitCode: -1, status, error: status };
  }
  const status = `exit status ${code}`;
  return code === 0 ? { exited: true, status } : { exitCode: code, exited: true, status, error: status };
}

function startProcess(sb, req, res, msg) {
  const cfg = msg.process ?? {};
  if (!cfg.cmd) throw new ConnectError('invalid_argument', 'process.cmd is required');
  const user = callUser(sb, req);
  const cwd = cfg.cwd || user.home;
  if (!fs.existsSync(hostPath(sb, cwd).host)) {
    throw new ConnectError('invalid_argument', `error starting process: cwd ${cwd} does not exist`);
  }
  // A PTY is what util-linux's `script` gives the command; its bytes go out as `pty` data.
  const pty = msg.pty?.size;
  const argv = pty
    ? ['script', '-qfec', `stty cols ${Number(pty.cols) || 80} rows ${Number(pty.rows) || 24}; ` +
        [cfg.cmd, ...(cfg.args ?? [])].map((a) => `'${String(a).replace(/'/g, "'\\''")}'`).join(' '),
      '/dev/null']
    : [cfg.cmd, ...(cfg.args ?? [])];
  const child = enter(sb, argv,
    { cwd, user, env: { ...(pty ? { TERM: 'xterm-256color' } : {}), ...(cfg.envs ?? {}) }, stdin: msg.stdin !== false || !!pty });
  const proc = { child, config: cfg, tag: msg.tag, pid: child.pid, streams: new Set([res]) };
  sb.procs.set(child.pid, proc);
  sb.responses.add(res);
  res.writeHead(200, { 'Content-Type': 'application/connect+json' });
  res.write(envelope(0, { event: { start: { pid: child.pid } } }));
  const keepalive = setInterval(() => {
    res.write(envelope(0, { event: { keepalive: {} } }));
  }, Number(req.headers['keepalive-ping-interval'] ?? 50) * 1000);
  const lifetime = Number(req.headers['connect-timeout-ms'] ?? 0);
  let timedOut = false;
  const lifetimeTimer = lifetime > 0 ? setTimeout(() => {
    timedOut = true;
    try { process.kill(innerPid(child), 'SIGKILL'); } catch { /* ended */ }
  }, lifetime) : null;
  let clientGone = false;
  res.on('close', () => { clientGone = true; });
  const forward = (stream, name) => {
    stream.on('data', (chunk) => {
      if (clientGone) return;
      if (!res.write(envelope(0, { event: { data: { [name]: chunk.toString('base64') } } }))) {
        stream.pause();
        res.once('drain', () => stream.resume());
      }
    });
  };
  forward(child.stdout, pty ? 'pty' : 'stdout');
  forward(child.stderr, pty ? 'pty' : 'stderr');
  child.on('close', (code, signal) => {
    clearInterval(keepalive);
    clearTimeout(lifetimeTimer);
    sb.procs.delete(child.pid);
    sb.responses.delete(res);
    if (clientGone || !sandboxes.has(sb.id)) return;
    res.write(envelope(0, { event: { end: endEvent(code, signal) } }));
    res.end(envelope(2, timedOut
      ? { error: { code: 'deadline_exceeded', message: 'the process outlived Connect-Timeout-Ms' } }
      : {}));
  });
  child.on('error', (e) => log('spawn failed:', e.message));
}

function findProcess(sb, selector = {}) {
  for (const p of sb.procs.values()) {
    if ((selector.pid !== undefined && p.pid === selector.pid) ||
        (selector.tag !== undefined && p.tag === selector.tag)) return p;
  }
  throw new ConnectError('not_found', `process with ${JSON.stringify(selector)} not found`);
}

function entryInfo(abs, host) {
  const st = fs.lstatSync(host);
  const type = st.isDirectory() ? 'FILE_TYPE_DIRECTORY'
    : st.isSymbolicLink() ? 'FILE_TYPE_SYMLINK' : 'FILE_TYPE_FILE';
  const out = {
    name: path.posix.basename(abs), type, path: abs, size: String(st.size), mode: st.mode & 0o7777,
    permissions: modeString(st), owner: 'root', group: 'root',
    modifiedTime: new Date(st.mtimeMs).toISOString(),
  };
  if (st.isSymbolicLink()) out.symlinkTarget = fs.readlinkSync(host);
  return out;
}

function modeString(st) {
  const kind = st.isDirectory() ? 'd' : st.isSymbolicLink() ? 'L' : '-';
  let s = '';
  for (let i = 8; i >= 0; --i) s += (st.mode >> i) & 1 ? 'rwx'[(8 - i) % 3] : '-';
  return kind + s;
}

function fsError(e, abs) {
  if (e instanceof ConnectError) return e;
  if (e.code === 'ENOENT') return new ConnectError('not_found', `no such file or directory: ${abs}`);
  if (e.code === 'ENOTDIR') return new ConnectError('invalid_argument', `path is not a directory: ${abs}`);
  if (e.code === 'EEXIST') return new ConnectError('already_exists', `path already exists: ${abs}`);
  if (e.code === 'EACCES' || e.code === 'EPERM') return new ConnectError('permission_denied', `${e.message}`);
  return new ConnectError('internal', e.message);
}

function listDir(abs, host, depth, out) {
  for (const name of fs.readdirSync(host).sort()) {
    const childAbs = path.posix.join(abs, name);
    const childHost = path.join(host, name);
    const info = entryInfo(childAbs, childHost);
    out.push(info);
    if (depth > 1 && info.type === 'FILE_TYPE_DIRECTORY') listDir(childAbs, childHost, depth - 1, out);
  }
  return out;
}

const UNARY = {
  'process.Process/SendSignal': (sb, msg) => {
    const p = findProcess(sb, msg.process);
    const sig = msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : 'SIGKILL';
    try { process.kill(innerPid(p.child), sig); } catch { /* ended meanwhile */ }
    return {};
  },
  'process.Process/SendInput': (sb, msg) => {
    const p = findProcess(sb, msg.process);
    if (!p.child.stdin) throw new ConnectError('failed_precondition', 'stdin is not enabled');
    p.child.stdin.write(Buffer.from(msg.input?.stdin ?? msg.input?.pty ?? '', 'base64'));
    return {};
  },
  'process.Process/CloseStdin': (sb, msg) => {
    const p = findProcess(sb, msg.process);
    if (p.child.stdin) p.child.stdin.end();
    return {};
  },
  'process.Process/List': (sb) => ({
    processes: [...sb.procs.values()].map((p) => ({ config: p.config, pid: p.pid, tag: p.tag })),
  }),
  'filesystem.Filesystem/Stat': (sb, msg) => {
    const { abs, host } = hostPath(sb, msg.path);
    try { return { entry: entryInfo(abs, host) }; } catch (e) { throw fsError(e, abs); }
  },
  'filesystem.Filesystem/MakeDir': (sb, msg, req) => {
    const { abs, host } = hostPath(sb, msg.path);
    if (fs.existsSync(host)) throw new ConnectError('already_exists', `directory already exists: ${abs}`);
    const user = callUser(sb, req);
    try {
      chownMade(sb, makeDirs(host), user);
      return { entry: entryInfo(abs, host) };
    } catch (e) { throw fsError(e, abs); }
  },
  'filesystem.Filesystem/ListDir': (sb, msg) => {
    const { abs, host } = hostPath(sb, msg.path);
    try {
      if (!fs.statSync(host).isDirectory()) {
        throw new ConnectError('invalid_argument', `path is not a directory: ${abs}`);
      }
      return { entries: listDir(abs, host, Math.max(1, Number(msg.depth ?? 1)), []) };
    } catch (e) { throw fsError(e, abs); }
  },
  'filesystem.Filesystem/Remove': (sb, msg) => {
    const { abs, host } = hostPath(sb, msg.path);
    try {
      fs.lstatSync(host);
      fs.rmSync(host, { recursive: true, force: true });
      return {};
    } catch (e) { throw fsError(e, abs); }
  },
  'filesystem.Filesystem/Move': (sb, msg) => {
    const from = hostPath(sb, msg.source);
    const to = hostPath(sb, msg.destination);
    try {
      fs.mkdirSync(path.dirname(to.host), { recursive: true });
      fs.renameSync(from.host, to.host);
      return { entry: entryInfo(to.abs, to.host) };
    } catch (e) { throw fsError(e, from.abs); }
  },
};

async function connectCall(sb, method, req, res) {
  if (method === 'process.Process/Start') {
    try {
      checkConnect(req, true);
      startProcess(sb, req, res, await readEnvelope(req));
    } catch (e) {
      const err = e instanceof ConnectError ? e : new ConnectError('internal', e.message);
      res.writeHead(200, { 'Content-Type': 'application/connect+json' });
      res.end(envelope(2, { error: { code: err.code, message: err.message } }));
    }
    return;
  }
  const handler = UNARY[method];
  try {
    if (!handler) throw new ConnectError('unimplemented', `${method} is not implemented`);
    checkConnect(req, false);
    sendJson(res, 200, handler(sb, await readJson(req), req));
  } catch (e) {
    const err = e instanceof ConnectError ? e : new ConnectError('internal', e.message);
    sendJson(res, CONNECT_STATUS[err.code] ?? 500, { code: err.code, message: err.message });
  }
}

// ---------------------------------------------------------------- /files

function splitMultipart(body, boundary) {
  const files = [];
  const delim = Buffer.from(`--${boundary}`);
  let at = body.indexOf(delim);
  while (at >= 0) {
    const start = at + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const headEnd = body.indexOf('\r\n\r\n', start);
    const next = body.indexOf(delim, headEnd);
    if (headEnd < 0 || next < 0) break;
    const head = body.subarray(start, headEnd).toString();
    const filename = /filename="([^"]*)"/.exec(head)?.[1];
    files.push({ filename, data: body.subarray(headEnd + 4, next - 2) });
    at = next;
  }
  return files;
}

async function files(sb, req, res, url) {
  const target = url.searchParams.get('path');
  if (req.method === 'GET') {
    const { abs, host } = hostPath(sb, target);
    let st;
    try { st = fs.statSync(host); } catch {
      return apiError(res, 404, `path '${abs}' does not exist`);
    }
    if (st.isDirectory()) return apiError(res, 400, `path '${abs}' is a directory`);
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': st.size });
    // pipeline closes the file when the client goes away (a file left open keeps the mount busy).
    return pipeline(fs.createReadStream(host), res).catch(() => {});
  }
  if (req.method !== 'POST') return apiError(res, 405, 'method not allowed');
  const type = req.headers['content-type'] ?? '';
  const written = [];
  const user = lookupUser(sb, url.searchParams.get('username') || DEFAULT_USER);
  if (!user) return apiError(res, 401, `error looking up user '${url.searchParams.get('username')}'`);
  const place = (p) => {
    const { abs, host } = hostPath(sb, p);
    if (fs.existsSync(host) && fs.statSync(host).isDirectory()) {
      throw Object.assign(new Error(`path '${abs}' is a directory`), { status: 400 });
    }
    chownMade(sb, makeDirs(path.dirname(host)), user);
    return { abs, host };
  };
  try {
    if (type.startsWith('multipart/form-data')) {
      const boundary = /boundary=(.+)$/.exec(type)?.[1];
      for (const f of splitMultipart(await readBody(req), boundary)) {
        const { abs, host } = place(target ?? f.filename);
        fs.writeFileSync(host, f.data);
        chownMade(sb, [host], user);
        written.push({ name: path.posix.basename(abs), path: abs, type: 'file' });
      }
    } else {
      if (!target) return apiError(res, 400, 'path is required for application/octet-stream');
      const { abs, host } = place(target);
      const out = fs.createWriteStream(host);
      out.once('open', () => chownMade(sb, [host], user));
      await pipeline(req, out);
      written.push({ name: path.posix.basename(abs), path: abs, type: 'file' });
    }
  } catch (e) {
    return apiError(res, e.status ?? (e.code === 'ENOTDIR' ? 400 : 500), e.message);
  }
  return sendJson(res, 200, written);
}

// ---------------------------------------------------------------- code interpreter

function startKernel(sb, ctx) {
  ctx.kernel = enter(sb, ['python3', '-u', '-c', KERNEL],
    { cwd: ctx.cwd, env: { SBX_CONTEXT_CWD: ctx.cwd }, stdin: true });
  ctx.kernel.stdin.on('error', () => {});
  ctx.lines = [];
  ctx.waiting = null;
  let partial = '';
  ctx.kernel.stdout.on('data', (chunk) => {
    partial += chunk.toString('utf8');
    let nl;
    while ((nl = partial.indexOf('\n')) >= 0) {
      const line = partial.slice(0, nl);
      partial = partial.slice(nl + 1);
      if (ctx.waiting) ctx.waiting(line);
    }
  });
  ctx.kernel.stderr.on('data', () => {});
  const kernel = ctx.kernel;
  kernel.on('close', () => {
    if (ctx.kernel === kernel && ctx.waiting) {
      ctx.waiting(JSON.stringify({ type: 'error', name: 'UnexpectedEndOfExecution',
        value: 'the kernel ended during the execution', traceback: '' }));
      ctx.waiting(JSON.stringify({ type: 'end_of_execution' }));
    }
  });
}

function newContext(sb, language = 'python', cwd = HOME) {
  const ctx = { id: crypto.randomUUID(), language, cwd, executions: 0, queue: Promise.resolve() };
  startKernel(sb, ctx);
  sb.contexts.set(ctx.id, ctx);
  return ctx;
}

function contextJson(ctx) {
  return { id: ctx.id, language: ctx.language, cwd: ctx.cwd };
}

async function execute(sb, req, res) {
  const body = await readJson(req);
  if (body.context_id && body.language) {
    res.writeHead(400, { 'Content-Type': 'text/plain' });
    return res.end('Only one of context_id or language can be provided');
  }
  let ctx;
  if (body.context_id) {
    ctx = sb.contexts.get(body.context_id);
    if (!ctx) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end(`Context ${body.context_id} not found`);
    }
  } else {
    const language = body.language ?? 'python';
    if (language !== 'python') {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end(`Context for language ${language} not found`);
    }
    ctx = sb.defaultContext ??= newContext(sb);
  }
  const run = () => new Promise((resolve) => {
    sb.responses.add(res);
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.write(JSON.stringify({ type: 'number_of_executions', execution_count: ++ctx.executions }) + '\n');
    let idle = setInterval(() => res.write(JSON.stringify({ type: 'keepalive' }) + '\n'), 5000);
    ctx.waiting = (line) => {
      clearInterval(idle);
      idle = setInterval(() => res.write(JSON.stringify({ type: 'keepalive' }) + '\n'), 5000);
      let event;
      try { event = JSON.parse(line); } catch { return; }
      if (!res.writableEnded) res.write(JSON.stringify(event) + '\n');
      if (event.type === 'end_of_execution') {
        clearInterval(idle);
        ctx.waiting = null;
        sb.responses.delete(res);
        res.end();
        resolve();
      }
    };
    const b64 = (t) => Buffer.from(String(t)).toString('base64') || '-';
    const fields = [b64(body.code ?? '')];
    for (const [k, v] of Object.entries(body.env_vars ?? {})) fields.push(b64(k), b64(v));
    ctx.kernel.stdin.write(fields.join(' ') + '\n');
  });
  ctx.queue = ctx.queue.then(run);
}

async function contexts(sb, req, res, p) {
  let m;
  if (p === '/contexts' && req.method === 'POST') {
    const body = await readJson(req);
    return sendJson(res, 200, contextJson(newContext(sb, body.language ?? 'python', body.cwd ?? HOME)));
  }
  if (p === '/contexts' && req.method === 'GET') {
    return sendJson(res, 200, [...sb.contexts.values()].map(contextJson));
  }
  if ((m = p.match(/^\/contexts\/([^/]+)(\/restart)?$/))) {
    const ctx = sb.contexts.get(m[1]);
    if (!ctx) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end(`Context ${m[1]} not found`);
    }
    const old = ctx.kernel;
    if (ctx.waiting) ctx.waiting(JSON.stringify({ type: 'end_of_execution' }));
    old.kill('SIGKILL');
    if (m[2] && req.method === 'POST') {
      startKernel(sb, ctx);
      ctx.queue = Promise.resolve();
      return sendJson(res, 200, null);
    }
    if (!m[2] && req.method === 'DELETE') {
      sb.contexts.delete(ctx.id);
      if (sb.defaultContext === ctx) sb.defaultContext = null;
      return sendJson(res, 200, null);
    }
  }
  return apiError(res, 404, `no route for ${req.method} ${p}`);
}

// ---------------------------------------------------------------- envd + code interpreter

async function sandboxPort(req, res) {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  const hostId = /^\d+-([^.]+)\./.exec(req.headers.host ?? req.headers[':authority'] ?? '')?.[1];
  const id = req.headers['e2b-sandbox-id'] ?? hostId;
  const port = req.headers['e2b-sandbox-port'] ?? '49983';
  const sb = sandboxes.get(id);
  if (!sb) return apiError(res, 502, `The sandbox ${id} was not found`);
  if (sb.state === 'paused') return apiError(res, 502, `The sandbox ${id} is paused`);
  // Each client connection that carried a request for this sandbox, by its address and port.
  sb.connections.add(`${req.socket.remoteAddress}:${req.socket.remotePort}`);
  if (p === '/health') {
    if (port === '49999') return sendJson(res, 200, 'OK');
    res.writeHead(204);
    return res.end();
  }
  const token = req.headers['x-access-token'];
  const isFiles = p === '/files';
  const needsToken = port === '49983' ? !isFiles : p === '/execute';
  if (needsToken && token !== sb.accessToken) {
    return apiError(res, 401, 'invalid access token');
  }
  if (isFiles) return files(sb, req, res, url);
  if (p === '/execute' && req.method === 'POST') return execute(sb, req, res);
  if (p.startsWith('/contexts')) return contexts(sb, req, res, p);
  return connectCall(sb, p.slice(1), req, res);
}

// ---------------------------------------------------------------- listening

function guard(handler) {
  return (req, res) => {
    handler(req, res).catch((e) => {
      log('handler failed:', e.stack ?? e);
      if (!res.headersSent) apiError(res, 500, String(e.message ?? e));
      else abort(res);
    });
  };
}

// Test-only: TLS handshakes, full and resumed (a client that keeps session tickets resumes).
const handshakes = { full: 0, resumed: 0 };
const resumedFrom = new Set(); // client addresses whose handshake resumed
function countHandshakes(server) {
  server.on('secureConnection', (socket) => {
    const reused = socket.isSessionReused();
    handshakes[reused ? 'resumed' : 'full'] += 1;
    if (reused) resumedFrom.add(`${socket.remoteAddress}:${socket.remotePort}`);
  });
  return server;
}

function listen(server) {
  // No Nagle, as on E2B's own servers (Go sets TCP_NODELAY on every connection): Node's TLS
  // server leaves it on, and a response written in two pieces then waits for the client's
  // delayed ACK (40 ms per exchange over HTTP/1.1).
  server.on('connection', (socket) => socket.setNoDelay(true));
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

fs.mkdirSync(opts.state, { recursive: true });
const ports = {
  api: await listen(http.createServer(guard(api))),
  sandbox: await listen(http.createServer(guard(sandboxPort))),
  pid: process.pid,
};
if (opts.tlsCert) {
  const tls = { cert: fs.readFileSync(opts.tlsCert), key: fs.readFileSync(opts.tlsKey), allowHTTP1: true };
  ports.apiTls = await listen(countHandshakes(http2.createSecureServer(tls, guard(api))));
  ports.sandboxTls = await listen(countHandshakes(http2.createSecureServer(tls, guard(sandboxPort))));
}
fs.writeFileSync(opts.portsFile + '.tmp', JSON.stringify(ports));
fs.renameSync(opts.portsFile + '.tmp', opts.portsFile);
log('listening', JSON.stringify(ports));

// Kills every sandbox, waits (up to 5 s) until their mounts are gone, then exits.
function shutdown() {
  const all = [...allSandboxes];
  for (const sb of all) killSandbox(sb);
  const deadline = Date.now() + 5000;
  const check = () => {
    if (all.every((sb) => sb.removed) || Date.now() > deadline) process.exit(0);
    setTimeout(check, 50);
  };
  check();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
