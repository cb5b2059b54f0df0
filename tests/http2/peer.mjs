// An HTTP/2 server over cleartext (h2c, prior knowledge) on Node's own http2 module: the real
// peer the HTTP/2 codec's tests talk to. It prints {"port": N} on its first line and serves
// until its stdin closes, so it never outlives the test that started it.
//
//   GET  /bytes?n=N&chunk=C   N bytes of a repeating pattern, written C at a time with
//                             backpressure (the stream's window decides the pace)
//   POST /echo                the request body back, then a trailer x-received: its length
//   POST /grpc                a gRPC-shaped answer: 200, one message, trailers grpc-status 0
//   GET  /interim             103 Early Hints, then 200 "after hints"
//   GET  /status/404          404 "no such thing"
//   GET  /reset               the stream reset with INTERNAL_ERROR after its head
//   GET  /headers?count=K     K response headers of 1 KiB each
import http2 from 'node:http2';

function pattern(n) {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = 97 + (i % 26);
  return b;
}

const server = http2.createServer({ settings: { maxConcurrentStreams: 100 } });
server.on('stream', (stream, headers) => {
  const url = new URL(headers[':path'], 'http://peer');
  const q = (k, d) => Number(url.searchParams.get(k) ?? d);
  stream.on('error', () => {});
  switch (url.pathname) {
    case '/bytes': {
      const total = q('n', 0);
      const chunk = Math.max(1, q('chunk', 16384));
      stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
      let sent = 0;
      const more = () => {
        while (sent < total) {
          const n = Math.min(chunk, total - sent);
          const piece = pattern(sent % 26 + n).subarray(sent % 26);
          sent += n;
          if (!stream.write(piece)) return stream.once('drain', more);
        }
        stream.end();
      };
      more();
      break;
    }
    case '/echo': {
      const parts = [];
      stream.on('data', (d) => parts.push(d));
      stream.on('end', () => {
        const body = Buffer.concat(parts);
        stream.respond({ ':status': 200 }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'x-received': String(body.length) }));
        stream.end(body);
      });
      break;
    }
    case '/grpc': {
      stream.on('data', () => {});
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': '' }));
        const msg = Buffer.from('hello');
        const frame = Buffer.alloc(5 + msg.length);
        frame.writeUInt32BE(msg.length, 1);
        msg.copy(frame, 5);
        stream.end(frame);
      });
      break;
    }
    case '/interim':
      stream.additionalHeaders({ ':status': 103, link: '</style.css>; rel=preload' });
      stream.respond({ ':status': 200 });
      stream.end('after hints');
      break;
    case '/status/404':
      stream.respond({ ':status': 404 });
      stream.end('no such thing');
      break;
    case '/reset':
      stream.respond({ ':status': 200 });
      stream.write('partial');
      // destroy() with an error resets the stream (INTERNAL_ERROR) without ending it first,
      // which close() would do.
      setImmediate(() => stream.destroy(new Error('reset by the peer')));
      break;
    case '/headers': {
      const h = { ':status': 200 };
      for (let i = 0; i < q('count', 1); i++) h[`x-filler-${i}`] = 'f'.repeat(1024);
      stream.respond(h);
      stream.end('headers sent');
      break;
    }
    default:
      stream.respond({ ':status': 400 });
      stream.end();
  }
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
