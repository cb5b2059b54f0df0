// One downstream program, any backend: only the DSN changes. The test suite runs this very
// program on fake://, docker://, e2b:// (the local E2B-compatible server) and modal:// (the
// local Modal server) and requires the same output from all four.
//
//   one_line_swap fake://
//   one_line_swap docker://python:3.12-slim
//   one_line_swap e2b://code-interpreter-v1            (E2B_API_KEY set)
//   one_line_swap modal://python:3.12-slim             (MODAL_TOKEN_ID and _SECRET set)
#include <algorithm>
#include <iostream>
#include <string>

#include "sandboxio/sync.hpp"

namespace {

std::string show(const std::string& bytes) {
  std::string out;
  for (char c : bytes)
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "\"" + out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dsn = argc > 1 ? argv[1] : "fake://";
  try {
    auto sb = sandboxio::sync::Sandbox::create(dsn);

    sb.write_file("/tmp/work/input.txt", "3\n");
    const auto r = sb.run({"sh", "-c", "cat /tmp/work/input.txt; echo to-stderr >&2; exit 2"});
    std::cout << "run: exit " << r.exit_code.value_or(-1) << ", stdout " << show(r.stdout_bytes)
              << ", stderr " << show(r.stderr_bytes) << "\n";

    std::string streamed;
    auto p = sb.stream({"seq", "1", "3"});
    while (auto chunk = p.next())
      streamed += chunk->data;
    std::cout << "stream: " << show(streamed) << ", exit " << p.wait().exit_code.value_or(-1)
              << "\n";

    const auto code = sb.run_code("x = 6\nprint(x * 7)");
    std::cout << "run_code: " << show(code.stdout_bytes) << "\n";

    auto files = sb.list_files("/tmp/work");
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const auto& f : files)
      std::cout << "file: " << f.name << " (" << f.size << " bytes)\n";
    std::cout << "read back: " << show(sb.read_file("/tmp/work/input.txt")) << "\n";

    const auto egress = sb.run(
        {"python3", "-c", "import socket; socket.create_connection(('example.com', 443), 3)"});
    std::cout << "network: " << (egress.ok() ? "reachable" : "denied") << "\n";
    sb.kill();
    std::cout << "killed\n";
  } catch (const sandboxio::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
