// Embedding the engine in a foreign event loop: this program drives a backend machine from its
// own poll(2) loop, with no Asio and no sandboxio transport. Any loop (epoll, libuv, Qt) does
// the same: perform the machine's requests, feed it what happens, wake it at its deadline.
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <sandboxio/fake.hpp>
#include <sandboxio/machine.hpp>

using Clock = std::chrono::steady_clock;

int main() {
  const auto epoch = Clock::now();
  auto now = [&] {
    return sandboxio::Instant(
        std::chrono::duration_cast<sandboxio::Instant::duration>(Clock::now() - epoch));
  };

  // fake:// never asks for a connection; a networked backend would, and this loop would then
  // add the sockets of request::Open to its pollfd set and feed handle_bytes/handle_eof.
  auto machine = sandboxio::fake::make_machine(sandboxio::parse_dsn("fake://").value()).value();

  sandboxio::OpId create = machine->submit_create({}, now());
  sandboxio::OpId run = 0;
  int exit_code = -1;
  bool finished = false;
  while (!finished) {
    while (auto request = machine->poll_request()) {
      std::fprintf(stderr, "unexpected request from fake://\n");
      return 1;
    }
    while (auto event = machine->poll_event()) {
      if (auto* done = std::get_if<sandboxio::event::Done>(&*event)) {
        if (done->op == create) {
          sandboxio::Command command;
          command.argv = {"sh", "-c", "echo from the loop; sleep 0.2; exit 7"};
          run = machine->submit_run(command, now());
        } else if (done->op == run) {
          const auto& result = std::get<sandboxio::ExecResult>(done->value);
          std::printf("%s", result.stdout_bytes.c_str());
          exit_code = *result.exit_code;
          finished = true;
        }
      } else if (auto* failed = std::get_if<sandboxio::event::Failed>(&*event)) {
        std::fprintf(stderr, "%s\n", failed->problem.describe().c_str());
        return 1;
      }
    }
    if (finished) break;
    // Sleep in poll() until the machine's next deadline (no file descriptors here).
    const auto deadline = machine->poll_deadline();
    if (!deadline) {
      std::fprintf(stderr, "the machine waits for nothing\n");
      return 1;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now()).count();
    ::poll(nullptr, 0, static_cast<int>(left > 0 ? left + 1 : 0));
    machine->handle_timeout(now());
  }
  std::printf("exit code %d\n", exit_code);
  return exit_code == 7 ? 0 : 1;
}
