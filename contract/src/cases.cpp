// The contract cases. Each states one behaviour users rely on; names are "family.behaviour".
#include <algorithm>
#include <asio/error.hpp>
#include <optional>

#include "sandboxio/contract.hpp"
#include "sandboxio/sinks.hpp"

namespace sandboxio::contract {
namespace {

using namespace std::chrono_literals;
using BoxPtr = std::unique_ptr<Box>;

// True for asio::error::operation_aborted (ECANCELED) and std::errc::operation_canceled.
bool is_cancellation(std::error_code ec) {
  // asio::error::operation_aborted lives in Asio's own category, which maps to no std::errc.
  return ec == asio::error::operation_aborted || ec == std::errc::operation_canceled;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw CaseFailure(what);
}

std::string show(const std::string& bytes) {
  std::string out;
  for (char c : bytes.substr(0, 200)) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\x" + std::to_string(static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return "\"" + out + (bytes.size() > 200 ? "...\"" : "\"");
}

BoxPtr make(const Target& t, CreateOptions o = {}, const std::string& dsn = {}) {
  return t.transport->create(dsn.empty() ? t.dsn : dsn, std::move(o));
}

template <class F>
void expect_code(errc code, F&& f, const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    require(e.code() == code,
            what + ": expected " + std::string(error_info(code).id) + ", got " + e.what());
    return;
  }
  throw CaseFailure(what + ": expected " + std::string(error_info(code).id) + ", but it succeeded");
}

bool alive(Box& sb, const Target& t, const std::string& marker) {
  require(static_cast<bool>(t.alive_probe), "the target supplies no alive_probe");
  return sb.run(t.alive_probe(marker)).exit_code == 0;
}

ExecResult sh(Box& sb, const std::string& script) {
  return sb.run({"sh", "-c", script});
}

// ---- lifecycle ----

void lifecycle_create_info_kill(const Target& t) {
  auto sb = make(t);
  require(!sb->id().empty(), "create() gave an empty id");
  const SandboxInfo info = sb->info();
  require(info.id == sb->id(), "info().id differs from id()");
  require(info.state == SandboxState::Running, "a new sandbox is not running");
  require(info.network.denies_all(), "the default network policy is not deny-all");
  require(info.lifetime == kDefaultLifetime, "info() does not report the lifetime asked for");
  sb->kill();
  expect_code(
      errc::SandboxGone, [&] { (void)sb->run({"true"}); }, "run after kill");
}

void lifecycle_reattach_by_id(const Target& t) {
  auto sb = make(t);
  if (!sb->capabilities().contains(Capability::Reattach)) {
    expect_code(
        errc::CapabilityNotSupported, [&] { (void)t.transport->connect(t.dsn, sb->id(), {}); },
        "connect() without the reattach capability");
    return;
  }
  require(sh(*sb, "echo state > /tmp/reattach").ok(), "could not write a marker");
  {
    auto again = t.transport->connect(t.dsn, sb->id(), {});
    require(again->id() == sb->id(), "connect() gave another id");
    const auto r = again->run({"cat", "/tmp/reattach"});
    require(r.stdout_bytes == "state\n",
            "the re-attached sandbox does not see the same files: " + show(r.stdout_bytes));
  }  // dropping a re-attached handle leaves the sandbox alone
  require(sb->run({"true"}).ok(), "dropping a re-attached handle killed the sandbox");
  expect_code(
      errc::SandboxNotFound, [&] { (void)t.transport->connect(t.dsn, "sbx-no-such-sandbox", {}); },
      "connect() to an unknown id");
}

void lifecycle_lifetime_expiry_gives_gone(const Target& t) {
  CreateOptions o;
  o.lifetime = 1s;
  auto sb = make(t, o);
  Command c;
  c.argv = {"sleep", "30"};
  // The command either ends with the sandbox (Termination::SandboxGone) or, when the one-second
  // sandbox was already gone before it could start (a slow create), is refused with
  // SBX_E1204. Both are the truth; a timeout or a hang is not.
  try {
    const auto r = sb->run(c);
    require(r.termination == Termination::SandboxGone,
            "a command outliving the sandbox's lifetime ended as " +
                std::string(to_string(r.termination)));
  } catch (const Error& e) {
    require(e.code() == errc::SandboxGone,
            std::string("a command outliving the sandbox's lifetime failed with ") + e.what());
  }
  expect_code(
      errc::SandboxGone, [&] { (void)sb->run({"true"}); }, "run after the lifetime ended");
}

void lifecycle_dropped_handle_ends_sandbox(const Target& t) {
  std::string id;
  {
    auto sb = make(t);
    id = sb->id();
  }
  try {
    auto again = t.transport->connect(t.dsn, id, {});
    (void)again->run({"true"});
  } catch (const Error& e) {
    require(e.code() == errc::SandboxGone || e.code() == errc::SandboxNotFound ||
                e.code() == errc::CapabilityNotSupported,
            std::string("unexpected error after the owner dropped the handle: ") + e.what());
    return;
  }
  throw CaseFailure("the sandbox still runs commands after its owner dropped the handle");
}

// ---- run ----

void run_exit_codes(const Target& t) {
  auto sb = make(t);
  for (int code : {0, 1, 3}) {
    const auto r = sh(*sb, "exit " + std::to_string(code));
    require(r.exit_code == code && r.termination == Termination::Exited,
            "exit " + std::to_string(code) + " gave " + std::to_string(r.exit_code.value_or(-1)));
  }
  const auto killed = sh(*sb, "kill -9 $$");
  require(
      killed.exit_code == 137 && killed.termination == Termination::Signalled && killed.signal == 9,
      "a process killed by SIGKILL gave exit " + std::to_string(killed.exit_code.value_or(-1)) +
          " (" + std::string(to_string(killed.termination)) + ")");
  const auto missing = sb->run({"sbx-definitely-not-installed"});
  require(missing.exit_code == 127,
          "a missing binary gave exit " + std::to_string(missing.exit_code.value_or(-1)));
  if (sb->capabilities().contains(Capability::Filesystem)) {
    sb->write_file("/tmp/not-executable", "#!/bin/sh\necho hi\n");
    const auto r = sb->run({"/tmp/not-executable"});
    require(r.exit_code == 126,
            "a non-executable file gave exit " + std::to_string(r.exit_code.value_or(-1)));
  }
}

void run_streams_apart(const Target& t) {
  auto sb = make(t);
  const auto r = sh(*sb, "echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3");
  require(r.stdout_bytes == "out1\nout2\nout3\n", "stdout is " + show(r.stdout_bytes));
  require(r.stderr_bytes == "err1\nerr2\n", "stderr is " + show(r.stderr_bytes));
}

void run_missing_binary_says_why(const Target& t) {
  auto sb = make(t);
  const auto r = sb->run({"sbx-definitely-not-installed"});
  require(r.stdout_bytes.empty(), "a missing binary wrote to stdout: " + show(r.stdout_bytes));
  require(r.stderr_bytes.find("sbx-definitely-not-installed") != std::string::npos,
          "stderr does not name the missing program: " + show(r.stderr_bytes));
}

void run_binary_output(const Target& t) {
  auto sb = make(t);
  const auto r = sb->run({"printf", "a\\000b\\377c"});
  require(r.stdout_bytes == std::string("a\0b\xff"
                                        "c",
                                        5),
          "binary output came back as " + show(r.stdout_bytes));
}

void run_ten_megabytes(const Target& t) {
  auto sb = make(t);
  const auto r = sb->run({"head", "-c", "10485760", "/dev/zero"});
  require(r.ok(), "the command failed");
  require(r.stdout_bytes.size() == 10485760,
          "got " + std::to_string(r.stdout_bytes.size()) + " bytes");
  require(r.stdout_bytes.find_first_not_of('\0') == std::string::npos,
          "the bytes changed on the way");
}

void run_env_and_workdir(const Target& t) {
  CreateOptions o;
  o.env.set("SBX_CONTRACT_A", "from-create");
  auto sb = make(t, o);
  Command c;
  c.argv = {"sh", "-c", "echo $SBX_CONTRACT_A $SBX_CONTRACT_B; pwd"};
  c.env.set("SBX_CONTRACT_B", "from-run");
  c.workdir = "/tmp";
  const auto r = sb->run(c);
  require(r.stdout_bytes == "from-create from-run\n/tmp\n",
          "env/workdir gave " + show(r.stdout_bytes));
}

void run_stdin(const Target& t) {
  auto sb = make(t);
  Command c;
  c.argv = {"cat"};
  c.stdin_data = std::string("line1\n\0bin", 10);
  if (!sb->capabilities().contains(Capability::Stdin)) {
    expect_code(
        errc::CapabilityNotSupported, [&] { (void)sb->run(c); }, "stdin undeclared");
    return;
  }
  const auto r = sb->run(c);
  require(r.stdout_bytes == c.stdin_data, "stdin came back as " + show(r.stdout_bytes));
}

// ---- run_code ----

void run_code_stateless(const Target& t) {
  if (!t.has_python) return;  // the image has no python3 to run code with
  auto sb = make(t);
  const auto r = sb->run_code("x = 6\nprint(x * 7)");
  require(r.ok() && r.stdout_bytes == "42\n",
          "run_code printed " + show(r.stdout_bytes) + " " + show(r.stderr_bytes));
  const auto again = sb->run_code("print(x)");
  require(!again.ok(), "a variable survived between stateless run_code calls");
  const auto failing = sb->run_code("raise ValueError('boom')");
  require(!failing.ok() && failing.stderr_bytes.find("ValueError") != std::string::npos,
          "an exception in code did not fail with a traceback: " + show(failing.stderr_bytes));
}

void run_code_stateful_contexts(const Target& t) {
  auto sb = make(t);
  if (!sb->capabilities().contains(Capability::StatefulCode)) {
    expect_code(
        errc::CapabilityNotSupported, [&] { (void)sb->create_context(); },
        "create_context() undeclared");
    return;
  }
  const auto ctx = sb->create_context();
  CodeRequest a;
  a.code = "counter = 41";
  a.context = ctx.id;
  require(sb->run_code(a).ok(), "assignment in a context failed");
  CodeRequest b;
  b.code = "print(counter + 1)";
  b.context = ctx.id;
  const auto r = sb->run_code(b);
  require(r.stdout_bytes == "42\n",
          "the variable did not survive in its context: " + show(r.stdout_bytes));
}

void run_code_rich_output(const Target& t) {
  auto sb = make(t);
  const auto r = sb->run_code("6 * 7");
  if (!sb->capabilities().contains(Capability::RichOutput)) {
    require(r.results.empty(),
            "results were synthesised by a backend that does not declare rich_output");
    return;
  }
  require(!r.results.empty() && r.results[0].mime_type == "text/plain" && r.results[0].data == "42",
          "the value of the last expression is not a text/plain result");
}

void run_code_rich_mime_types(const Target& t) {
  auto sb = make(t);
  if (!sb->capabilities().contains(Capability::RichOutput) || !t.full_python) return;
  const auto r = sb->run_code(
      "class Report:\n"
      "    def _repr_html_(self): return '<b>done</b>'\n"
      "    def __repr__(self): return 'Report()'\n"
      "Report()");
  bool html = false;
  for (const auto& out : r.results)
    html = html || (out.mime_type == "text/html" && out.data == "<b>done</b>");
  require(r.ok() && html, "an object's _repr_html_ did not come back as text/html (" +
                              std::to_string(r.results.size()) + " results)");
}

void run_code_exception_details(const Target& t) {
  auto sb = make(t);
  if (!sb->capabilities().contains(Capability::RichOutput)) return;
  const auto r = sb->run_code("raise ValueError('boom')");
  require(r.exit_code == 1 && r.termination == Termination::Exited,
          "an exception did not end the call with exit code 1");
  require(r.error.has_value(), "an exception came back without its name, value and traceback");
  require(r.error->name == "ValueError" && r.error->value == "boom",
          "the exception came back as " + show(r.error->name) + ": " + show(r.error->value));
  require(r.error->traceback.find("ValueError: boom") != std::string::npos,
          "the traceback does not end with the exception: " + show(r.error->traceback));
  const auto fine = sb->run_code("1 + 1");
  require(fine.ok() && !fine.error, "a call without an exception reported one");
}

// ---- streaming ----

bool streaming(Box& sb) {
  if (sb.capabilities().contains(Capability::Streaming)) return true;
  expect_code(
      errc::CapabilityNotSupported, [&] { auto p = sb.stream({"true"}); }, "stream() undeclared");
  return false;
}

void stream_order_within_streams(const Target& t) {
  auto sb = make(t);
  if (!streaming(*sb)) return;
  auto p = sb->stream(
      {"sh", "-c", "echo 1; echo a >&2; sleep 0.05; echo 2; echo b >&2; sleep 0.05; echo 3"});
  std::string out, err;
  std::uint64_t next[2] = {0, 0};
  while (auto c = p->next()) {
    const int s = c->stream == StreamKind::Stdout ? 0 : 1;
    require(c->offset == next[s], "a gap or overlap in " + std::string(to_string(c->stream)));
    next[s] += c->data.size();
    (s == 0 ? out : err) += c->data;
  }
  const auto r = p->wait();
  require(out == "1\n2\n3\n", "stdout streamed as " + show(out));
  require(err == "a\nb\n", "stderr streamed as " + show(err));
  require(r.streamed && r.stdout_bytes.empty() && r.stderr_bytes.empty(),
          "the result repeats streamed output");
  require(r.exit_code == 0, "stream exit code " + std::to_string(r.exit_code.value_or(-1)));
}

void stream_read_to_end_cleans_up(const Target& t) {
  auto sb = make(t);
  if (!streaming(*sb)) return;
  auto p = sb->stream({"sh", "-c", "echo x; sleep 0.1; echo y"});
  while (auto c = p->next()) {
  }
  require(p->wait().exit_code == 0, "the stream did not end with exit 0");
  require(!alive(*sb, t, "sleep 0.1"), "the process is still running after its stream ended");
}

void stream_drop_mid_stream_kills(const Target& t) {
  auto sb = make(t);
  if (!streaming(*sb)) return;
  {
    auto p = sb->stream({"sh", "-c", "echo first; sleep 3141"});
    require(p->next().has_value(), "no first chunk");
    require(alive(*sb, t, "sleep 3141"), "the streamed process is not visible to the probe");
  }
  require(!alive(*sb, t, "sleep 3141"),
          "dropping the stream handle left the remote process running");
  require(sb->run({"true"}).ok(), "the sandbox does not work after a dropped stream");
}

void stream_consumer_exception_kills(const Target& t) {
  auto sb = make(t);
  if (!streaming(*sb)) return;
  try {
    auto p = sb->stream({"sh", "-c", "echo first; sleep 3142"});
    while (auto c = p->next())
      throw std::runtime_error("the consumer failed");
  } catch (const std::runtime_error&) {
  }
  require(!alive(*sb, t, "sleep 3142"),
          "an exception in the consumer left the remote process running");
}

void stream_cancellation_kills(const Target& t) {
  auto sb = make(t);
  if (!streaming(*sb)) return;
  auto p = sb->stream({"sh", "-c", "echo first; sleep 3143"});
  require(p->next().has_value(), "no first chunk");
  p->kill();
  require(p->wait().termination == Termination::Cancelled,
          "a cancelled stream did not end as cancelled");
  require(!alive(*sb, t, "sleep 3143"), "cancelling left the remote process running");
}

// ---- cancellation (transports with per-operation cancellation; the sync API has none) ----

std::vector<std::string> live(const Target& t) {
  return t.live_sandboxes ? t.live_sandboxes() : std::vector<std::string>{};
}

void cancel_during_create(const Target& t) {
  const auto before = live(t);
  const auto ec = t.transport->create_and_cancel(
      t.slow_create_dsn.empty() ? t.dsn : t.slow_create_dsn, {}, 1500ms);
  if (!ec) return;  // this transport cannot cancel an operation in flight
  require(is_cancellation(*ec), "a cancelled create completed with \"" + ec->message() + "\"");
  require(live(t) == before, "a cancelled create left a sandbox behind");
}

void cancel_during_run(const Target& t) {
  auto sb = make(t);
  Command c;
  c.argv = {"sh", "-c", "sleep 3161"};
  const auto ec = sb->run_and_cancel(c, [&] { return alive(*sb, t, "sleep 3161"); });
  if (!ec) return;
  require(is_cancellation(*ec), "a cancelled run completed with \"" + ec->message() + "\"");
  require(!alive(*sb, t, "sleep 3161"), "cancelling a run left the remote process running");
  require(sb->run({"true"}).ok(), "the sandbox does not work after a cancelled run");
}

void cancel_teardown_grace_expiry(const Target& t) {
  auto sink = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = sink;
  o.teardown_grace = 200ms;
  // Without a slow-teardown DSN, a slow create still shows that cancellation surfaces as such.
  const std::string& dsn = !t.slow_teardown_dsn.empty() ? t.slow_teardown_dsn
                           : !t.slow_create_dsn.empty() ? t.slow_create_dsn
                                                        : t.dsn;
  const auto ec = t.transport->create_and_cancel(dsn, o, 1500ms);
  if (!ec) return;
  require(is_cancellation(*ec),
          "cancellation surfaced as \"" + ec->message() + "\" instead of cancellation");
  if (t.slow_teardown_dsn.empty()) return;
  const auto records = sink->drain();
  const bool marked = std::any_of(records.begin(), records.end(), [](const OperationRecord& r) {
    return r.operation == Operation::Create && r.outcome == Outcome::Cancelled && r.possible_orphan;
  });
  require(marked,
          "the record of a teardown that outlived its grace does not mark a possible orphan");
}

// ---- timeouts ----

void timeout_kills_process_tree(const Target& t) {
  auto sb = make(t);
  const bool files = sb->capabilities().contains(Capability::Filesystem);
  if (files) sb->write_file("/tmp/keep.txt", "kept");
  Command c;
  c.argv = {"sh", "-c",
            "sleep 3151 & setsid sleep 3152 >/dev/null 2>&1 & echo started; sleep 3153"};
  c.timeout = 500ms;
  const auto r = sb->run(c);
  require(r.termination == Termination::Timeout,
          "ended as " + std::string(to_string(r.termination)));
  require(r.stdout_bytes == "started\n",
          "output before the timeout was lost: " + show(r.stdout_bytes));
  for (const char* marker : {"sleep 3151", "sleep 3152", "sleep 3153"}) {
    require(!alive(*sb, t, marker), std::string("'") + marker + "' survived the timeout");
  }
  if (files)
    require(sb->read_file("/tmp/keep.txt") == "kept", "the sandbox's files did not survive");
  require(sb->run({"true"}).ok(), "the next run failed");
}

void timeout_create(const Target& t) {
  CreateOptions o;
  o.create_timeout = t.slow_create_dsn.empty() ? 1ms : 200ms;
  expect_code(
      errc::CreateTimeout, [&] { (void)make(t, o, t.slow_create_dsn); },
      "create() past its timeout");
}

// ---- capability honesty ----

void capability_allow_list(const Target& t) {
  CreateOptions o;
  o.network = NetworkPolicy::allowing({"pypi.org"});
  auto probe = make(t);
  if (probe->capabilities().contains(Capability::NetworkAllowList)) {
    auto sb = make(t, o);
    require(sb->info().network == o.network, "the allow list in effect differs from the one asked");
  } else {
    expect_code(
        errc::PolicyUnenforceable, [&] { (void)make(t, o); },
        "an allow list the backend cannot enforce");
  }
}

void capability_resources(const Target& t) {
  auto probe = make(t);
  CreateOptions o;
  o.resources.memory_bytes = 256ULL << 20;
  o.resources.pids = 128;
  if (probe->capabilities().contains(Capability::ResourceCaps)) {
    auto sb = make(t, o);
    require(sb->run({"true"}).ok(), "a sandbox with resource caps does not run commands");
  } else {
    expect_code(
        errc::ResourceLimitUnsupported, [&] { (void)make(t, o); }, "resource caps undeclared");
  }
  CreateOptions disk;
  disk.resources.disk_bytes = 1ULL << 30;
  if (!probe->capabilities().contains(Capability::DiskLimit)) {
    expect_code(
        errc::ResourceLimitUnsupported, [&] { (void)make(t, disk); }, "a disk limit undeclared");
  }
}

void capability_files_undeclared(const Target& t) {
  auto sb = make(t);
  if (sb->capabilities().contains(Capability::Filesystem))
    return;  // files.* cover the declared side
  expect_code(
      errc::CapabilityNotSupported, [&] { sb->write_file("/tmp/x", "y"); },
      "write_file undeclared");
  expect_code(
      errc::CapabilityNotSupported, [&] { (void)sb->read_file("/tmp/x"); }, "read_file undeclared");
}

// ---- network ----

void network_deny_by_default(const Target& t) {
  require(!t.egress_probe.empty(), "the target supplies no egress_probe");
  auto sb = make(t);
  const auto r = sb->run(t.egress_probe);
  require(!r.ok(), "the egress probe reached the network under the default deny-all policy");
}

constexpr const char* kCanaryName = "canary.sandboxio.test";

// The allow-list rows where the sandbox resolves names itself and the network matches names on
// the standard ports (E2B): one sandbox, both canaries behind one address.
void network_allow_list_by_name(const Target& t) {
  HttpCanary canary;
  std::optional<TlsCanary> tls;
  if (t.tls_fetch_probe) tls.emplace(kCanaryName);
  CreateOptions o;
  o.network = NetworkPolicy::allowing({kCanaryName});
  const std::string address = t.route_canary(o, kCanaryName, canary.port(), tls ? tls->port() : 0);
  auto sb = make(t, o);
  const std::string name(kCanaryName);
  auto r = sb->run(t.fetch_probe("http://" + name + "/allowed"));
  require(r.ok() && r.stdout_bytes == canary.body(),
          "the allowed canary was not reached: exit " + std::to_string(r.exit_code.value_or(-1)) +
              ", " + show(r.stdout_bytes) + " " + show(r.stderr_bytes));
  require(canary.requests() == 1,
          "the canary saw " + std::to_string(canary.requests()) + " requests for one fetch");
  // An unlisted name at the very same address is refused by its name.
  r = sb->run(t.fetch_probe("http://unlisted.sandboxio.test/denied"));
  require(!r.ok(), "a host outside the allow list was fetched: " + show(r.stdout_bytes));
  // The address itself, as a raw connection names it, is no listed host.
  r = sb->run(t.fetch_probe("http://" + address + "/denied"));
  require(!r.ok(), "a raw connection to the canary's address was let through");
  // Names are matched on the standard ports only: another port is matched by address.
  r = sb->run(t.fetch_probe("http://" + name + ":8080/denied"));
  require(!r.ok(), "the allowed name on a port other than 80 and 443 was fetched");
  require(canary.requests() == 1, "a refused request reached the canary");
  if (tls) {
    sb->write_file("/tmp/canary-ca.pem", tls->ca_pem());
    r = sb->run(t.tls_fetch_probe("https://" + name + "/tls", "/tmp/canary-ca.pem"));
    require(r.ok() && r.stdout_bytes == tls->body(),
            "the TLS canary was not reached by its name: exit " +
                std::to_string(r.exit_code.value_or(-1)) + ", " + show(r.stdout_bytes) + " " +
                show(r.stderr_bytes));
    require(tls->sessions() == 1,
            "the TLS canary saw " + std::to_string(tls->sessions()) + " sessions for one fetch");
  }
  // (Such a sandbox resolves names: E2B allows its nameserver once a name is listed. No
  // resolution row here; docs/reference/backends/e2b.md says what that means.)
}

void network_allow_list(const Target& t) {
  if (!t.fetch_probe) return;
  auto probe = make(t);
  if (!probe->capabilities().contains(Capability::NetworkAllowList)) return;
  probe.reset();
  if (t.route_canary) return network_allow_list_by_name(t);
  HttpCanary canary;
  const std::string port = std::to_string(canary.port());
  CreateOptions o;
  o.network = NetworkPolicy::allowing({std::string(kCanaryName) + ":" + port});
  o.network.pinned = {{kCanaryName, "127.0.0.1"}};
  auto sb = make(t, o);
  // An allowed host is reachable, by its name, through the proxy the environment names.
  auto r = sb->run(t.fetch_probe("http://" + std::string(kCanaryName) + ":" + port + "/allowed"));
  require(r.ok() && r.stdout_bytes == canary.body(),
          "the allowed canary was not reached: exit " + std::to_string(r.exit_code.value_or(-1)) +
              ", " + show(r.stdout_bytes) + " " + show(r.stderr_bytes));
  require(canary.requests() == 1,
          "the canary saw " + std::to_string(canary.requests()) + " requests for one fetch");
  // An unlisted name, on the same port (pinned nowhere: it would resolve to nothing anyway).
  r = sb->run(t.fetch_probe("http://unlisted.sandboxio.test:" + port + "/denied"));
  require(!r.ok(), "a host outside the allow list was fetched: " + show(r.stdout_bytes));
  // The allowed name on another port is another entry.
  r = sb->run(t.fetch_probe("http://" + std::string(kCanaryName) + ":1/denied"));
  require(!r.ok(), "the allowed name on an unlisted port was fetched");
  require(canary.requests() == 1, "a refused request reached the canary");
  // TLS end to end through CONNECT: the proxy relays the session, the client checks the name.
  if (t.tls_fetch_probe) {
    TlsCanary tls(kCanaryName);
    CreateOptions to;
    to.network =
        NetworkPolicy::allowing({std::string(kCanaryName) + ":" + std::to_string(tls.port())});
    to.network.pinned = {{kCanaryName, "127.0.0.1"}};
    auto tsb = make(t, to);
    tsb->write_file("/tmp/canary-ca.pem", tls.ca_pem());
    r = tsb->run(t.tls_fetch_probe(
        "https://" + std::string(kCanaryName) + ":" + std::to_string(tls.port()) + "/tls",
        "/tmp/canary-ca.pem"));
    require(r.ok() && r.stdout_bytes == tls.body(),
            "the TLS canary was not reached through CONNECT: exit " +
                std::to_string(r.exit_code.value_or(-1)) + ", " + show(r.stdout_bytes) + " " +
                show(r.stderr_bytes));
    require(tls.sessions() == 1,
            "the TLS canary saw " + std::to_string(tls.sessions()) + " sessions for one fetch");
    // The allow list holds the TLS port only: the plain canary's is refused here.
    r = tsb->run(t.fetch_probe("http://" + std::string(kCanaryName) + ":" + port + "/denied"));
    require(!r.ok(), "a port outside the TLS sandbox's list was fetched");
  }
  // No route but the proxy: a raw connection to an address fails.
  if (!t.egress_probe.empty()) {
    r = sb->run(t.egress_probe);
    require(!r.ok(), "a raw connection left a sandbox whose allow list names only a host");
  }
  // The sandbox resolves no name itself: DNS cannot carry data out.
  if (t.resolve_probe) {
    r = sb->run(t.resolve_probe(kCanaryName));
    require(!r.ok(), "a name resolved inside the sandbox: " + show(r.stdout_bytes));
  }
}

// ---- files ----

bool files(Box& sb) {
  return sb.capabilities().contains(Capability::Filesystem);
}

void files_binary_round_trip(const Target& t) {
  auto sb = make(t);
  if (!files(*sb)) return;
  std::string all(256, '\0');
  for (int i = 0; i < 256; ++i)
    all[static_cast<std::size_t>(i)] = static_cast<char>(i);
  sb->write_file("/tmp/bytes.bin", all);
  require(sb->read_file("/tmp/bytes.bin") == all, "256 byte values did not survive a round trip");
  sb->write_file("/tmp/empty", "");
  require(sb->read_file("/tmp/empty").empty(), "an empty file came back non-empty");
}

void files_multi_megabyte(const Target& t) {
  auto sb = make(t);
  if (!files(*sb)) return;
  std::string big(5 * 1024 * 1024 + 7, '\0');
  std::uint32_t x = 2463534242u;
  for (char& c : big) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  sb->write_file("/tmp/big.bin", big);
  require(sb->read_file("/tmp/big.bin") == big, "a 5 MiB file changed on the way");
}

void files_nested_list_remove(const Target& t) {
  auto sb = make(t);
  if (!files(*sb)) return;
  sb->write_file("/tmp/tree/a/b/c.txt", "deep");
  sb->write_file("/tmp/tree/top.txt", "top");
  auto listed = sb->list_files("/tmp/tree");
  std::sort(listed.begin(), listed.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.name < b.name; });
  require(listed.size() == 2 && listed[0].name == "a" && listed[0].type == FileType::Directory &&
              listed[1].name == "top.txt" && listed[1].size == 3,
          "list_files does not show the tree as written");
  require(sb->read_file("/tmp/tree/a/b/c.txt") == "deep", "a nested file changed");
  sb->remove_file("/tmp/tree");
  expect_code(
      errc::FileNotFound, [&] { (void)sb->list_files("/tmp/tree"); }, "list after remove");
}

void files_missing_path_codes(const Target& t) {
  auto sb = make(t);
  if (!files(*sb)) return;
  expect_code(
      errc::FileNotFound, [&] { (void)sb->read_file("/tmp/sbx-missing-file"); },
      "read of a missing file");
  expect_code(
      errc::FileNotFound, [&] { sb->remove_file("/tmp/sbx-missing-file"); },
      "remove of a missing file");
  expect_code(
      errc::InvalidPath, [&] { sb->write_file("relative.txt", "x"); }, "a relative path");
  sb->write_file("/tmp/dir-marker/f", "x");
  expect_code(
      errc::IsADirectory, [&] { (void)sb->read_file("/tmp/dir-marker"); }, "reading a directory");
}

// ---- audit ----

void audit_one_record_per_operation(const Target& t) {
  auto sink = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = sink;
  o.audit.capture_commands = true;
  o.env.set_secret("SBX_CONTRACT_SECRET", "s3cr3t-value-42");
  {
    auto sb = make(t, o);
    (void)sb->run({"echo", "s3cr3t-value-42"});
    (void)sb->run({"sh", "-c", "exit 5"});
    try {
      (void)sb->run_code("print('Authorization: Bearer tok-123456')");
    } catch (const Error&) {
    }
  }
  const auto records = sink->drain();
  require(records.size() == 5, "expected 5 records (create, run, run, run_code, kill), got " +
                                   std::to_string(records.size()));
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string line = to_json_line(records[i]);
    require(records[i].sequence == i + 1, "records are not numbered in order");
    require(line.find("s3cr3t-value-42") == std::string::npos,
            "a secret reached a record: " + line);
    require(line.find("tok-123456") == std::string::npos,
            "a bearer token reached a record: " + line);
  }
  require(records[2].exit_code == 5, "the record of a failing command lacks its exit code");
}

// The meter: results and records count the bytes that went in and came out, and name the
// backend, whatever the path (kept output, streamed output, stdin, files).
void audit_meter_counts_bytes(const Target& t) {
  auto sink = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = sink;
  auto sb = make(t, o);
  const auto caps = sb->capabilities();
  Command c;
  c.argv = {"head", "-c", "1000", "/dev/zero"};
  if (caps.contains(Capability::Stdin)) {
    c.argv = {"cat"};
    c.stdin_data = std::string(1000, 'x');
  }
  const auto r = sb->run(c);
  require(r.bytes_out == 1000 && r.bytes_in == c.stdin_data.size(),
          "run() metered " + std::to_string(r.bytes_in) + " in, " + std::to_string(r.bytes_out) +
              " out");
  require(r.backend == sb->info().backend, "run() named the backend '" + r.backend + "'");
  std::uint64_t streamed = 0;
  if (caps.contains(Capability::Streaming)) {
    auto p = sb->stream({"sh", "-c", "echo 12345; echo 678 >&2"});
    while (p->next()) {
    }
    const auto sr = p->wait();
    streamed = sr.bytes_out;
    require(sr.bytes_out == 10, "a stream metered " + std::to_string(sr.bytes_out) + " bytes out");
  }
  if (caps.contains(Capability::Filesystem)) {
    sb->write_file("/tmp/sbx-meter", std::string(3000, 'm'));
    (void)sb->read_file("/tmp/sbx-meter");
  }
  sb->kill();
  const auto records = sink->drain();
  auto find = [&](Operation op) -> const OperationRecord* {
    for (const auto& rec : records)
      if (rec.operation == op) return &rec;
    return nullptr;
  };
  const auto* run = find(Operation::Run);
  require(run && run->bytes_in == c.stdin_data.size() && run->bytes_out == 1000,
          "the run's record lacks its byte counts");
  require(to_json_line(*run).find("\"bytes_out\":1000") != std::string::npos,
          "the record's JSON lacks bytes_out: " + to_json_line(*run));
  if (streamed) {
    const auto* stream = find(Operation::Stream);
    require(stream && stream->bytes_out == 10, "the stream's record lacks its byte count");
  }
  if (caps.contains(Capability::Filesystem)) {
    const auto* write = find(Operation::WriteFile);
    const auto* read = find(Operation::ReadFile);
    require(write && write->bytes_in == 3000, "write_file's record does not count 3000 bytes in");
    require(read && read->bytes_out == 3000, "read_file's record does not count 3000 bytes out");
  }
}

void audit_error_code_filled(const Target& t) {
  auto sink = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = sink;
  auto sb = make(t, o);
  sb->kill();
  try {
    (void)sb->run({"true"});
  } catch (const Error&) {
  }
  const auto records = sink->drain();
  require(!records.empty() && records.back().outcome == Outcome::Failed &&
              records.back().error_code == static_cast<int>(errc::SandboxGone),
          "a failed operation's record lacks its error code");
}

// ---- isolation ----

void isolation_require_refuses_weaker(const Target& t) {
  auto probe = make(t);
  const IsolationTier tier = probe->tier();
  if (tier.value() == IsolationTier::Microvm) return;  // nothing stronger to ask for
  CreateOptions o;
  o.require_isolation = tier.value() == IsolationTier::Unknown     ? IsolationTier::Container
                        : tier.value() == IsolationTier::Container ? IsolationTier::Gvisor
                                                                   : IsolationTier::Microvm;
  expect_code(
      errc::IsolationNotSatisfied, [&] { (void)make(t, o); }, "a stronger tier than the backend's");
  if (tier.value() != IsolationTier::Unknown) {
    CreateOptions same;
    same.require_isolation = tier;
    (void)make(t, same);
  }
}

void isolation_unknown_tier_warns(const Target& t) {
  auto sb = make(t);
  const bool unknown = sb->tier().value() == IsolationTier::Unknown;
  const std::vector<Problem> warnings = sb->warnings();
  const bool warned = std::any_of(warnings.begin(), warnings.end(), [](const Problem& p) {
    return p.code == errc::IsolationNotSatisfied;
  });
  require(unknown == warned,
          unknown ? "creating on the UNKNOWN tier did not warn" : "a known tier warned");
}

constexpr Case kCases[] = {
    {"lifecycle.create_info_kill", lifecycle_create_info_kill},
    {"lifecycle.reattach_by_id", lifecycle_reattach_by_id},
    {"lifecycle.lifetime_expiry_gives_gone", lifecycle_lifetime_expiry_gives_gone},
    {"lifecycle.dropped_handle_ends_sandbox", lifecycle_dropped_handle_ends_sandbox},
    {"run.exit_codes", run_exit_codes},
    {"run.streams_apart", run_streams_apart},
    {"run.missing_binary_says_why", run_missing_binary_says_why},
    {"run.binary_output", run_binary_output},
    {"run.ten_megabytes", run_ten_megabytes},
    {"run.env_and_workdir", run_env_and_workdir},
    {"run.stdin", run_stdin},
    {"run_code.stateless", run_code_stateless},
    {"run_code.stateful_contexts", run_code_stateful_contexts},
    {"run_code.rich_output", run_code_rich_output},
    {"run_code.rich_mime_types", run_code_rich_mime_types},
    {"run_code.exception_details", run_code_exception_details},
    {"stream.order_within_streams", stream_order_within_streams},
    {"stream.read_to_end_cleans_up", stream_read_to_end_cleans_up},
    {"stream.drop_mid_stream_kills", stream_drop_mid_stream_kills},
    {"stream.consumer_exception_kills", stream_consumer_exception_kills},
    {"stream.cancellation_kills", stream_cancellation_kills},
    {"cancel.during_create", cancel_during_create},
    {"cancel.during_run", cancel_during_run},
    {"cancel.teardown_grace_expiry", cancel_teardown_grace_expiry},
    {"timeout.kills_process_tree", timeout_kills_process_tree},
    {"timeout.create", timeout_create},
    {"capability.allow_list", capability_allow_list},
    {"capability.resources", capability_resources},
    {"capability.files_undeclared", capability_files_undeclared},
    {"network.deny_by_default", network_deny_by_default},
    {"network.allow_list", network_allow_list},
    {"files.binary_round_trip", files_binary_round_trip},
    {"files.multi_megabyte", files_multi_megabyte},
    {"files.nested_list_remove", files_nested_list_remove},
    {"files.missing_path_codes", files_missing_path_codes},
    {"audit.one_record_per_operation", audit_one_record_per_operation},
    {"audit.error_code_filled", audit_error_code_filled},
    {"audit.meter_counts_bytes", audit_meter_counts_bytes},
    {"isolation.require_refuses_weaker", isolation_require_refuses_weaker},
    {"isolation.unknown_tier_warns", isolation_unknown_tier_warns},
};

}  // namespace

std::span<const Case> cases() {
  return kCases;
}

std::optional<Failure> run_case(const Case& c, const Target& target) {
  try {
    c.run(target);
  } catch (const CaseFailure& f) {
    return Failure{std::string(c.row), f.what()};
  } catch (const std::exception& e) {
    return Failure{std::string(c.row), std::string("unexpected exception: ") + e.what()};
  }
  return std::nullopt;
}

std::vector<Failure> run_all(const Target& target) {
  std::vector<Failure> out;
  for (const Case& c : cases()) {
    if (auto f = run_case(c, target)) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace sandboxio::contract
