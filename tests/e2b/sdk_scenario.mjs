// The official E2B SDKs (`e2b`, `@e2b/code-interpreter`, versions pinned in package-lock.json)
// against the local E2B-compatible server: if E2B's own client accepts every answer, the server
// speaks E2B's protocol. Every step checks what the SDK returned, not only that it returned.
//
//   E2B_API_KEY=... E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:Q \
//     node sdk_scenario.mjs
// Over TLS (https:// URLs) Node's fetch speaks HTTP/2 to the server; NODE_EXTRA_CA_CERTS names
// the test CA.
import { Sandbox } from '@e2b/code-interpreter';
import { ALL_TRAFFIC, CommandExitError, NotFoundError, AuthenticationError } from 'e2b';
import assert from 'node:assert/strict';
import http from 'node:http';

const steps = [];
async function step(name, fn) {
  const t0 = performance.now();
  try {
    await fn();
    steps.push(name);
    console.log(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    process.exitCode = 1;
    throw e;
  }
}

const tag = `scenario-${process.pid}`;
let sbx;
try {
  await step('create with metadata, envs and a timeout', async () => {
    sbx = await Sandbox.create('code-interpreter-v1', {
      metadata: { suite: tag }, envs: { SCENARIO_A: 'from-create' }, timeoutMs: 120_000,
    });
    assert.match(sbx.sandboxId, /^i[0-9a-f]+$/);
  });

  await step('run a command: stdout, stderr and a non-zero exit code', async () => {
    const err = await sbx.commands.run('echo hi; echo err 1>&2; exit 3').catch((e) => e);
    assert.ok(err instanceof CommandExitError, `expected CommandExitError, got ${err}`);
    assert.equal(err.exitCode, 3);
    assert.equal(err.stdout, 'hi\n');
    assert.equal(err.stderr, 'err\n');
    const ok = await sbx.commands.run('echo $SCENARIO_A $SCENARIO_B; pwd',
      { envs: { SCENARIO_B: 'from-run' }, cwd: '/tmp' });
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.stdout, 'from-create from-run\n/tmp\n');
  });

  await step('commands run as `user` in /home/user unless a call names root', async () => {
    // As https://e2b.dev/docs/template/user-and-workdir shows: whoami is user, pwd /home/user.
    const me = await sbx.commands.run('whoami; pwd; id -u; echo $HOME');
    assert.equal(me.stdout, 'user\n/home/user\n1000\n/home/user\n');
    const root = await sbx.commands.run('whoami; id -u', { user: 'root' });
    assert.equal(root.stdout, 'root\n0\n');
    await sbx.files.write('/tmp/owned/by-user.txt', 'x');
    const owner = await sbx.commands.run('stat -c %U /tmp/owned/by-user.txt /tmp/owned');
    assert.equal(owner.stdout, 'user\nuser\n');
    const denied = await sbx.commands.run('touch /etc/nope').catch((e) => e);
    assert.ok(denied instanceof CommandExitError, `user wrote into /etc: ${denied}`);
  });

  await step('stream a command with callbacks', async () => {
    const out = [];
    const err = [];
    const r = await sbx.commands.run('for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.05; done', {
      onStdout: (d) => out.push(d), onStderr: (d) => err.push(d),
    });
    assert.equal(r.exitCode, 0);
    assert.equal(out.join(''), '1\n2\n3\n');
    assert.equal(err.join(''), 'e1\ne2\ne3\n');
  });

  await step('a background command, then kill it', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true });
    assert.ok(h.pid > 0);
    assert.equal(await sbx.commands.kill(h.pid), true);
    const err = await h.wait().catch((e) => e);
    assert.ok(err instanceof CommandExitError, `a killed command ended with ${err}`);
  });

  await step('write and read a file; stat, list, remove', async () => {
    const info = await sbx.files.write('/home/user/hello.txt', 'hello world');
    assert.equal(info.path, '/home/user/hello.txt');
    assert.equal(await sbx.files.read('/home/user/hello.txt'), 'hello world');
    const bytes = new Uint8Array(256).map((_, i) => i);
    await sbx.files.write('/tmp/dir/bytes.bin', bytes.buffer);
    const back = await sbx.files.read('/tmp/dir/bytes.bin', { format: 'bytes' });
    assert.deepEqual([...back], [...bytes]);
    assert.equal(await sbx.files.exists('/home/user/hello.txt'), true);
    assert.equal(await sbx.files.exists('/home/user/nope.txt'), false);
    const listed = await sbx.files.list('/tmp/dir');
    assert.deepEqual(listed.map((e) => [e.name, e.type, e.size]), [['bytes.bin', 'file', 256]]);
    await sbx.files.makeDir('/tmp/made');
    await sbx.files.remove('/tmp/dir');
    assert.equal(await sbx.files.exists('/tmp/dir'), false);
    const missing = await sbx.files.read('/tmp/nope').catch((e) => e);
    assert.ok(missing instanceof NotFoundError, `reading a missing file gave ${missing}`);
  });

  await step('run code with a rich result and an error', async () => {
    const ex = await sbx.runCode('print("hello"); 6 * 7');
    assert.deepEqual(ex.logs.stdout, ['hello\n']);
    assert.equal(ex.results.length, 1);
    assert.equal(ex.results[0].text, '42');
    assert.equal(ex.results[0].isMainResult, true);
    const html = await sbx.runCode(
      'class H:\n    def _repr_html_(self): return "<b>x</b>"\nH()');
    assert.equal(html.results[0].html, '<b>x</b>');
    const bad = await sbx.runCode('1 / 0');
    assert.equal(bad.error?.name, 'ZeroDivisionError');
    assert.match(bad.error?.traceback ?? '', /ZeroDivisionError/);
  });

  await step('use a code context', async () => {
    const ctx = await sbx.createCodeContext();
    await sbx.runCode('counter = 41', { context: ctx });
    const ex = await sbx.runCode('counter + 1', { context: ctx });
    assert.equal(ex.results[0].text, '42');
    const other = await sbx.createCodeContext();
    const fresh = await sbx.runCode('counter', { context: other });
    assert.equal(fresh.error?.name, 'NameError');
  });

  await step('a PTY: an interactive shell on a terminal', async () => {
    let seen = '';
    const term = await sbx.pty.create({ cols: 90, rows: 20, onData: (d) => { seen += new TextDecoder().decode(d); } });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo pty-$((40+2)); exit\n'));
    await term.wait().catch(() => {});
    assert.match(seen, /20 90/);
    assert.match(seen, /pty-42/);
  });

  await step('pause, then connect resumes', async () => {
    assert.equal(await sbx.pause(), true);
    const listed = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['paused'] } }).nextItems();
    assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'paused']]);
    const back = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await back.commands.run('cat /home/user/hello.txt')).stdout, 'hello world');
  });

  await step('set the timeout, get info and list by metadata', async () => {
    await sbx.setTimeout(60_000);
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.metadata.suite, tag);
    const pages = Sandbox.list({ query: { metadata: { suite: tag } } });
    const items = await pages.nextItems();
    assert.deepEqual(items.map((s) => s.sandboxId), [sbx.sandboxId]);
  });

  await step('connect to the sandbox by id', async () => {
    const again = await Sandbox.connect(sbx.sandboxId);
    const r = await again.commands.run('cat /home/user/hello.txt');
    assert.equal(r.stdout, 'hello world');
  });

  await step('kill, then the sandbox is gone', async () => {
    assert.equal(await sbx.kill(), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
    assert.equal(await sbx.isRunning(), false);
    sbx = null;
  });

  await step('allowOut with a name: that name on port 80 only, as E2B documents', async () => {
    // A canary on this machine's loopback, behind the server's test resolver (an extension of
    // the local server: canary.sandboxio.test and other.sandboxio.test resolve to 198.18.0.1,
    // whose port 80 leads to the canary). The SDK sends the network rules as E2B's docs show.
    let hits = 0;
    const canary = http.createServer((req, res) => { hits += 1; res.end('canary'); });
    await new Promise((resolve) => canary.listen(0, '127.0.0.1', resolve));
    try {
      const reg = await fetch(`${process.env.E2B_API_URL}/_sandboxio/test-network`, {
        method: 'POST',
        headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
        body: JSON.stringify({
          names: { 'canary.sandboxio.test': '198.18.0.1', 'other.sandboxio.test': '198.18.0.1' },
          routes: { '198.18.0.1:80': `127.0.0.1:${canary.address().port}` },
        }),
      });
      const { token } = await reg.json();
      const fenced = await Sandbox.create('base', {
        metadata: { 'sandboxio-test-network': token },
        network: { allowOut: ['canary.sandboxio.test'], denyOut: [ALL_TRAFFIC] },
      });
      try {
        const get = (host, port = 80) => fenced.commands.run(
          `python3 -c "import socket; s = socket.create_connection(('${host}', ${port}), 5); ` +
          `s.sendall(b'GET / HTTP/1.1\\r\\nHost: ${host}\\r\\n\\r\\n'); ` +
          `print(s.recv(4096).split(b'\\r\\n\\r\\n')[-1].decode())"`);
        assert.equal((await get('canary.sandboxio.test')).stdout, 'canary\n');
        assert.equal((await get('other.sandboxio.test')).stdout, '\n');
        const port = await get('canary.sandboxio.test', 8080).catch((e) => e);
        assert.ok(port instanceof CommandExitError || port.stdout === '\n', `port 8080: ${port.stdout}`);
        assert.equal(hits, 1);
      } finally {
        await fenced.kill();
      }
    } finally {
      canary.close();
    }
  });

  await step('a wrong API key is an AuthenticationError', async () => {
    const e = await Sandbox.create('base', { apiKey: 'e2b_wrong' }).catch((x) => x);
    assert.ok(e instanceof AuthenticationError, `a wrong key gave ${e}`);
  });
} catch {
  // reported by step()
} finally {
  if (sbx) await sbx.kill().catch(() => {});
}
console.log(`${steps.length} steps passed`);
