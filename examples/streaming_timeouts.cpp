// Streaming and timeouts: output as it is produced, and a deadline on every command that kills
// what the command started and says so. The program checks each claim it prints and exits 1 if
// one does not hold, so the tests run it as it is on fake:// and docker://.
//
//   streaming_timeouts fake://
//   streaming_timeouts docker://python:3.12-slim
#include <chrono>
#include <iostream>
#include <string>

#include "sandboxio/sync.hpp"

using namespace std::chrono_literals;
using sandboxio::Termination;

namespace {

int failures = 0;

void check(bool holds, const std::string& claim) {
  std::cout << (holds ? "ok   " : "FAIL ") << claim << "\n";
  if (!holds) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dsn = argc > 1 ? argv[1] : "fake://";
  try {
    auto sandbox = sandboxio::sync::Sandbox::create(dsn);

    // 1. Streaming: each chunk as the process writes it, stdout and stderr kept apart, in order
    //    within each stream.
    auto process = sandbox.stream(
        {"sh", "-c",
         "echo line 1; sleep 0.05; echo line 2; sleep 0.05; echo line 3; echo done >&2"});
    std::string out, err;
    int chunks = 0;
    while (auto chunk = process.next()) {
      ++chunks;
      (chunk->stream == sandboxio::StreamKind::Stdout ? out : err) += chunk->data;
      std::cout << "  [" << to_string(chunk->stream) << "] " << chunk->data;
    }
    const sandboxio::ExecResult streamed = process.wait();
    check(out == "line 1\nline 2\nline 3\n" && err == "done\n",
          "stdout and stderr arrive apart and in order");
    check(streamed.ok() && streamed.streamed, "the stream ends with exit 0 (result says streamed)");

    // 2. A timeout kills the command and says Timeout; the exit code is never made up.
    sandboxio::Command slow;
    slow.argv = {"sleep", "30"};
    slow.timeout = 300ms;
    const auto start = std::chrono::steady_clock::now();
    const sandboxio::ExecResult timed_out = sandbox.run(slow);
    const auto took = std::chrono::steady_clock::now() - start;
    check(timed_out.termination == Termination::Timeout,
          "sleep 30 with a 300 ms timeout ends in Timeout");
    std::cout << "  exit code as the sandbox reported it: "
              << (timed_out.exit_code ? std::to_string(*timed_out.exit_code) : "none") << "\n";
    check(took < 10s, "the timeout returns promptly, not after the 30 s sleep");

    // 3. A timeout in the middle of a stream: what was written before it arrives, then the end.
    sandboxio::Command chatty;
    chatty.argv = {"sh", "-c", "echo started; sleep 30; echo never"};
    chatty.timeout = 500ms;
    auto cut = sandbox.stream(chatty);
    std::string before;
    while (auto chunk = cut.next())
      before += chunk->data;
    const sandboxio::ExecResult cut_result = cut.wait();
    check(before == "started\n", "output written before the timeout is delivered, nothing after");
    check(cut_result.termination == Termination::Timeout, "the stream ends in Timeout");

    // 4. Stopping a stream early (kill, or dropping the Process) kills the remote process.
    auto endless = sandbox.stream({"sh", "-c", "while true; do echo tick; sleep 0.05; done"});
    (void)endless.next();
    endless.kill();
    check(endless.wait().termination == Termination::Cancelled,
          "kill() ends an endless stream as Cancelled");

    // 5. The sandbox is still fine for the next command.
    check(sandbox.run({"echo", "still here"}).stdout_bytes == "still here\n", "the next run works");
  } catch (const sandboxio::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
