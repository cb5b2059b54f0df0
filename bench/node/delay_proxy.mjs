// A TCP proxy that adds a round-trip time: each chunk waits RTT/2 before it is passed on, in
// each direction, so that every client behind it (sandboxio and the official SDK alike) pays
// the same distance to the server. Bytes pass untouched (TLS goes through end to end).
//
//   node delay_proxy.mjs --rtt-ms 20 --ports-file OUT.json NAME=PORT [NAME=PORT ...]
//
// For each NAME=PORT (an upstream on 127.0.0.1) it listens on a free loopback port and writes
// {"NAME": listening port, ...} to OUT.json once all are listening. Runs until killed.
import fs from 'node:fs';
import net from 'node:net';

const args = process.argv.slice(2);
let rtt = 20;
let portsFile = '';
const upstreams = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--rtt-ms') rtt = Number(args[++i]);
  else if (args[i] === '--ports-file') portsFile = args[++i];
  else {
    const [name, port] = args[i].split('=');
    upstreams.push({ name, port: Number(port) });
  }
}
if (!portsFile || upstreams.length === 0 || !(rtt >= 0)) {
  console.error('usage: delay_proxy.mjs --rtt-ms MS --ports-file OUT.json NAME=PORT ...');
  process.exit(2);
}
const half = rtt / 2;

// Chunks keep their order: timers of equal delay fire in the order they were set.
function pipeDelayed(from, to) {
  from.on('data', (chunk) => setTimeout(() => to.destroyed || to.write(chunk), half));
  from.on('end', () => setTimeout(() => to.destroyed || to.end(), half));
  from.on('error', () => setTimeout(() => to.destroy(), half));
  from.on('close', () => setTimeout(() => to.destroyed || to.end(), half));
}

const ports = {};
await Promise.all(
  upstreams.map(
    ({ name, port }) =>
      new Promise((resolve) => {
        const server = net.createServer((client) => {
          client.setNoDelay(true);
          // The connection itself costs one round trip, as it would over the distance.
          const upstream = net.connect({ host: '127.0.0.1', port });
          upstream.setNoDelay(true);
          client.pause();
          upstream.on('connect', () =>
            setTimeout(() => {
              client.resume();
            }, rtt),
          );
          pipeDelayed(client, upstream);
          pipeDelayed(upstream, client);
        });
        server.listen(0, '127.0.0.1', () => {
          ports[name] = server.address().port;
          resolve();
        });
      }),
  ),
);
fs.writeFileSync(portsFile + '.tmp', JSON.stringify(ports));
fs.renameSync(portsFile + '.tmp', portsFile);
