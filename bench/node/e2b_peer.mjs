// The official E2B JS SDK side of the e2b:// benchmarks (the `e2b` package pinned in
// tests/e2b/package-lock.json). One long-lived process answering one JSON line per command, with
// every time taken inside this process around the SDK calls only. E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL (and NODE_EXTRA_CA_CERTS for TLS) point it at the server, as for sandboxio.
//
//   {"op":"open","template":T}             -> {"ms":N}   create a sandbox kept for what follows
//   {"op":"run_true"}                      -> {"ms":N}
//   {"op":"first_output","template":T}     -> {"ms":N}   create, run echo, first output
//   {"op":"file","bytes":B}                -> {"write_ms":N,"read_ms":N}
//   {"op":"close"}                         -> {}
import { createRequire } from 'node:module';
import { serve } from './peer_loop.mjs';

const require = createRequire(new URL('../../tests/e2b/package.json', import.meta.url));
const { Sandbox } = require('e2b');

let sbx;
const ops = {
  async open({ template }) {
    const t = performance.now();
    sbx = await Sandbox.create(template, { timeoutMs: 600_000 });
    return { ms: performance.now() - t };
  },
  async run_true() {
    const t = performance.now();
    const r = await sbx.commands.run('true');
    const ms = performance.now() - t;
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
    return { ms };
  },
  async first_output({ template }) {
    const t = performance.now();
    const fresh = await Sandbox.create(template, { timeoutMs: 60_000 });
    let ms = 0;
    await fresh.commands.run('echo ready', {
      onStdout: () => { if (ms === 0) ms = performance.now() - t; },
    });
    await fresh.kill();
    return { ms };
  },
  async file({ bytes }) {
    const data = new Uint8Array(bytes).fill(102);
    let t = performance.now();
    await sbx.files.write('/tmp/bench.bin', data);
    const write_ms = performance.now() - t;
    t = performance.now();
    const back = await sbx.files.read('/tmp/bench.bin', { format: 'bytes' });
    const read_ms = performance.now() - t;
    if (back.length !== bytes) throw new Error(`read back ${back.length} of ${bytes} bytes`);
    return { write_ms, read_ms };
  },
  async close() {
    if (sbx) await sbx.kill();
    sbx = undefined;
    return {};
  },
};

// `--concurrent N TEMPLATE`: a process of its own that creates N sandboxes at once, runs a
// command in each and kills them (Promise.all), then prints its wall time and peak memory.
if (process.argv[2] === '--concurrent') {
  const n = Number(process.argv[3]);
  const template = process.argv[4];
  const t = performance.now();
  let ok = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    const s = await Sandbox.create(template, { timeoutMs: 60_000 });
    const r = await s.commands.run('echo ready');
    if (r.exitCode === 0 && r.stdout === 'ready\n') ok += 1;
    await s.kill();
  }));
  const wall = performance.now() - t;
  // resourceUsage().maxRSS is in KiB, as VmHWM.
  console.log(JSON.stringify({ wall_ms: wall, peak_rss_kib: process.resourceUsage().maxRSS, ok }));
  process.exit(ok === n ? 0 : 1);
}

await serve(ops);
