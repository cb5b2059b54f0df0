// sandboxio demo: create, run, stream, probe egress, tear down; each step timed.
#include <cstdio>
#include <iostream>

#include "common.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::cli {

int demo(const std::string& requested) {
  const Style out = style_for(stdout);
  const auto chosen = choose_backend(requested);
  const std::string& dsn = chosen.first;
  std::cout << "sandboxio demo on " << dsn << " " << out.dim("(" + chosen.second + ")") << "\n";
  auto line = [](const std::string& step, const std::string& what, std::chrono::nanoseconds took) {
    std::printf("  %-9s %-58s %8s\n", step.c_str(), what.c_str(),
                sandboxio::format_duration(took).c_str());
  };
  Stopwatch watch;
  sandboxio::CreateOptions options;
  options.lifetime = std::chrono::minutes(5);
  auto sandbox = sandboxio::sync::Sandbox::create(dsn, options);
  print_warnings(sandbox.warnings());
  line("create",
       (sandbox.id().size() == 64 ? sandbox.id().substr(0, 12) : sandbox.id()) + " (tier " +
           std::string(sandbox.tier().name()) + ", network " + sandbox.info().network.describe() +
           ")",
       watch.lap());

  const auto hello = sandbox.run({"python3", "-c", "print('hello from the sandbox')"});
  line("run",
       "python3 -> \"" + printable(hello.stdout_bytes) + "\" exit " +
           std::to_string(hello.exit_code.value_or(-1)),
       watch.lap());
  if (!hello.ok()) {
    std::cerr << out.bad("run failed: ") << printable(hello.stderr_bytes) << "\n";
    return 1;
  }

  auto proc = sandbox.stream(
      {"sh", "-c", "echo tick 1; sleep 0.1; echo tick 2; sleep 0.1; echo tick 3; echo done >&2"});
  int chunks = 0;
  bool had_stderr = false;
  while (auto chunk = proc.next()) {
    ++chunks;
    had_stderr = had_stderr || chunk->stream == sandboxio::StreamKind::Stderr;
  }
  const bool streamed = proc.wait().exit_code.value_or(-1) == 0 && had_stderr;
  line("stream", std::to_string(chunks) + " chunks as they came, stdout and stderr apart",
       watch.lap());
  if (!streamed) {
    std::cerr << out.bad("streaming did not deliver both streams") << "\n";
    return 1;
  }

  const auto probe =
      sandbox.run_code("import socket\nsocket.create_connection(('example.com', 443), timeout=3)");
  const bool denied = !probe.ok();
  std::string why = probe.stderr_bytes;
  while (!why.empty() && why.back() == '\n')
    why.pop_back();
  // The last line of the traceback, without its exception class and errno:
  // "socket.gaierror: [Errno -3] Temporary failure in name resolution" says the reason last.
  why = why.substr(why.find_last_of('\n') + 1);
  if (const auto errno_end = why.rfind("] "); errno_end != std::string::npos) {
    why = why.substr(errno_end + 2);
  } else if (const auto colon = why.rfind(": "); colon != std::string::npos) {
    why = why.substr(colon + 2);
  }
  if (why.size() > 48) why = why.substr(0, 45) + "...";
  line("egress",
       std::string("connect(example.com:443) -> ") + (denied ? "blocked: " + why : "REACHED"),
       watch.lap());
  if (!denied) {
    std::cerr << out.bad("the sandbox reached the network although the policy denies it") << "\n";
    return 1;
  }

  sandbox.kill();
  line("teardown", "killed; nothing left behind", watch.lap());
  std::cout << out.ok("ok")
            << ": the same program runs on local://, docker:// and e2b:// by changing the DSN\n";
  return 0;
}

}  // namespace sandboxio::cli
