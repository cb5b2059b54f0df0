// sandboxio's OpenTelemetry export, checked with official OpenTelemetry code:
//  - the official JS SDK (@opentelemetry/sdk-trace + the OTLP/HTTP protobuf exporter) makes the
//    caller's span, "agent.step", and exports it to the receiver below;
//  - `sandboxio run` runs under that span (TRACEPARENT) and exports its own spans there;
//  - the receiver decodes every request with the official OTLP definitions (opentelemetry-proto,
//    compiled by protobufjs, as @opentelemetry/otlp-transformer shipped them) and the test
//    checks the span tree, the GenAI attributes, the parent link, and that the command inside
//    the sandbox saw TRACEPARENT naming its own span.
//
//   node otel_test.mjs SANDBOXIO_BINARY DSN
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createRequire } from 'node:module';

import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

const [binary, dsn] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const root = require('otlp-proto-definitions/build/src/generated/root.js');
const ExportRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const ExportResponse = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse;

// ---- the receiver: OTLP/HTTP, protobuf only ----
const requests = [];
const receive = (req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    requests.push({
      path: req.url,
      type: req.headers['content-type'],
      auth: req.headers['x-test-token'],
      body: Buffer.concat(chunks),
    });
    const reply = Buffer.from(ExportResponse.encode(ExportResponse.create({})).finish());
    res.writeHead(200, { 'Content-Type': 'application/x-protobuf' });
    res.end(reply);
  });
};
const server = http.createServer(receive);
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const endpoint = `http://127.0.0.1:${server.address().port}`;

// ---- the caller's span, from the official SDK ----
const provider = new TracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'otel-test-agent' }),
  spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }) })],
});
const step = provider.getTracer('agent').startSpan('agent.step');
const parent = step.spanContext();
const traceparent = `00-${parent.traceId}-${parent.spanId}-01`;

// Runs the CLI without blocking this process's event loop: the receivers above answer from it.
function sandboxio(args, extraEnv) {
  const started = Date.now();
  const child = spawn(binary, args, {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME ?? '/root',
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_HEADERS: 'x-test-token=s%3Dcret',
      OTEL_SERVICE_NAME: 'sandboxio-otel-test',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=ci,team=agents',
      TRACEPARENT: traceparent,
      ...extraEnv,
    },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  const killer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(killer);
      resolve({ status, stdout, stderr, started, ended: Date.now() });
    });
  });
}

const ran = await sandboxio(['run', '-b', dsn, '--', 'sh', '-c', 'echo "$TRACEPARENT"'], {});
assert.equal(ran.status, 0, `sandboxio run failed: ${ran.stderr}`);
const seen = ran.stdout.trim();
assert.match(seen, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, `TRACEPARENT inside: "${seen}"`);
assert.equal(seen.split('-')[1], parent.traceId, 'the command is in the caller\'s trace');

const timedOut = await sandboxio(['run', '-b', dsn, '-t', '0.5', '--', 'sleep', '30'], {});
assert.notEqual(timedOut.status, 0, 'a command past its timeout does not succeed');

step.end();
await provider.forceFlush();

// With the exporter pointed at a port nobody listens on, the run still works and ends.
const deadPort = await new Promise((resolve) => {
  const s = http.createServer();
  s.listen(0, '127.0.0.1', () => {
    const p = s.address().port;
    s.close(() => resolve(p));
  });
});
const dead = await sandboxio(['run', '-b', dsn, '--', 'echo', 'unbothered'], {
  OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${deadPort}`,
});
assert.equal(dead.status, 0, dead.stderr);
assert.equal(dead.stdout.trim(), 'unbothered');
// The drop counter rose, and the CLI says so once instead of losing the spans silently.
assert.match(dead.stderr, /sandboxio: warning: \d+ span\(s\) were not exported \(.*refused/, dead.stderr);

// Over https, trusting the test CA (OTEL_EXPORTER_OTLP_CERTIFICATE): the same spans arrive.
const tlsDir = process.env.SBX_TLS_DIR ?? '/var/lib/sandboxio-test/tls';
let tlsSpans = 0;
if (fs.existsSync(`${tlsDir}/server-cert.pem`)) {
  const before = requests.length;
  const secure = https.createServer(
    { cert: fs.readFileSync(`${tlsDir}/server-cert.pem`), key: fs.readFileSync(`${tlsDir}/server-key.pem`) },
    receive);
  await new Promise((r) => secure.listen(0, '127.0.0.1', r));
  const viaTls = await sandboxio(['run', '-b', dsn, '--', 'echo', 'over-tls'], {
    OTEL_EXPORTER_OTLP_ENDPOINT: `https://127.0.0.1:${secure.address().port}`,
    OTEL_EXPORTER_OTLP_CERTIFICATE: `${tlsDir}/ca.pem`,
  });
  assert.equal(viaTls.status, 0, viaTls.stderr);
  secure.close();
  for (const r of requests.slice(before)) {
    const msg = ExportRequest.decode(r.body);
    for (const rs of msg.resourceSpans) for (const ss of rs.scopeSpans) tlsSpans += ss.spans.length;
  }
  requests.splice(before);  // checked here; the rest of the test looks at the http runs
  assert.ok(tlsSpans >= 3, `spans exported over https: ${tlsSpans}`);
} else {
  console.warn(`*** WARNING: no test certificates in ${tlsDir}: the https export is not checked ***`);
}
server.close();

// ---- decode everything with the official definitions ----
const hex = (b) => Buffer.from(b ?? []).toString('hex');
const value = (any) => {
  if (any.stringValue !== undefined && any.stringValue !== null && 'stringValue' in any) return any.stringValue;
  if ('boolValue' in any) return any.boolValue;
  if ('intValue' in any) return Number(any.intValue);
  if ('doubleValue' in any) return any.doubleValue;
  return undefined;
};
const attrs = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, value(kv.value)]));
const oneofs = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, Object.keys(kv.value)[0]]));

const spans = [];
for (const r of requests) {
  assert.equal(r.path, '/v1/traces');
  assert.equal(r.type, 'application/x-protobuf');
  const msg = ExportRequest.toObject(ExportRequest.decode(r.body), { longs: String, defaults: false, oneofs: false });
  for (const rs of msg.resourceSpans ?? []) {
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({ scope: ss.scope?.name, resource: attrs(rs.resource?.attributes), auth: r.auth, raw: s,
          trace: hex(s.traceId), id: hex(s.spanId), parent: hex(s.parentSpanId), attrs: attrs(s.attributes),
          types: oneofs(s.attributes) });
      }
    }
  }
}

const sdk = spans.find((s) => s.scope === 'agent');
assert.ok(sdk, 'the official SDK\'s span reached the receiver');
assert.equal(sdk.id, parent.spanId);
const ours = spans.filter((s) => s.scope === 'sandboxio');
const names = ours.map((s) => s.raw.name);
assert.ok(names.length >= 6, `our spans: ${names.join(', ')}`);

for (const s of ours) {
  // The span tree: every span of ours is a child of the caller's span, in its trace.
  assert.equal(s.trace, parent.traceId, `${s.raw.name}: the caller's trace`);
  assert.equal(s.parent, parent.spanId, `${s.raw.name}: the caller's span is its parent`);
  assert.equal(s.id.length, 16);
  assert.notEqual(s.id, '0000000000000000');
  assert.equal(s.auth, 's=cret', 'OTEL_EXPORTER_OTLP_HEADERS are sent, percent-decoded');
  assert.equal(s.resource['service.name'], 'sandboxio-otel-test');
  assert.equal(s.resource['deployment.environment.name'], 'ci');
  assert.equal(s.resource['team'], 'agents');
  assert.equal(s.resource['telemetry.sdk.name'], 'sandboxio');
  assert.equal(s.resource['telemetry.sdk.language'], 'cpp');
  const start = BigInt(s.raw.startTimeUnixNano);
  const end = BigInt(s.raw.endTimeUnixNano);
  assert.ok(start > 0n && end >= start, `${s.raw.name}: start and end`);
  assert.ok(start >= BigInt(ran.started - 1000) * 1_000_000n, `${s.raw.name}: started in this test`);
  assert.ok(end <= BigInt(Date.now() + 1000) * 1_000_000n, `${s.raw.name}: ended in this test`);
  assert.equal(s.attrs['sandboxio.backend'], dsn.split(':')[0]);
  // The flags carry the sampled bit and say the parent is remote, as the SDK's do for a
  // span whose parent came from a traceparent.
  assert.equal(s.raw.flags & 0x301, 0x301, `${s.raw.name}: flags ${s.raw.flags}`);
}
assert.equal(new Set(ours.map((s) => s.id)).size, ours.length, 'span ids are distinct');

// `sandboxio run` streams its command's output as it comes: a stream() operation.
const runs = ours.filter((s) => s.raw.name === 'execute_tool sandboxio.stream');
assert.equal(runs.length, 2, `command spans: ${names.join(', ')}`);
const first = runs.find((s) => s.id === seen.split('-')[2]);
assert.ok(first, 'the command saw TRACEPARENT naming its own span');
assert.equal(first.attrs['gen_ai.operation.name'], 'execute_tool');
assert.equal(first.attrs['gen_ai.tool.name'], 'sandboxio.stream');
assert.equal(first.attrs['gen_ai.tool.type'], 'function');
assert.equal(first.attrs['process.exit.code'], 0);
assert.equal(first.types['process.exit.code'], 'intValue');
assert.equal(first.attrs['sandboxio.outcome'], 'ok');
assert.equal(first.attrs['sandboxio.termination'], 'exited');
assert.equal(first.raw.kind, root.opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_INTERNAL);
assert.ok(!first.raw.status?.code, 'a command that ran is not an error');

const late = runs.find((s) => s.attrs['sandboxio.termination'] === 'timeout');
assert.ok(late, 'the timed-out command has a span');
assert.equal(late.raw.status?.code, root.opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_ERROR);
assert.ok(late.attrs['error.type'], 'a timed-out span names its error type');

for (const op of ['create', 'kill']) {
  const s = ours.find((x) => x.raw.name === `sandboxio.${op}`);
  assert.ok(s, `a sandboxio.${op} span: ${names.join(', ')}`);
  assert.equal(s.raw.kind, root.opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_CLIENT);
  assert.ok(s.attrs['sandboxio.sandbox.id'], `${op} names the sandbox`);
}

// Our spans are shaped as the SDK's: the same fields set (the SDK also writes its zero
// dropped-counts, which proto3 readers cannot tell from absent ones).
const fields = (s) => Object.keys(s.raw)
  .filter((k) => !['parentSpanId', 'status', 'attributes'].includes(k) && !k.startsWith('dropped')).sort();
assert.deepEqual(fields(first), fields(sdk), 'the same span fields as the official SDK sets');

console.log(`ok: ${tlsSpans} spans over https; ${ours.length} sandboxio spans (${[...new Set(names)].join(', ')}) under the SDK's ` +
  `span ${parent.spanId} in trace ${parent.traceId}; the command saw ${seen}`);
