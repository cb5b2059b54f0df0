// libFuzzer harness: the MCP server's JSON-RPC handler on fuzzer-written messages (each line one
// message, over stdio or HTTP with fuzzer-chosen headers), with fake:// as the backend.
// Properties: no crash, every message gets its end exactly once, and close() ends them all.
#include <asio/io_context.hpp>
#include <cstdlib>
#include <memory>
#include <string>

#include "sandboxio/mcp.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  if (size < 1) return 0;
  asio::io_context io;
  auto run_for = [&io](std::chrono::milliseconds d) {
    io.restart();  // a context that ran out of work is stopped until restarted
    io.run_for(d);
  };
  mcp::ServerOptions o;
  o.backend = "fake://";
  o.create.lifetime = std::chrono::seconds(60);
  auto server = std::make_unique<mcp::Server>(io.get_executor(), o);
  mcp::Transport t;
  t.http = (data[0] & 1) != 0;
  if (data[0] & 2) t.headers["mcp-protocol-version"] = "2026-07-28";
  if (data[0] & 4) t.headers["mcp-method"] = "tools/call";
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto pending = std::make_shared<int>(0);
  std::size_t pos = 0;
  for (int n = 0; n < 32 && pos < text.size(); ++n) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    auto ended = std::make_shared<bool>(false);
    ++*pending;
    server->handle(line, t,
                   mcp::Reply{[](std::string) {},
                              [ended, pending](int) {
                                if (*ended) std::abort();  // ended twice
                                *ended = true;
                                --*pending;
                              }});
    run_for(std::chrono::milliseconds(20));
  }
  run_for(std::chrono::milliseconds(50));
  bool closed = false;
  server->close([&] { closed = true; });
  run_for(std::chrono::milliseconds(200));
  if (!closed || *pending != 0) std::abort();  // a message never ended, or close hung
  server.reset();
  run_for(std::chrono::milliseconds(20));
  return 0;
}
