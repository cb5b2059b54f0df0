// The dockerode side of the docker:// benchmarks (dockerode pinned in package-lock.json). One
// long-lived process: the benchmark writes one JSON command per line to stdin and reads one
// JSON answer per line from stdout, so dockerode runs warm and in-process, as an application
// using it would, and each time is taken inside this process around the library calls only.
//
//   {"op":"run_true","container":ID}            -> {"ms":N}
//   {"op":"first_output","image":IMAGE}         -> {"ms":N}   create, start, exec echo, output
//   {"op":"stdout","container":ID,"bytes":B}    -> {"ms":N,"bytes":B}
//   {"op":"file","container":ID,"bytes":B}      -> {"write_ms":N,"read_ms":N}
import Docker from 'dockerode';
import { serve } from './peer_loop.mjs';
import { Writable } from 'node:stream';

const docker = new Docker({ socketPath: '/var/run/docker.sock' });

// Runs argv in the container and demultiplexes its output the way dockerode's users do
// (modem.demuxStream); resolves with the byte count and the exit code from exec inspect.
async function exec(container, argv, onFirst) {
  const c = docker.getContainer(container);
  const e = await c.exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
  const stream = await e.start({ hijack: true, stdin: false });
  let bytes = 0;
  const sink = new Writable({
    write(chunk, _enc, done) {
      if (bytes === 0 && onFirst) onFirst(chunk);
      bytes += chunk.length;
      done();
    },
  });
  await new Promise((resolve, reject) => {
    docker.modem.demuxStream(stream, sink, sink);
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  const info = await e.inspect();
  return { bytes, exitCode: info.ExitCode };
}

// One ustar entry holding `bytes` zero bytes, the body dockerode's putArchive takes.
function tarOf(name, bytes) {
  const head = Buffer.alloc(512);
  head.write(name, 0);
  head.write('0000644\0', 100);
  head.write('0000000\0', 108);
  head.write('0000000\0', 116);
  head.write(bytes.toString(8).padStart(11, '0') + '\0', 124);
  head.write('00000000000\0', 136);
  head.write('        ', 148);
  head.write('0', 156);
  head.write('ustar\0', 257);
  head.write('00', 263);
  let sum = 0;
  for (const b of head) sum += b;
  head.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  const pad = (512 - (bytes % 512)) % 512;
  return Buffer.concat([head, Buffer.alloc(bytes + pad), Buffer.alloc(1024)]);
}

const ops = {
  async run_true({ container }) {
    const t = performance.now();
    const r = await exec(container, ['true']);
    const ms = performance.now() - t;
    if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
    return { ms };
  },
  async first_output({ image }) {
    const t = performance.now();
    const c = await docker.createContainer({
      Image: image, Cmd: ['sleep', 'infinity'], HostConfig: { AutoRemove: true, NetworkMode: 'none' },
      Labels: { 'io.sandboxio.bench': 'dockerode' },
    });
    await c.start();
    let ms = 0;
    await exec(c.id, ['echo', 'ready'], () => { ms = performance.now() - t; });
    await c.remove({ force: true });
    return { ms };
  },
  async stdout({ container, bytes }) {
    const t = performance.now();
    const r = await exec(container, ['head', '-c', String(bytes), '/dev/zero']);
    const ms = performance.now() - t;
    if (r.bytes !== bytes) throw new Error(`got ${r.bytes} of ${bytes} bytes`);
    return { ms, bytes: r.bytes };
  },
  async file({ container, bytes }) {
    const c = docker.getContainer(container);
    const body = tarOf('bench.bin', bytes);
    let t = performance.now();
    await c.putArchive(body, { path: '/tmp' });
    const write_ms = performance.now() - t;
    t = performance.now();
    const stream = await c.getArchive({ path: '/tmp/bench.bin' });
    let got = 0;
    for await (const chunk of stream) got += chunk.length;
    const read_ms = performance.now() - t;
    if (got < bytes) throw new Error(`read back ${got} of ${bytes} bytes`);
    return { write_ms, read_ms };
  },
};

// `--concurrent N IMAGE`: a process of its own that creates N containers at once, runs a
// command in each and removes them (Promise.all), then prints its wall time and peak memory.
if (process.argv[2] === '--concurrent') {
  const n = Number(process.argv[3]);
  const image = process.argv[4];
  const t = performance.now();
  let ok = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    const c = await docker.createContainer({
      Image: image, Cmd: ['sleep', 'infinity'], HostConfig: { AutoRemove: true, NetworkMode: 'none' },
      Labels: { 'io.sandboxio.bench': 'dockerode' },
    });
    await c.start();
    const r = await exec(c.id, ['sh', '-c', 'echo ready']);
    if (r.exitCode === 0 && r.bytes === 6) ok += 1;
    await c.remove({ force: true });
  }));
  const wall = performance.now() - t;
  // resourceUsage().maxRSS is in KiB, as VmHWM.
  console.log(JSON.stringify({ wall_ms: wall, peak_rss_kib: process.resourceUsage().maxRSS, ok }));
  process.exit(ok === n ? 0 : 1);
}

await serve(ops);
