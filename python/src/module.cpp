// sandboxio._native: the engine as Python sees it. Two faces of the same machines:
//  - SyncSandbox / SyncProcess: the sync API (the blocking transport), with the GIL released
//    while it waits;
//  - Engine: one machine with no transport at all, for sandboxio's asyncio transport
//    (sandboxio/_aio.py), which feeds it bytes and time from Python's event loop.
// Values cross as plain tuples, dicts and bytes; sandboxio/_types.py turns them into the
// frozen value objects users see. Errors cross as sandboxio.errors exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/backend/identity.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/flight_recorder.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/peer.hpp"
#include "sandboxio/record_router.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/spawn.hpp"
#include "sandboxio/sync.hpp"

namespace py = pybind11;
using namespace std::chrono_literals;

namespace sandboxio::python {
namespace {

// ---- Python -> C++ ----

template <class T>
std::optional<T> opt(const py::dict& d, const char* key) {
  if (!d.contains(key)) return std::nullopt;
  py::object v = d[key];
  if (v.is_none()) return std::nullopt;
  return v.cast<T>();
}

Env to_env(const py::dict& d) {
  Env env;
  if (auto plain = opt<std::map<std::string, std::string>>(d, "env"))
    for (auto& [k, v] : *plain)
      env.set(k, v);
  if (auto secrets = opt<std::map<std::string, std::string>>(d, "secrets"))
    for (auto& [k, v] : *secrets)
      env.set_secret(k, v);
  return env;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// The keys sandboxio/_options.py produces; it has checked their types and names already.
CreateOptions to_options(const py::dict& d) {
  CreateOptions o;
  if (auto v = opt<double>(d, "lifetime"))
    o.lifetime = std::chrono::seconds(static_cast<std::int64_t>(*v));
  if (auto v = opt<double>(d, "create_timeout")) o.create_timeout = ms(*v);
  o.env = to_env(d);
  if (auto v = opt<std::string>(d, "workdir")) o.workdir = *v;
  if (auto v = opt<std::map<std::string, std::string>>(d, "labels")) o.labels = *v;
  if (auto v = opt<std::vector<std::string>>(d, "allow")) o.network.allow = *v;
  if (auto v = opt<bool>(d, "learn")) o.network.learn = *v;
  if (auto v = opt<std::map<std::string, std::string>>(d, "pinned")) o.network.pinned = *v;
  if (auto v = opt<double>(d, "cpus")) o.resources.cpus = *v;
  if (auto v = opt<std::uint64_t>(d, "memory_bytes")) o.resources.memory_bytes = *v;
  if (auto v = opt<std::uint32_t>(d, "pids")) o.resources.pids = *v;
  if (auto v = opt<std::uint64_t>(d, "disk_bytes")) o.resources.disk_bytes = *v;
  if (auto v = opt<std::string>(d, "require_isolation")) {
    auto tier = IsolationTier::parse(*v);
    if (!tier)
      throw Error(errc::InvalidCreateOptions, "unknown isolation tier '" + *v + "'",
                  "use one of: container, gvisor, microvm");
    o.require_isolation = *tier;
  }
  if (auto v = opt<bool>(d, "outlive_owner")) o.outlive_owner = *v;
  if (auto v = opt<double>(d, "teardown_grace")) o.teardown_grace = ms(*v);
  if (auto v = opt<std::string>(d, "traceparent"))
    o.trace = TraceContext::from_traceparent(*v).value();
  if (auto v = opt<std::string>(d, "audit_log"))
    o.audit.sink = std::make_shared<JsonLinesFileSink>(*v);
  if (auto v = opt<bool>(d, "capture_commands")) o.audit.capture_commands = *v;
  if (auto v = opt<std::string>(d, "record")) o.record = *v;
  return o;
}

Command to_command(const py::dict& d) {
  Command c;
  c.argv = d["argv"].cast<std::vector<std::string>>();
  c.env = to_env(d);
  if (auto v = opt<std::string>(d, "workdir")) c.workdir = *v;
  if (auto v = opt<double>(d, "timeout")) c.timeout = ms(*v);
  if (auto v = opt<std::string>(d, "stdin")) c.stdin_data = *v;
  if (auto v = opt<std::size_t>(d, "output_limit")) c.output_limit = *v;
  return c;
}

CodeRequest to_code(const py::dict& d) {
  CodeRequest r;
  r.code = d["code"].cast<std::string>();
  if (auto v = opt<std::string>(d, "language")) r.language = *v;
  if (auto v = opt<std::string>(d, "context")) r.context = *v;
  if (auto v = opt<double>(d, "timeout")) r.timeout = ms(*v);
  r.env = to_env(d);
  return r;
}

// ---- C++ -> Python ----

py::tuple from_result(const ExecResult& r) {
  py::list rich;
  for (const auto& x : r.results)
    rich.append(py::make_tuple(x.mime_type, py::bytes(x.data)));
  py::object error = py::none();
  if (r.error) error = py::make_tuple(r.error->name, r.error->value, r.error->traceback);
  py::object code = r.exit_code ? py::object(py::int_(*r.exit_code)) : py::none();
  py::object sig = r.signal ? py::object(py::int_(*r.signal)) : py::none();
  return py::make_tuple(code, py::bytes(r.stdout_bytes), py::bytes(r.stderr_bytes),
                        r.duration.count(), std::string(to_string(r.termination)), sig, r.streamed,
                        rich, error, r.context_restarted, r.bytes_in, r.bytes_out, r.backend);
}

py::tuple from_chunk(const OutputChunk& c) {
  return py::make_tuple(std::string(to_string(c.stream)), py::bytes(c.data), c.offset);
}

std::vector<std::string> capability_names(const CapabilitySet& caps) {
  std::vector<std::string> names;
  for (Capability c : kAllCapabilities)
    if (caps.contains(c)) names.emplace_back(to_string(c));
  return names;
}

py::dict from_info(const SandboxInfo& i) {
  py::dict d;
  d["backend"] = i.backend;
  d["id"] = i.id;
  d["tier"] = std::string(i.tier.name());
  d["capabilities"] = capability_names(i.capabilities);
  d["allow"] = i.network.allow;
  d["learn"] = i.network.learn;
  d["state"] = std::string(to_string(i.state));
  d["lifetime"] = i.lifetime.count();
  d["agent"] = i.agent;
  return d;
}

py::tuple from_file(const FileInfo& f) {
  py::object mtime = f.mtime_unix ? py::object(py::int_(*f.mtime_unix)) : py::none();
  return py::make_tuple(f.path, f.name, std::string(to_string(f.type)), f.size, f.mode, mtime,
                        f.link_target);
}

py::list from_files(const std::vector<FileInfo>& files) {
  py::list out;
  for (const auto& f : files)
    out.append(from_file(f));
  return out;
}

py::list from_managed(const std::vector<ManagedSandbox>& all) {
  py::list out;
  for (const auto& m : all)
    out.append(py::make_tuple(m.id, std::string(to_string(m.state)), m.labels));
  return out;
}

// A completion as (kind, value).
py::tuple from_completion(const Completion& c) {
  return std::visit(
      [](const auto& v) -> py::tuple {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::monostate>) {
          return py::make_tuple("none", py::none());
        } else if constexpr (std::is_same_v<V, SandboxInfo>) {
          return py::make_tuple("info", from_info(v));
        } else if constexpr (std::is_same_v<V, ExecResult>) {
          return py::make_tuple("result", from_result(v));
        } else if constexpr (std::is_same_v<V, Bytes>) {
          return py::make_tuple("bytes", py::bytes(v));
        } else if constexpr (std::is_same_v<V, std::vector<FileInfo>>) {
          return py::make_tuple("files", from_files(v));
        } else if constexpr (std::is_same_v<V, CodeContext>) {
          return py::make_tuple("context", py::make_tuple(v.id, v.language));
        } else {
          return py::make_tuple("managed", from_managed(v));
        }
      },
      c);
}

py::tuple from_problem(const Problem& p) {
  return py::make_tuple(static_cast<int>(p.code), p.detail, std::string(p.effective_hint()));
}

// sandboxio::Error as the sandboxio.errors exception of its code.
void raise_python(int code, const std::string& detail, const std::string& hint) {
  py::object errors = py::module_::import("sandboxio.errors");
  py::object exc = errors.attr("from_code")(code, detail, hint);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

// ---- the sync API ----

// Owns a sync::Sandbox; close() (and the destructor) end it with the GIL released. Each call
// holds its own reference for as long as it runs, so a close() from another Python thread
// never pulls the sandbox from under a call in flight: the last of them ends it.
class SyncSandbox {
 public:
  explicit SyncSandbox(sync::Sandbox sb) : sb_(std::make_shared<sync::Sandbox>(std::move(sb))) {}
  SyncSandbox(const SyncSandbox&) = delete;
  SyncSandbox& operator=(const SyncSandbox&) = delete;
  ~SyncSandbox() { close(); }
  std::shared_ptr<sync::Sandbox> share() const {
    if (!sb_)
      throw Error(errc::SandboxGone, "this sandbox was closed",
                  "create a new sandbox; close() and the with-block's end kill it");
    return sb_;
  }
  sync::Sandbox& get() { return *share(); }  // facts only: nothing that waits
  void close() {
    std::shared_ptr<sync::Sandbox> ending = std::move(sb_);
    sb_.reset();
    if (!ending) return;
    py::gil_scoped_release released;
    ending.reset();  // kills it, unless detached, outliving its owner, or still in a call
  }
  bool closed() const { return !sb_; }

 private:
  std::shared_ptr<sync::Sandbox> sb_;
};

class SyncProcess {
 public:
  explicit SyncProcess(sync::Process p) : p_(std::move(p)) {}
  SyncProcess(const SyncProcess&) = delete;
  SyncProcess& operator=(const SyncProcess&) = delete;
  ~SyncProcess() {
    py::gil_scoped_release released;
    p_.reset();  // an unfinished process is killed
  }
  py::object next() {
    std::optional<OutputChunk> c;
    {
      py::gil_scoped_release released;
      c = p_->next();
    }
    if (!c) return py::none();
    return from_chunk(*c);
  }
  py::tuple wait() {
    ExecResult r;
    {
      py::gil_scoped_release released;
      r = p_->wait();
    }
    return from_result(r);
  }
  void kill() {
    py::gil_scoped_release released;
    p_->kill();
  }

 private:
  std::optional<sync::Process> p_;
};

// Runs `f` on the sandbox with the GIL released; returns what it returns.
template <class F>
auto unlocked(SyncSandbox& s, F&& f) {
  std::shared_ptr<sync::Sandbox> sb = s.share();
  py::gil_scoped_release released;
  auto result = f(*sb);
  sb.reset();  // the last reference after a close() from another thread: ends it here
  return result;
}

// ---- the machine for the asyncio transport ----

Instant at(std::int64_t ns) {
  return Instant(std::chrono::nanoseconds(ns));
}

py::tuple from_endpoint(const Endpoint& e) {
  const char* kind = e.kind == Endpoint::Kind::Unix  ? "unix"
                     : e.kind == Endpoint::Kind::Tcp ? "tcp"
                                                     : "process";
  return py::make_tuple(kind, e.address, e.port, e.tls,
                        e.server_name.empty() ? e.address : e.server_name, e.ca_file, e.cert_file,
                        e.key_file, e.peer_pid, e.argv, e.alpn);
}

// One machine, the records' sinks and the process's trace exporter; no I/O and no clock of
// its own: every call takes the transport's `now` (loop.time() in nanoseconds).
class Engine {
 public:
  Engine(std::string_view text, const py::dict& options, std::int64_t now_ns) {
    options_ = to_options(options);
    if (!options_.teardown_grace) options_.teardown_grace = teardown_grace().value();
    Dsn dsn = parse_dsn(text).value();
    machine_ = make_machine(dsn, options_).value();
    records_.emplace(options_, [this](const Problem& p) { pending_warnings_.push_back(p); });
    wall_anchor_ = WallAnchor{at(now_ns), std::chrono::system_clock::now()};
    machine_->handle_wall_clock(at(now_ns), wall_anchor_.wall);
  }

  Machine& m() { return *machine_; }
  const CreateOptions& options() const { return options_; }
  std::string scheme() const { return std::string(machine_->scheme()); }
  std::string tier() const { return std::string(machine_->tier().name()); }
  std::vector<std::string> capabilities() const {
    return capability_names(machine_->capabilities());
  }
  std::optional<std::int64_t> deadline() const {
    auto d = machine_->poll_deadline();
    if (!d) return std::nullopt;
    return d->time_since_epoch().count();
  }
  bool busy() const { return machine_->busy(); }
  py::list take_warnings() {
    py::list out;
    for (const auto& p : pending_warnings_)
      out.append(from_problem(p));
    pending_warnings_.clear();
    return out;
  }

  // Drains the machine: its requests (owner probes answered here) and its events (records
  // and warnings delivered here). Returns (requests, events) for the transport.
  py::tuple poll(std::int64_t now_ns) {
    py::list requests;
    py::list events;
    bool progressed = true;
    while (progressed) {
      progressed = false;
      while (auto req = machine_->poll_request()) {
        progressed = true;
        std::visit(
            [&](auto&& r) {
              using R = std::decay_t<decltype(r)>;
              if constexpr (std::is_same_v<R, request::Open>) {
                requests.append(
                    py::make_tuple("open", r.conn, from_endpoint(r.endpoint), r.may_reuse));
              } else if constexpr (std::is_same_v<R, request::Send>) {
                requests.append(py::make_tuple("send", r.conn, py::bytes(r.data)));
              } else if constexpr (std::is_same_v<R, request::HalfClose>) {
                requests.append(py::make_tuple("half_close", r.conn));
              } else if constexpr (std::is_same_v<R, request::Close>) {
                requests.append(py::make_tuple("close", r.conn, r.reusable_for.count()));
              } else if constexpr (std::is_same_v<R, request::ProbeOwners>) {
                machine_->handle_owners_gone(backend::owners_gone(r.owners), at(now_ns));
              } else {
                // request::Pass: never asked, the asyncio transport says no pass_sockets.
                requests.append(py::make_tuple("close", r.conn, 0));
              }
            },
            std::move(*req));
      }
      // Records first: an operation's record reaches the sinks before its result is given
      // out, so that AuditFailurePolicy::Fail fails the operation whose record was refused.
      std::vector<Event> batch;
      while (auto ev = machine_->poll_event()) {
        progressed = true;
        if (auto* r = std::get_if<event::Record>(&*ev)) {
          records_->record(
              std::move(r->record),
              wall_anchor_.wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      r->started - wall_anchor_.at));
        } else {
          batch.push_back(std::move(*ev));
        }
      }
      for (auto& ev : batch) {
        std::visit(
            [&](auto&& e) {
              using E = std::decay_t<decltype(e)>;
              if constexpr (std::is_same_v<E, event::Output>) {
                events.append(py::make_tuple("output", e.op, from_chunk(e.chunk)));
              } else if constexpr (std::is_same_v<E, event::Done>) {
                if (auto failure = records_->take_failure()) {  // AuditFailurePolicy::Fail
                  events.append(py::make_tuple("failed", e.op, from_problem(*failure)));
                } else {
                  events.append(py::make_tuple("done", e.op, from_completion(e.value)));
                }
              } else if constexpr (std::is_same_v<E, event::Failed>) {
                events.append(py::make_tuple("failed", e.op, from_problem(e.problem)));
              } else if constexpr (std::is_same_v<E, event::Cancelled>) {
                events.append(py::make_tuple("cancelled", e.op, e.possible_orphan));
              } else if constexpr (std::is_same_v<E, event::Warning>) {
                records_->warn(e.problem);
              }
            },
            std::move(ev));
      }
    }
    return py::make_tuple(requests, events);
  }

 private:
  struct WallAnchor {
    Instant at{};
    std::chrono::system_clock::time_point wall{};
  };

  CreateOptions options_;
  std::unique_ptr<Machine> machine_;
  std::vector<Problem> pending_warnings_;
  std::optional<RecordRouter> records_;  // made once options_ is complete
  WallAnchor wall_anchor_;
};

// A process endpoint's child: its socket for the transport, killed and reaped by end().
class Child {
 public:
  explicit Child(SpawnedProcess p) : fd_(p.fd), process_(std::move(p.process)) {}
  int fd() const { return fd_; }
  int pid() const { return process_.pid(); }
  void end() {
    py::gil_scoped_release released;  // up to 2 s for a launcher's descendants
    process_.end();
  }

 private:
  int fd_;
  ChildProcess process_;
};

Endpoint to_endpoint_for_peer(std::int64_t pid) {
  Endpoint e;
  e.kind = Endpoint::Kind::Unix;
  e.peer_pid = pid;
  return e;
}

}  // namespace
}  // namespace sandboxio::python

PYBIND11_MODULE(_native, mod) {
  using namespace sandboxio;
  using namespace sandboxio::python;
  mod.doc() = "sandboxio's engine (use the sandboxio package, not this module)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_python(static_cast<int>(e.sbx_code()), e.detail(), e.hint());
    }
  });

  mod.def("catalog", [] {
    py::list out;
    for (const auto& e : error_catalog())
      out.append(py::make_tuple(e.code, std::string(e.id), std::string(e.name),
                                std::string(e.message), std::string(e.hint), std::string(e.url)));
    return out;
  });
  mod.attr("__version__") = SANDBOXIO_VERSION;

  py::class_<SyncProcess>(mod, "SyncProcess")
      .def("next", &SyncProcess::next)
      .def("wait", &SyncProcess::wait)
      .def("kill", &SyncProcess::kill);

  py::class_<SyncSandbox>(mod, "SyncSandbox")
      .def_static("create",
                  [](const std::string& dsn, const py::dict& options) {
                    CreateOptions o = to_options(options);
                    std::optional<sync::Sandbox> sb;
                    {
                      py::gil_scoped_release released;
                      sb.emplace(sync::Sandbox::create(dsn, std::move(o)));
                    }
                    return std::make_unique<SyncSandbox>(std::move(*sb));
                  })
      .def_static("connect",
                  [](const std::string& dsn, const std::string& id, const py::dict& options) {
                    CreateOptions o = to_options(options);
                    std::optional<sync::Sandbox> sb;
                    {
                      py::gil_scoped_release released;
                      sb.emplace(sync::Sandbox::connect(dsn, id, std::move(o)));
                    }
                    return std::make_unique<SyncSandbox>(std::move(*sb));
                  })
      .def_property_readonly("id", [](SyncSandbox& s) { return s.get().id(); })
      .def_property_readonly("backend",
                             [](SyncSandbox& s) { return std::string(s.get().backend()); })
      .def_property_readonly("tier",
                             [](SyncSandbox& s) { return std::string(s.get().tier().name()); })
      .def_property_readonly(
          "capabilities", [](SyncSandbox& s) { return capability_names(s.get().capabilities()); })
      .def_property_readonly("closed", &SyncSandbox::closed)
      .def("warnings",
           [](SyncSandbox& s) {
             py::list out;
             for (const auto& p : s.get().warnings())
               out.append(from_problem(p));
             return out;
           })
      .def(
          "info",
          [](SyncSandbox& s) { return from_info(unlocked(s, [](auto& sb) { return sb.info(); })); })
      .def("run",
           [](SyncSandbox& s, const py::dict& cmd) {
             Command c = to_command(cmd);
             return from_result(
                 unlocked(s, [&](sync::Sandbox& sb) { return sb.run(std::move(c)); }));
           })
      .def("stream",
           [](SyncSandbox& s, const py::dict& cmd) {
             Command c = to_command(cmd);
             return std::make_unique<SyncProcess>(
                 unlocked(s, [&](sync::Sandbox& sb) { return sb.stream(std::move(c)); }));
           })
      .def("run_code",
           [](SyncSandbox& s, const py::dict& req) {
             CodeRequest r = to_code(req);
             return from_result(
                 unlocked(s, [&](sync::Sandbox& sb) { return sb.run_code(std::move(r)); }));
           })
      .def("create_context",
           [](SyncSandbox& s, const std::string& language) {
             auto c = unlocked(s, [&](sync::Sandbox& sb) { return sb.create_context(language); });
             return py::make_tuple(c.id, c.language);
           })
      .def("write_file",
           [](SyncSandbox& s, std::string path, std::string data) {
             unlocked(s, [&](sync::Sandbox& sb) {
               sb.write_file(std::move(path), std::move(data));
               return 0;
             });
           })
      .def("read_file",
           [](SyncSandbox& s, std::string path) {
             return py::bytes(
                 unlocked(s, [&](sync::Sandbox& sb) { return sb.read_file(std::move(path)); }));
           })
      .def("list_files",
           [](SyncSandbox& s, std::string path) {
             return from_files(
                 unlocked(s, [&](sync::Sandbox& sb) { return sb.list_files(std::move(path)); }));
           })
      .def("remove_file",
           [](SyncSandbox& s, std::string path) {
             unlocked(s, [&](sync::Sandbox& sb) {
               sb.remove_file(std::move(path));
               return 0;
             });
           })
      .def("kill",
           [](SyncSandbox& s) {
             unlocked(s, [](sync::Sandbox& sb) {
               sb.kill();
               return 0;
             });
           })
      .def("detach", [](SyncSandbox& s) { s.get().detach(); })
      .def("close", &SyncSandbox::close);

  py::class_<Engine>(mod, "Engine")
      .def(py::init<std::string_view, const py::dict&, std::int64_t>())
      .def_property_readonly("scheme", &Engine::scheme)
      .def_property_readonly("tier", &Engine::tier)
      .def_property_readonly("capabilities", &Engine::capabilities)
      .def_property_readonly("outlive_owner", [](Engine& e) { return e.options().outlive_owner; })
      .def_property_readonly(
          "teardown_grace_ns",
          [](Engine& e) {
            return std::chrono::nanoseconds(e.options().teardown_grace.value_or(2000ms)).count();
          })
      .def("poll", &Engine::poll)
      .def("deadline", &Engine::deadline)
      .def("busy", &Engine::busy)
      .def("take_warnings", &Engine::take_warnings)
      .def("handle_connected",
           [](Engine& e, ConnId c, std::int64_t now) { e.m().handle_connected(c, at(now)); })
      .def("handle_reused",
           [](Engine& e, ConnId c, std::int64_t now) { e.m().handle_reused(c, at(now)); })
      .def("handle_connect_failed",
           [](Engine& e, ConnId c, int code, std::string detail, std::int64_t now) {
             e.m().handle_connect_failed(c, Problem{static_cast<errc>(code), std::move(detail), {}},
                                         at(now));
           })
      .def("handle_bytes",
           [](Engine& e, ConnId c, const py::bytes& data, std::size_t offset, std::int64_t now) {
             char* p = nullptr;
             Py_ssize_t n = 0;
             PyBytes_AsStringAndSize(data.ptr(), &p, &n);
             if (offset > static_cast<std::size_t>(n)) offset = static_cast<std::size_t>(n);
             return e.m().handle_bytes(
                 c, std::string_view(p + offset, static_cast<std::size_t>(n) - offset), at(now));
           })
      .def("handle_eof",
           [](Engine& e, ConnId c, std::int64_t now) { e.m().handle_eof(c, at(now)); })
      .def("handle_timeout", [](Engine& e, std::int64_t now) { e.m().handle_timeout(at(now)); })
      .def("handle_consumed", [](Engine& e, OpId op, std::size_t n,
                                 std::int64_t now) { e.m().handle_consumed(op, n, at(now)); })
      .def("submit_create",
           [](Engine& e, std::int64_t now) { return e.m().submit_create(e.options(), at(now)); })
      .def("submit_connect",
           [](Engine& e, std::string id, std::int64_t now) {
             return e.m().submit_connect(std::move(id), e.options(), at(now));
           })
      .def("submit_info", [](Engine& e, std::int64_t now) { return e.m().submit_info(at(now)); })
      .def("submit_run",
           [](Engine& e, const py::dict& cmd, std::int64_t now) {
             return e.m().submit_run(to_command(cmd), at(now));
           })
      .def("submit_stream",
           [](Engine& e, const py::dict& cmd, std::int64_t now) {
             return e.m().submit_stream(to_command(cmd), at(now));
           })
      .def("submit_run_code",
           [](Engine& e, const py::dict& req, std::int64_t now) {
             return e.m().submit_run_code(to_code(req), at(now));
           })
      .def("submit_create_context",
           [](Engine& e, std::string language, std::int64_t now) {
             return e.m().submit_create_context(std::move(language), at(now));
           })
      .def("submit_write_file",
           [](Engine& e, std::string path, std::string data, std::int64_t now) {
             return e.m().submit_write_file(std::move(path), std::move(data), at(now));
           })
      .def("submit_read_file",
           [](Engine& e, std::string path, std::int64_t now) {
             return e.m().submit_read_file(std::move(path), at(now));
           })
      .def("submit_list_files",
           [](Engine& e, std::string path, std::int64_t now) {
             return e.m().submit_list_files(std::move(path), at(now));
           })
      .def("submit_remove_file",
           [](Engine& e, std::string path, std::int64_t now) {
             return e.m().submit_remove_file(std::move(path), at(now));
           })
      .def("submit_kill", [](Engine& e, std::int64_t now) { return e.m().submit_kill(at(now)); })
      .def("submit_release",
           [](Engine& e, std::int64_t now) { return e.m().submit_release(at(now)); })
      .def("submit_cancel",
           [](Engine& e, OpId op, std::int64_t now) { e.m().submit_cancel(op, at(now)); });

  py::class_<Child>(mod, "Child")
      .def_property_readonly("fd", &Child::fd)
      .def_property_readonly("pid", &Child::pid)
      .def("end", &Child::end);

  // fake://'s worlds, for the sbx_fake fixture (sandboxio/testing.py).
  py::class_<fake::World, std::shared_ptr<fake::World>>(mod, "FakeWorld")
      .def_static("create", [] { return fake::World::create(); })
      .def_property_readonly("dsn", &fake::World::dsn)
      .def("on",
           [](fake::World& w, std::vector<std::string> argv, std::string out, std::string err,
              int exit_code, double seconds) {
             w.on(std::move(argv), fake::Response{.stdout_bytes = std::move(out),
                                                  .stderr_bytes = std::move(err),
                                                  .exit_code = exit_code,
                                                  .duration = ms(seconds)});
           })
      .def("on_code",
           [](fake::World& w, std::string needle, std::string out, std::string err, int exit_code,
              double seconds) {
             w.on_code(std::move(needle), fake::Response{.stdout_bytes = std::move(out),
                                                         .stderr_bytes = std::move(err),
                                                         .exit_code = exit_code,
                                                         .duration = ms(seconds)});
           })
      .def("calls",
           [](fake::World& w) {
             py::list out;
             for (const auto& c : w.calls())
               out.append(py::make_tuple(std::string(to_string(c.operation)), c.sandbox_id, c.argv,
                                         c.code, c.path, c.env, c.workdir, c.network.allow,
                                         c.network.learn, c.network_attempts));
             return out;
           })
      .def("live_sandboxes", &fake::World::live_sandboxes)
      .def("running_processes", &fake::World::running_processes);

  // A process endpoint, started the way every transport starts it (sandboxio/spawn.hpp).
  mod.def("spawn", [](std::vector<std::string> argv) {
    Endpoint e;
    e.kind = Endpoint::Kind::Process;
    e.argv = std::move(argv);
    return std::make_unique<Child>(spawn_connected(e).value());
  });
  // Nothing, or the ConnectionFailed detail when `fd`'s peer is not process `pid`.
  mod.def("check_peer", [](int fd, std::int64_t pid) -> std::optional<std::string> {
    if (auto p = check_peer(fd, to_endpoint_for_peer(pid))) return p->detail;
    return std::nullopt;
  });
}
