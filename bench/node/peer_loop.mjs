// The loop both benchmark peers share: one JSON command per line on stdin, one JSON answer per
// line on stdout ({"error": "..."} when the command failed), in order.
import { createInterface } from 'node:readline';

export async function serve(ops) {
  for await (const line of createInterface({ input: process.stdin })) {
    let answer;
    try {
      const cmd = JSON.parse(line);
      answer = await ops[cmd.op](cmd);
    } catch (e) {
      answer = { error: String(e?.message ?? e) };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  }
}
