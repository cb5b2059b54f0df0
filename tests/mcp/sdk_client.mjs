// The official MCP TypeScript SDK client drives `sandboxio mcp` over stdio against a real
// backend: it lists the tools, calls each one, gets isError with the SBX code for a failing
// call, and cancels a long command, which must then no longer run in the sandbox.
//   node sdk_client.mjs SANDBOXIO_BINARY DSN
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [binary, dsn] = process.argv.slice(2);
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); };

const transport = new StdioClientTransport({ command: binary, args: ['mcp', '--backend', dsn], stderr: 'inherit' });
const client = new Client({ name: 'sandboxio-sdk-test', version: '1.0.0' });
await client.connect(transport);
check(client.getServerVersion()?.name === 'sandboxio', 'initialize: the server says it is sandboxio');

const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
check(JSON.stringify(names) === JSON.stringify(['list_files', 'read_file', 'run_code', 'run_command', 'sandbox_info', 'write_file']),
      `tools/list gives the six tools (${names.join(', ')})`);
check(tools.every((t) => t.inputSchema?.type === 'object' && t.annotations), 'every tool has an object schema and annotations');

const run = await client.callTool({ name: 'run_command', arguments: { command: 'echo out; echo err >&2; exit 3' } });
check(!run.isError && run.structuredContent?.exit_code === 3 && run.structuredContent?.stdout === 'out\n' &&
      run.structuredContent?.stderr === 'err\n', 'run_command: exit code and streams apart');
const code = await client.callTool({ name: 'run_code', arguments: { code: 'print(6 * 7)' } });
check(code.structuredContent?.stdout === '42\n', 'run_code: python runs');
const wrote = await client.callTool({ name: 'write_file', arguments: { path: '/tmp/mcp/hello.txt', content: 'héllo' } });
check(!wrote.isError, 'write_file');
const read = await client.callTool({ name: 'read_file', arguments: { path: '/tmp/mcp/hello.txt' } });
check(read.structuredContent?.content === 'héllo' && read.content?.[0]?.text === 'héllo', 'read_file gives the text back');
const listed = await client.callTool({ name: 'list_files', arguments: { path: '/tmp/mcp' } });
check(listed.structuredContent?.entries?.some((e) => e.name === 'hello.txt'), 'list_files shows the file');
const info = await client.callTool({ name: 'sandbox_info', arguments: {} });
check(info.structuredContent?.network === 'deny-all' && typeof info.structuredContent?.tier === 'string', 'sandbox_info: deny-all network, a tier');
// Where the sandbox keeps state (docker://IMAGE with python3 and the agent, e2b://), run_code calls
// share one namespace for the session, return values and say what an exception was.
if (info.structuredContent?.capabilities?.includes('stateful_code')) {
  await client.callTool({ name: 'run_code', arguments: { code: 'x = 6' } });
  const value = await client.callTool({ name: 'run_code', arguments: { code: 'x * 7' } });
  check(value.structuredContent?.results?.[0]?.mime_type === 'text/plain' &&
        value.structuredContent?.results?.[0]?.data === '42' && value.content?.[0]?.text?.includes('--- value ---\n42'),
        'run_code: a variable survives between calls and the last value comes back');
  const raised = await client.callTool({ name: 'run_code', arguments: { code: 'x / 0' } });
  check(!raised.isError && raised.structuredContent?.exit_code === 1 &&
        raised.structuredContent?.error?.name === 'ZeroDivisionError' &&
        raised.structuredContent?.error?.traceback?.includes('ZeroDivisionError'),
        'run_code: an exception comes back with its name and traceback');
  const png = await client.callTool({ name: 'run_code', arguments: {
    code: "class P:\n    def _repr_png_(self): return b'\\x89PNG'\nP()" } });
  check(png.content?.some((c) => c.type === 'image' && c.mimeType === 'image/png' && c.data === 'iVBORw=='),
        'run_code: an image value is image content the model can see');
}
const missing = await client.callTool({ name: 'read_file', arguments: { path: '/tmp/sbx-no-such-file' } });
check(missing.isError === true && missing.content?.[0]?.text?.startsWith('SBX_E1701'), 'a failing call is isError with its SBX code');

// Cancellation: abort a long command; the SDK sends notifications/cancelled.
const abort = new AbortController();
const long = client.callTool({ name: 'run_command', arguments: { command: 'sleep 3171' } }, undefined, { signal: abort.signal, timeout: 120000 })
  .then(() => 'completed', (e) => `rejected: ${e?.message ?? e}`);
const probe = async () => (await client.callTool({ name: 'run_command', arguments: { argv: ['pgrep', '-f', 'sleep 3171'] } })).structuredContent?.exit_code === 0;
let running = false;
for (let i = 0; i < 200 && !running; i++) running = await probe();
check(running, 'the long command runs in the sandbox');
abort.abort();
check((await long).startsWith('rejected'), 'the cancelled call ends on the client');
let gone = false;
for (let i = 0; i < 200 && !gone; i++) gone = !(await probe());
check(gone, 'after cancellation the command no longer runs in the sandbox');

await client.close();
if (failures.length) { console.error(`${failures.length} check(s) failed`); process.exit(1); }
console.log('all SDK checks passed');
