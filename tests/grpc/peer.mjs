// A gRPC server on @grpc/grpc-js (Node's reference implementation) over h2c: the real peer of
// the engine's gRPC codec tests (tests/http2/http2_peer_test.cpp). It prints {"port": N} on
// its first line and serves until its stdin closes.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import loader from '@grpc/proto-loader';

const here = path.dirname(fileURLToPath(import.meta.url));
const def = loader.loadSync(path.join(here, 'echo.proto'), { keepCase: true, longs: Number, defaults: true });
const { Echo } = grpc.loadPackageDefinition(def).sandboxio.test;

// What the server saw of the call: its authorization metadata, and its deadline as whole
// seconds left (grpc-js takes grpc-timeout out of the metadata and makes it the deadline).
function seen(call) {
  const deadline = call.getDeadline(); // a Date or a number of ms, Infinity without one
  const at = deadline instanceof Date ? deadline.getTime() : Number(deadline);
  const left = Number.isFinite(at) ? Math.round((at - Date.now()) / 1000) : null;
  return {
    authorization: String(call.metadata.get('authorization')[0] ?? ''),
    timeout: left === null ? '' : `${left}s`,
  };
}

function failure(req) {
  const trailer = new grpc.Metadata();
  trailer.set('x-peer-warning', 'as asked');
  return { code: req.fail_code, details: req.fail_message, metadata: trailer };
}

const server = new grpc.Server();
server.addService(Echo.service, {
  Unary(call, done) {
    const req = call.request;
    if (req.fail_code) return done(failure(req));
    done(null, { text: req.text, index: 0, blob: req.blob, ...seen(call) });
  },
  Stream(call) {
    const req = call.request;
    for (let i = 0; i < req.repeat; i++) call.write({ text: `${req.text} ${i}`, index: i, blob: req.blob });
    if (req.fail_code) return call.emit('error', failure(req));
    call.end();
  },
  Collect(call, done) {
    const texts = [];
    call.on('data', (req) => texts.push(req.text));
    call.on('end', () => done(null, { text: texts.join(','), index: texts.length, ...seen(call) }));
  },
});
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err;
  process.stdout.write(JSON.stringify({ port }) + '\n');
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
