// sandboxio run: one command in a fresh sandbox, output streamed live to the same streams,
// the command's exit code as ours.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/routing.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::cli {
namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The exit status a shell would give: the command's own, 128+N for a signal, 124 for a
// timeout (as timeout(1)), 137 for out of memory, 1 when the sandbox ended under it, 130 when
// interrupted.
int shell_status(const ExecResult& r) {
  switch (r.termination) {
    case Termination::Exited:
      return r.exit_code.value_or(1);
    case Termination::Signalled:
      return 128 + r.signal.value_or(9);
    case Termination::Timeout:
      return 124;
    case Termination::OutOfMemory:
      return 137;
    case Termination::SandboxGone:
      return 1;
    case Termination::Cancelled:
      return 130;
  }
  return 1;
}

/// What a learning run tried to reach, as an allow list to paste (stderr: stdout is the
/// command's).
void print_learned(const std::vector<std::string>& hosts) {
  if (hosts.empty()) {
    std::cerr << "sandboxio: learning mode: the command tried to reach no host through the "
                 "proxy\n";
    return;
  }
  std::cerr << "sandboxio: learning mode: the command tried to reach " << hosts.size()
            << (hosts.size() == 1 ? " host" : " hosts") << " (all refused):\n";
  for (const auto& h : hosts)
    std::cerr << "  " << h << "\n";
  std::cerr << "Allow them on the command line:\n ";
  for (const auto& h : hosts)
    std::cerr << " --allow " << h;
  std::cerr << "\nor in a routing file's class:\n    network: [";
  for (std::size_t i = 0; i < hosts.size(); ++i)
    std::cerr << (i == 0 ? "" : ", ") << hosts[i];
  std::cerr << "]\n";
}

}  // namespace

int run(const RunArgs& a) {
  std::string dsn = a.backend;
  CreateOptions options;
  if (!a.routing.empty()) {
    const RoutingTable table = RoutingTable::load(a.routing);
    const IsolationClass& c = table.route_for(a.tool, a.tenant);
    options = c.create_options();
    if (dsn.empty()) dsn = c.backend;
  }
  if (dsn.empty()) {
    const auto chosen = choose_backend({});
    dsn = chosen.first;
    if (is_terminal(stderr) && !a.json)
      std::cerr << style_for(stderr).dim("sandboxio: running on " + dsn + " (" + chosen.second +
                                         ")")
                << "\n";
  }
  if (!a.allow.empty()) options.network = NetworkPolicy::allowing(a.allow);
  // Learning: every attempt is refused and recorded; the records are read once the sandbox
  // has ended, so that every connection has closed into its record.
  std::shared_ptr<QueueSink> learned;
  if (a.learn) {
    options.network = NetworkPolicy::learning();
    learned = std::make_shared<QueueSink>();
    options.audit.sink = learned;
  }
  for (const auto& kv : a.env) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "sandboxio: --env wants NAME=VALUE, not \"" << kv << "\"\n";
      return 2;
    }
    options.env.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const bool progress = is_terminal(stderr) && !a.json;
  if (progress) std::cerr << style_for(stderr).dim("sandboxio: creating the sandbox...") << "\r";
  auto sb = sync::Sandbox::create(dsn, options);
  if (progress) std::cerr << "\033[2K";
  print_warnings(sb.warnings());
  for (const auto& f : a.files) {
    const std::size_t colon = f.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == f.size()) {
      std::cerr << "sandboxio: --file wants LOCAL:REMOTE, not \"" << f << "\"\n";
      return 2;
    }
    std::ifstream in(f.substr(0, colon), std::ios::binary);
    if (!in) {
      std::cerr << "sandboxio: cannot read " << f.substr(0, colon) << "\n";
      return 1;
    }
    std::ostringstream data;
    data << in.rdbuf();
    sb.write_file(f.substr(colon + 1), data.str());
  }
  Command c;
  c.argv = a.command;
  c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_seconds * 1000));
  if (a.json) {
    const ExecResult r = sb.run(c);
    std::vector<std::string> hosts;
    if (learned) {
      sb.kill();
      hosts = learned_allow_list(learned->drain());
    }
    JsonWriter w;
    w.begin_object();
    w.key("backend").value(sb.info().backend);
    w.key("sandbox_id").value(sb.id());
    if (r.exit_code) {
      w.key("exit_code").value(*r.exit_code);
    } else {
      w.key("exit_code").null();
    }
    w.key("termination").value(to_string(r.termination));
    if (r.signal) w.key("signal").value(*r.signal);
    w.key("duration_ms")
        .value(static_cast<std::int64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(r.duration).count()));
    w.key("stdout").value(r.stdout_bytes);
    w.key("stderr").value(r.stderr_bytes);
    w.key("bytes_in").value(static_cast<std::uint64_t>(r.bytes_in));
    w.key("bytes_out").value(static_cast<std::uint64_t>(r.bytes_out));
    if (learned) {
      w.key("learned_allow_list").begin_array();
      for (const auto& h : hosts)
        w.value(h);
      w.end_array();
    }
    w.end_object();
    std::cout << w.str() << "\n";
    return g_interrupted ? 130 : shell_status(r);
  }
  auto p = sb.stream(c);
  while (auto chunk = p.next()) {
    write_all(chunk->stream == StreamKind::Stdout ? 1 : 2, chunk->data);
    if (g_interrupted) {
      p.kill();
      return 130;
    }
  }
  const ExecResult r = p.wait();
  if (learned) {
    sb.kill();
    print_learned(learned_allow_list(learned->drain()));
  }
  if (r.termination == Termination::Timeout)
    std::cerr << "sandboxio: the command was killed at its timeout (" << a.timeout_seconds
              << " s)\n";
  if (r.termination == Termination::SandboxGone)
    std::cerr << "sandboxio: the sandbox ended under the command\n";
  return shell_status(r);
}

int routing_check(const std::string& file, bool json) {
  const RoutingTable t = RoutingTable::load(file);
  if (json) {
    JsonWriter w;
    w.begin_object().key("file").value(file).key("default_class").value(t.default_class().name);
    w.key("classes").begin_array();
    for (const auto& c : t.classes()) {
      w.begin_object().key("name").value(c.name).key("backend").value(c.backend);
      w.key("network").value(c.network.describe());
      w.key("lifetime_s").value(static_cast<std::int64_t>(c.lifetime.count()));
      if (c.min_tier) w.key("min_tier").value(c.min_tier->name());
      w.end_object();
    }
    w.end_array().key("routes").begin_array();
    for (const auto& r : t.routes()) {
      w.begin_object().key("tool").value(r.tool).key("tenant").value(r.tenant);
      w.key("class").value(r.class_name).end_object();
    }
    w.end_array().end_object();
    std::cout << w.str() << "\n";
    return 0;
  }
  const Style out = style_for(stdout);
  std::cout << out.ok("ok") << ": " << file << ": " << t.classes().size() << " classes, "
            << t.routes().size() << " routes, default " << t.default_class().name << "\n";
  for (const auto& c : t.classes()) {
    std::cout << "  class " << c.name << ": " << c.backend << ", network " << c.network.describe()
              << ", lifetime " << c.lifetime.count() << "s"
              << (c.min_tier ? ", min tier " + std::string(c.min_tier->name()) : "") << "\n";
  }
  for (const auto& r : t.routes())
    std::cout << "  route tool=" << r.tool << " tenant=" << r.tenant << " -> " << r.class_name
              << "\n";
  return 0;
}

}  // namespace sandboxio::cli
