#include "scenario.hpp"

#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::replay {
namespace {

std::string g_session = "replay00000a", g_owner = "host:1";

// replaydocker://IMAGE: docker:// on the local socket with the recorded identity (a replay
// must make the same requests, exec tokens included).
const bool registered = [] {
  BackendEntry e;
  e.scheme = "replaydocker";
  e.summary = "docker:// with a fixed identity, for record and replay";
  e.factory = [](const Dsn& dsn) -> Result<std::unique_ptr<Machine>> {
    docker::Config c;
    c.endpoint = docker::local_socket();
    c.image = dsn.target;
    c.session = g_session;
    c.owner = g_owner;
    return docker::make_machine(std::move(c));
  };
  return registry().add(std::move(e)).ok();
}();

std::string show(const ExecResult& r) {
  std::string s = "exit=" + (r.exit_code ? std::to_string(*r.exit_code) : std::string("none")) +
                  " termination=" + std::string(to_string(r.termination)) + " stdout=[" +
                  r.stdout_bytes + "] stderr=[" + r.stderr_bytes + "]\n";
  return s;
}

}  // namespace

void set_identity(std::string session, std::string owner) {
  g_session = std::move(session);
  g_owner = std::move(owner);
}

std::string docker_scenario(std::unique_ptr<Link> link) {
  if (!registered) return "not registered";
  std::string t;
  auto queue = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = queue;
  o.audit.capture_commands = true;
  o.teardown_grace = std::chrono::seconds(5);
  auto sb =
      sync::Sandbox::create("replaydocker://sandboxio-test/python:bookworm", o, std::move(link));
  t += "create tier=" + std::string(sb.info().tier.name()) + "\n";
  t += "run " + show(sb.run({"sh", "-c", "echo out; echo err >&2; exit 3"}));
  auto p = sb.stream({"sh", "-c", "echo one; sleep 0.2; echo two >&2; echo three"});
  // Chunk boundaries follow the bytes' arrival; what each stream carried, and that its
  // offsets have no gap, does not.
  std::string out, err;
  bool gapless = true;
  while (auto c = p.next()) {
    std::string& into = c->stream == StreamKind::Stdout ? out : err;
    gapless = gapless && c->offset == into.size();
    into += c->data;
  }
  t += "stream stdout=[" + out + "] stderr=[" + err + "] gapless=" + (gapless ? "yes " : "no ") +
       show(p.wait());
  Command slow;
  slow.argv = {"sh", "-c", "sleep 30"};
  slow.timeout = std::chrono::milliseconds(800);
  t += "timeout " + show(sb.run(slow));
  std::string data;
  for (int i = 0; i < 70000; ++i)
    data.push_back(static_cast<char>((i * 7) & 0xff));
  sb.write_file("/tmp/replay/data.bin", data);
  t += "read_back_equal=" +
       std::string(sb.read_file("/tmp/replay/data.bin") == data ? "yes" : "no") + "\n";
  try {
    (void)sb.read_file("/no/such/file");
    t += "missing file read\n";
  } catch (const Error& e) {
    t += "missing " + std::string(error_info(e.sbx_code()).id) + " " + e.detail() + "\n";
  }
  t += "after " + show(sb.run({"echo", "after"}));
  sb.kill();
  for (const auto& r : queue->drain())
    t += to_json_line(r);
  return t;
}

}  // namespace sandboxio::replay
