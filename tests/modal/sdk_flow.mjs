// Modal's official JS SDK (modal@0.11.1) against the local server: the flows of Modal's own
// sandbox examples (sandbox.ts, sandbox-exec.ts, sandbox-fs.ts, sandbox-poll.ts,
// sandbox-volume.ts, sandbox-secrets.ts), each checked. If this fails, the server is not
// faithful, and what modal:// does against it proves nothing.
//   MODAL_SERVER_URL=http://127.0.0.1:PORT MODAL_TOKEN_ID=ak-local-test \
//   MODAL_TOKEN_SECRET=as-local-test node sdk_flow.mjs IMAGE
import assert from 'node:assert/strict';
import {
  ModalClient, SandboxFilesystemNotFoundError, SandboxFilesystemIsADirectoryError,
} from 'modal';

const image = process.argv[2] ?? 'sandboxio-test/python:bookworm';
const modal = new ModalClient();
const made = [];
const step = (name) => console.log(`- ${name}`);

async function main() {
  const app = await modal.apps.fromName('sandboxio-sdk-flow', { createIfMissing: true });
  const img = modal.images.fromRegistry(image);

  step('sandbox.ts: the sandbox runs `cat`; stdin goes in, stdout comes back; fromId finds it');
  const cat = await modal.sandboxes.create(app, img, { command: ['cat'] });
  made.push(cat);
  const again = await modal.sandboxes.fromId(cat.sandboxId);
  assert.equal(again.sandboxId, cat.sandboxId);
  await cat.stdin.writeText('this is input that should be mirrored by cat');
  await cat.stdin.close();
  assert.equal(await cat.stdout.readText(), 'this is input that should be mirrored by cat');
  assert.equal(await cat.wait(), 0);

  step('sandbox-exec.ts: stdout and stderr apart, in full, and the exit code');
  const sb = await modal.sandboxes.create(app, img, { env: { GREETING: 'hello' } });
  made.push(sb);
  const p = await sb.exec(['python3', '-c', [
    'import sys',
    'for i in range(5000):',
    '    print(i)',
    '    print(i, file=sys.stderr)',
    'sys.exit(3)',
  ].join('\n')], { stdout: 'pipe', stderr: 'pipe' });
  const [out, err] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  const expected = Array.from({ length: 5000 }, (_, i) => `${i}\n`).join('');
  assert.equal(out, expected);
  assert.equal(err, expected);
  assert.equal(await p.wait(), 3);

  step('an exec takes stdin, and sees the sandbox environment and its own');
  const echo = await sb.exec(['sh', '-c', 'cat; echo "$GREETING $EXTRA"'], { env: { EXTRA: 'world' } });
  await echo.stdin.writeText('piped ');
  await echo.stdin.close();
  assert.equal(await echo.stdout.readText(), 'piped hello world\n');
  assert.equal(await echo.wait(), 0);

  step('sandbox-secrets.ts: a secret made from an object reaches the command');
  const secret = await modal.secrets.fromObject({ TOKEN: 's3cret' });
  const printenv = await sb.exec(['printenv', 'TOKEN'], { secrets: [secret] });
  assert.equal(await printenv.stdout.readText(), 's3cret\n');

  step('sandbox-fs.ts: write, read, list, stat, make a directory, remove');
  await sb.filesystem.writeText('first file\n', '/tmp/flow/a.txt');
  assert.equal(await sb.filesystem.readText('/tmp/flow/a.txt'), 'first file\n');
  const bytes = new Uint8Array(3 << 20).map((_, i) => (i * 7) & 0xff);
  await sb.filesystem.writeBytes(bytes, '/tmp/flow/big.bin');
  assert.deepEqual(new Uint8Array(await sb.filesystem.readBytes('/tmp/flow/big.bin')), bytes);
  await sb.filesystem.makeDirectory('/tmp/flow/sub');
  const names = (await sb.filesystem.listFiles('/tmp/flow')).map((f) => `${f.name}:${f.type}`);
  assert.deepEqual(names, ['a.txt:file', 'big.bin:file', 'sub:directory']);
  const info = await sb.filesystem.stat('/tmp/flow/a.txt');
  assert.equal(info.size, 11);
  await assert.rejects(sb.filesystem.readText('/tmp/flow/missing'), SandboxFilesystemNotFoundError);
  await assert.rejects(sb.filesystem.readText('/tmp/flow/sub'), SandboxFilesystemIsADirectoryError);
  await sb.filesystem.remove('/tmp/flow', { recursive: true });
  await assert.rejects(sb.filesystem.stat('/tmp/flow'), SandboxFilesystemNotFoundError);

  step('a re-attached sandbox (fromId) runs commands');
  const attached = await modal.sandboxes.fromId(sb.sandboxId);
  const whoami = await attached.exec(['echo', 'attached']);
  assert.equal(await whoami.stdout.readText(), 'attached\n');

  step('blockNetwork: the sandbox has no interface but loopback');
  const blocked = await modal.sandboxes.create(app, img, { blockNetwork: true });
  made.push(blocked);
  const ifs = await blocked.exec(['python3', '-c', 'import socket; print(sorted(n for _, n in socket.if_nameindex()))']);
  assert.equal(await ifs.stdout.readText(), "['lo']\n");

  step('sandbox-volume.ts: a volume outlives its sandbox; a sub-path sees only its own part');
  const vol = await modal.volumes.fromName('sandboxio-sdk-flow-vol', { createIfMissing: true });
  const writer = await modal.sandboxes.create(app, img, {
    volumes: { '/a': vol.withMountOptions({ subPath: 'tenant-a' }), '/b': vol.withMountOptions({ subPath: 'tenant-b' }) },
  });
  made.push(writer);
  await writer.filesystem.writeText('for tenant a', '/a/note.txt');
  await writer.terminate();
  const reader = await modal.sandboxes.create(app, img, {
    volumes: { '/data': vol.withMountOptions({ subPath: 'tenant-a' }), '/other': vol.withMountOptions({ subPath: 'tenant-b' }) },
  });
  made.push(reader);
  assert.equal(await reader.filesystem.readText('/data/note.txt'), 'for tenant a');
  await assert.rejects(reader.filesystem.readText('/other/note.txt'), SandboxFilesystemNotFoundError);

  step('sandbox-poll.ts: poll is null while it runs; terminate ends it; a timeout ends it with 124');
  assert.equal(await sb.poll(), null);
  await sb.terminate();
  assert.equal(await sb.wait(), 137);
  const short = await modal.sandboxes.create(app, img, { timeoutMs: 2000 });
  made.push(short);
  assert.equal(await short.wait(), 124);
  console.log('the official Modal SDK passed its sandbox flow against the local server');
}

try {
  await main();
} finally {
  await Promise.all(made.map((s) => s.terminate().catch(() => {})));
  modal.close?.();
}
