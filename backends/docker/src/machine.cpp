// The docker:// machine: the Engine API (v1.41) as a sans-I/O state machine. Every HTTP
// exchange gets its own connection (the socket is local or a TLS link the transport owns);
// operations are chains of exchanges written as continuations. Facts it relies on are in
// docs/explanation/docker.md and ../shared/design/docker-engine-facts.md.
#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "sandboxio/base64.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/docker_stream.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/http.hpp"
#include "sandboxio/json.hpp"
#include "sandboxio/json_writer.hpp"
#include "sandboxio/redact.hpp"
#include "sandboxio/shell.hpp"
#include "sandboxio/tar.hpp"

namespace sandboxio::docker {
namespace {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

constexpr std::string_view kApi = "/v1.41";
constexpr std::size_t kControlBodyLimit = std::size_t{16} << 20;
constexpr std::size_t kInternalOutputLimit = std::size_t{1} << 20;
constexpr std::size_t kReadFileLimit = std::size_t{2} << 30;
// How long an exec stream may stay open after its process tree was killed (a process that
// escaped the kill by dropping its environment still holding the stream).
constexpr nanoseconds kKillBackstop = 3s;
constexpr nanoseconds kReinspectEvery = 20ms;
constexpr std::string_view kRuncError = "OCI runtime exec failed";

// Lists a directory on a tmpfs mount as records "TYPE/SIZE/NAME\0".
constexpr std::string_view kListScript =
    R"sh(cd -- "$1" || exit 2; for f in * .[!.]* ..?*; do )sh"
    R"sh([ -e "$f" ] || [ -L "$f" ] || continue; )sh"
    R"sh(if [ -L "$f" ]; then t=l; elif [ -d "$f" ]; then t=d; else t=f; fi; )sh"
    R"sh(printf '%s/%s/' "$t" "$(wc -c < "$f" 2>/dev/null || echo 0)"; )sh"
    R"sh(printf '%s\0' "$f"; done)sh";

struct Reply {
  int status = 0;
  std::vector<http::Header> headers{};
  Bytes body{};

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const {
    for (const auto& h : headers) {
      if (h.name.size() == name.size() &&
          std::equal(h.name.begin(), h.name.end(), name.begin(),
                     [](char a, char b) { return (a | 0x20) == (b | 0x20); }))
        return std::string_view(h.value);
    }
    return std::nullopt;
  }
  /// The daemon's error text: {"message": "..."} or the raw body.
  [[nodiscard]] std::string message() const {
    if (auto doc = json::parse(body); doc) {
      if (auto m = doc.value().string_at("message")) return std::string(*m);
    }
    std::string text = body.substr(0, 300);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
      text.pop_back();
    return text;
  }
};

struct ExecDone {
  std::optional<int> exit_code{};
  bool runc_error = false;
  Bytes out{}, err{};
};

class DockerMachine final : public Machine {
 public:
  explicit DockerMachine(Config config) : config_(std::move(config)) {}

  std::string_view scheme() const noexcept override { return "docker"; }
  CapabilitySet capabilities() const noexcept override { return declared_capabilities(); }
  IsolationTier tier() const noexcept override { return IsolationTier::Container; }

  // ---- inputs ----
  void handle_connected(ConnId id, Instant) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    for (Bytes& piece : it->second.wire)
      push_request(request::Send{id, std::move(piece)});
    it->second.wire.clear();
  }

  void handle_connect_failed(ConnId id, Problem problem, Instant now) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn conn = std::move(it->second);
    conns_.erase(it);
    if (problem.code == errc::ConnectionFailed || problem.code == errc::ProtocolError) {
      problem.code = errc::BackendUnavailable;
      problem.detail =
          "cannot reach the Docker engine at " + describe_endpoint() + ": " + problem.detail;
      problem.hint =
          "Start dockerd (or Docker Desktop), or point DOCKER_HOST at a running engine; "
          "`sandboxio doctor` checks it.";
    }
    if (conn.exec && conn.upgraded) return exec_stream_broke(conn.exec, std::move(problem), now);
    if (conn.exec) exec_stream_failed(conn.exec, std::move(problem), now);
    if (conn.then) conn.then(std::move(problem), now);
  }

  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return data.size();
    if (it->second.exec != 0 && it->second.upgraded) return exec_bytes(it->second, data, now);
    std::size_t used_total = 0;
    while (!data.empty()) {
      Conn& c = conns_.at(id);
      const std::size_t used = c.parser->feed(data);
      used_total += used;
      data.remove_prefix(used);
      if (c.parser->error()) {
        finish_conn(id, *c.parser->error(), now);
        return used_total + data.size();
      }
      Bytes piece = c.parser->take_body();
      if (!piece.empty() && !take_body_piece(id, std::move(piece), now))
        return used_total + data.size();
      if (!conns_.count(id)) return used_total + data.size();
      Conn& c2 = conns_.at(id);
      if (c2.parser->head_done() && !c2.head_seen) {
        c2.head_seen = true;
        if (c2.on_head && !c2.on_head(*c2.parser, now)) return used_total + data.size();
      }
      if (!conns_.count(id)) return used_total + data.size();
      Conn& c3 = conns_.at(id);
      if (c3.parser->upgraded()) {
        if (c3.exec != 0) {
          c3.upgraded = true;
          exec_upgraded(id, now);
          if (!conns_.count(id)) return used_total + data.size();
          return used_total + exec_bytes(conns_.at(id), data, now);
        }
        if (!c3.lease) {  // only exec starts and the lease ask for an upgrade
          finish_conn(id,
                      Problem{errc::RemoteProtocolViolation,
                              "the Docker engine upgraded a connection that did not ask for it",
                              {}},
                      now);
          return used_total + data.size();
        }
        // The lease: the attach stream is open; nothing it says matters.
        c3.upgraded = true;
        Then then = std::move(c3.then);
        c3.then = {};
        Reply r;
        r.status = c3.parser->status();
        if (then) then(std::move(r), now);
        return used_total + data.size();
      }
      if (c3.parser->complete()) {
        finish_conn(id, std::nullopt, now);
        return used_total + data.size();
      }
      if (used == 0) break;
    }
    return used_total;
  }

  void handle_eof(ConnId id, Instant now) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    if (c.exec != 0 && c.upgraded) {
      const std::uint64_t key = c.exec;
      conns_.erase(it);
      push_request(request::Close{id});
      exec_stream_ended(key, now);
      return;
    }
    if (c.lease && c.upgraded) {  // the container's main process ended (lifetime, kill)
      conns_.erase(it);
      push_request(request::Close{id});
      lease_ = 0;
      gone_ = true;
      return;
    }
    c.parser->feed_eof();
    Bytes piece = c.parser->take_body();
    if (!piece.empty() && !take_body_piece(id, std::move(piece), now)) return;
    if (!conns_.count(id)) return;
    Conn& c2 = conns_.at(id);
    if (c2.parser->complete()) {
      finish_conn(id, std::nullopt, now);
    } else {
      finish_conn(
          id,
          c2.parser->error().value_or(Problem{
              errc::ConnectionLost, "the Docker engine closed the connection mid-reply", {}}),
          now);
    }
  }

  void handle_timeout(Instant now) override {
    std::vector<OpId> due;
    for (const auto& [id, op] : ops_) {
      if (op.deadline && now >= *op.deadline) due.push_back(id);
    }
    for (OpId id : due) {
      auto it = ops_.find(id);
      if (it == ops_.end()) continue;
      Op& op = it->second;
      op.deadline.reset();
      if (op.kind == Op::Kind::Create) {
        fail(
            id,
            Problem{errc::CreateTimeout,
                    "creating the container took longer than " +
                        format_duration(std::chrono::duration_cast<nanoseconds>(op.create_timeout)),
                    {}},
            now);  // the continuation that comes back removes what was made
      } else if (op.kind == Op::Kind::Exec) {
        kill_tree(id, Termination::Timeout, now);
      }
    }
    std::vector<std::uint64_t> execs;
    for (const auto& [key, e] : execs_) {
      if ((e.reinspect_at && now >= *e.reinspect_at) || (e.backstop_at && now >= *e.backstop_at))
        execs.push_back(key);
    }
    for (auto key : execs) {
      auto it = execs_.find(key);
      if (it == execs_.end()) continue;
      Exec& e = it->second;
      if (e.reinspect_at && now >= *e.reinspect_at) {
        e.reinspect_at.reset();
        inspect_exec(key, now);
      } else if (e.backstop_at && now >= *e.backstop_at) {
        e.backstop_at.reset();
        // The stream outlived the kill: give up on it and report what is known.
        if (e.conn != 0) {
          conns_.erase(e.conn);
          push_request(request::Close{e.conn});
          e.conn = 0;
        }
        exec_stream_ended(key, now);
      }
    }
  }

  void handle_consumed(OpId id, std::size_t bytes, Instant) override {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    it->second.unconsumed -= std::min(bytes, it->second.unconsumed);
  }

  // ---- commands ----
  OpId submit_create(const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Create, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = check_create(options)) return fail(id, std::move(*p), now);
    options_ = options;
    redactor_.add_secrets(options.env.secret_values());
    Op& op = ops_.at(id);
    op.kind = Op::Kind::Create;
    op.create_timeout = options.create_timeout;
    op.deadline = now + std::chrono::duration_cast<nanoseconds>(options.create_timeout);
    create_container(id, /*pulled=*/false, now);
    sweep_unstarted();
    return id;
  }

  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Connect, now, {});
    if (!ops_.count(id)) return id;
    if (!container_.empty())
      return fail(id, Problem{errc::SandboxError, "this machine already holds a sandbox", {}}, now);
    if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos) {
      return fail(id, not_found(sandbox_id), now);
    }
    options_ = options;
    redactor_.add_secrets(options.env.secret_values());
    call(id, "GET", path("/containers/" + sandbox_id + "/json"), {},
         [this, id, sandbox_id](Result<Reply> r, Instant t) {
           if (!alive(id)) return;
           if (!r) return void(fail(id, r.problem(), t));
           if (r.value().status == 404) return void(fail(id, not_found(sandbox_id), t));
           if (r.value().status != 200) return void(fail(id, daemon_error(r.value()), t));
           auto doc = json::parse(r.value().body);
           if (!doc) return void(fail(id, doc.problem(), t));
           const json::Value* cfg = doc.value().find("Config");
           const json::Value* labels = cfg ? cfg->find("Labels") : nullptr;
           const auto managed = labels ? labels->string_at(labels::kManaged) : std::nullopt;
           if (managed != "true") {
             return void(fail(id,
                              Problem{errc::SandboxNotFound,
                                      "container " + sandbox_id + " is not managed by sandboxio",
                                      "connect() attaches only to sandboxes sandboxio created."},
                              t));
           }
           const json::Value* state = doc.value().find("State");
           if (!state || state->bool_at("Running") != true) {
             return void(fail(id, gone_problem(), t));
           }
           container_ = std::string(doc.value().string_at("Id").value_or(sandbox_id));
           if (auto life = labels->string_at(labels::kLifetime)) {
             lifetime_ = std::chrono::seconds(std::atoll(std::string(*life).c_str()));
           }
           if (cfg) {
             if (auto u = cfg->string_at("User")) user_ = std::string(*u);
           }
           ops_.at(id).record.sandbox_id = container_;
           complete(id, info_of(SandboxState::Running), t);
         });
    return id;
  }

  OpId submit_info(Instant now) override {
    const OpId id = open(Operation::Info, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    call(id, "GET", path("/containers/" + container_ + "/json"), {},
         [this, id](Result<Reply> r, Instant t) {
           if (!alive(id)) return;
           if (!r) return void(fail(id, r.problem(), t));
           if (r.value().status == 404) {
             gone_ = true;
             return void(fail(id, gone_problem(), t));
           }
           if (r.value().status != 200) return void(fail(id, daemon_error(r.value()), t));
           auto doc = json::parse(r.value().body);
           if (!doc) return void(fail(id, doc.problem(), t));
           const json::Value* state = doc.value().find("State");
           const std::string status(state ? state->string_at("Status").value_or("") : "");
           SandboxState s = status == "running"   ? SandboxState::Running
                            : status == "created" ? SandboxState::Created
                            : status == "paused"  ? SandboxState::Paused
                            : status.empty()      ? SandboxState::Unknown
                                                  : SandboxState::Stopped;
           complete(id, info_of(s), t);
         });
    return id;
  }

  OpId submit_run(Command command, Instant now) override {
    return start_user_exec(Operation::Run, std::move(command), false, now);
  }

  OpId submit_stream(Command command, Instant now) override {
    return start_user_exec(Operation::Stream, std::move(command), true, now);
  }

  OpId submit_run_code(CodeRequest request, Instant now) override {
    if (request.context) {
      const OpId id = open(Operation::RunCode, now, request.code);
      if (!ops_.count(id)) return id;
      return fail(id, unsupported(Capability::StatefulCode, "run_code() in a context"), now);
    }
    if (request.language != "python") {
      const OpId id = open(Operation::RunCode, now, request.code);
      if (!ops_.count(id)) return id;
      return fail(
          id,
          Problem{errc::CapabilityNotSupported,
                  "docker:// runs python code (python3 in the image), not " + request.language,
                  {}},
          now);
    }
    Command c;
    c.argv = {"python3", "-c", request.code};
    c.env = std::move(request.env);
    c.timeout = request.timeout;
    return start_user_exec(Operation::RunCode, std::move(c), false, now);
  }

  OpId submit_create_context(std::string, Instant now) override {
    const OpId id = open(Operation::CreateContext, now, {});
    if (!ops_.count(id)) return id;
    return fail(id, unsupported(Capability::StatefulCode, "create_context()"), now);
  }

  OpId submit_write_file(std::string file, Bytes data, Instant now) override {
    const OpId id = open(Operation::WriteFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    if (file == "/") return fail(id, Problem{errc::IsADirectory, "\"/\" is a directory", {}}, now);
    if (on_tmpfs(file)) {
      // The archive API cannot see tmpfs mounts: write through an exec.
      run_internal(id, {"sh", "-c", R"(mkdir -p -- "${1%/*}" && cat > "$1")", "sh", file},
                   std::move(data), [this, id, file](Result<ExecDone> r, Instant t) {
                     if (!alive(id)) return;
                     if (!r) return void(fail(id, r.problem(), t));
                     if (r.value().exit_code != 0)
                       return void(fail(id, exec_file_problem(file, r.value()), t));
                     complete(id, std::monostate{}, t);
                   });
      return id;
    }
    // One archive whose entry carries the whole path, extracted at "/": the daemon makes the
    // missing parent directories. The content goes to the link as it is, never copied.
    tar::Entry e;
    e.name = file.substr(1);
    e.size = data.size();
    e.mode = 0644;
    auto head = tar::header(e);
    if (!head) return fail(id, head.problem(), now);
    const std::string padding = tar::padding(data.size());
    const std::string end = tar::end();
    http::Request req;
    req.method = "PUT";
    req.target = path("/containers/" + container_ + "/archive?path=%2F");
    req.headers.push_back({"Content-Type", "application/x-tar"});
    auto wire = http::write_request_head(
        req, "docker", head.value().size() + data.size() + padding.size() + end.size());
    if (!wire) return fail(id, wire.problem(), now);
    std::vector<Bytes> pieces;
    pieces.push_back(std::move(wire).value() + head.value());
    pieces.push_back(std::move(data));  // the content is not copied
    pieces.push_back(padding + end);
    send_wire(id, "PUT", std::move(pieces), [this, id, file](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      const int s = r.value().status;
      if (s == 200) return void(complete(id, std::monostate{}, t));
      fail(id, archive_problem(file, r.value()), t);
    });
    return id;
  }

  OpId submit_read_file(std::string file, Instant now) override {
    const OpId id = open(Operation::ReadFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    if (on_tmpfs(file)) {
      run_internal(
          id,
          {"sh", "-c",
           R"([ -d "$1" ] && { echo "is a directory" >&2; exit 21; }; exec cat -- "$1")", "sh",
           file},
          {},
          [this, id, file](Result<ExecDone> r, Instant t) {
            if (!alive(id)) return;
            if (!r) return void(fail(id, r.problem(), t));
            if (r.value().exit_code != 0)
              return void(fail(id, exec_file_problem(file, r.value()), t));
            complete(id, std::move(r.value().out), t);
          },
          kReadFileLimit);
      return id;
    }
    struct ReadState {
      Bytes content{};
      int entries = 0;
    };
    auto state = std::make_shared<ReadState>();
    get_archive(
        id, file, /*directory=*/false,
        [state](const tar::Entry& e) {
          // One allocation for the content (address space only until written: a size that
          // lies costs nothing resident, and the limit below still holds).
          if (++state->entries == 1)
            state->content.reserve(
                static_cast<std::size_t>(std::min<std::uint64_t>(e.size, kReadFileLimit)));
        },
        [state, file](std::string_view data) -> std::optional<Problem> {
          if (state->entries == 1) state->content.append(data);
          if (state->content.size() > kReadFileLimit) {
            return Problem{errc::MessageTooLarge,
                           "\"" + file + "\" is larger than read_file() keeps",
                           "Stream it with run({\"cat\", path}) instead."};
          }
          return std::nullopt;
        },
        [this, id, state](Instant t) { complete(id, std::move(state->content), t); });
    return id;
  }

  OpId submit_list_files(std::string dir, Instant now) override {
    const OpId id = open(Operation::ListFiles, now, dir);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(dir, now)) return fail(id, std::move(*p), now);
    while (dir.size() > 1 && dir.back() == '/')
      dir.pop_back();
    if (on_tmpfs(dir)) {
      run_internal(id, {"sh", "-c", std::string(kListScript), "sh", dir}, {},
                   [this, id, dir](Result<ExecDone> r, Instant t) {
                     if (!alive(id)) return;
                     if (!r) return void(fail(id, r.problem(), t));
                     if (r.value().exit_code != 0)
                       return void(fail(id, exec_file_problem(dir, r.value()), t));
                     complete(id, parse_exec_listing(dir, r.value().out), t);
                   });
      return id;
    }
    struct ListState {
      std::string root{};
      std::vector<FileInfo> files{};
    };
    auto state = std::make_shared<ListState>();
    get_archive(
        id, dir, /*directory=*/true,
        [state, dir](const tar::Entry& e) {
          std::string name = e.name;
          while (!name.empty() && name.back() == '/')
            name.pop_back();
          if (state->root.empty()) {  // the directory itself comes first
            state->root = name;
            return;
          }
          if (name.size() <= state->root.size() + 1 ||
              name.compare(0, state->root.size() + 1, state->root + "/") != 0)
            return;
          const std::string rest = name.substr(state->root.size() + 1);
          if (rest.find('/') != std::string::npos) return;  // deeper: not listed
          if (state->files.size() >= 100000) return;
          FileInfo f;
          f.name = rest;
          f.path = (dir == "/" ? "" : dir) + "/" + rest;
          f.type = e.type;
          f.size = e.size;
          f.mode = e.mode;
          f.mtime_unix = e.mtime;
          f.link_target = e.link_target;
          state->files.push_back(std::move(f));
        },
        {}, [this, id, state](Instant t) { complete(id, std::move(state->files), t); });
    return id;
  }

  OpId submit_remove_file(std::string file, Instant now) override {
    const OpId id = open(Operation::RemoveFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    run_internal(
        id,
        {"sh", "-c", R"([ -e "$1" ] || [ -L "$1" ] || exit 44; exec rm -rf -- "$1")", "sh", file},
        {}, [this, id, file](Result<ExecDone> r, Instant t) {
          if (!alive(id)) return;
          if (!r) return void(fail(id, r.problem(), t));
          if (r.value().exit_code == 44) return void(fail(id, missing_file(file), t));
          if (r.value().exit_code != 0)
            return void(fail(id, exec_file_problem(file, r.value()), t));
          complete(id, std::monostate{}, t);
        });
    return id;
  }

  OpId submit_kill(Instant now) override {
    const OpId id = open(Operation::Kill, now, {});
    if (!ops_.count(id)) return id;
    if (container_.empty()) {
      complete(id, std::monostate{}, now);
      return id;
    }
    remove_container(id, now);
    return id;
  }

  OpId submit_list_managed(std::map<std::string, std::string> wanted, Instant now) override {
    const OpId id = open(Operation::ListManaged, now, {});
    if (!ops_.count(id)) return id;
    JsonWriter f;
    f.begin_object().key("label").begin_array();
    f.value(std::string(labels::kManaged) + "=true");
    for (const auto& [k, v] : wanted)
      f.value(k + "=" + v);
    f.end_array().end_object();
    call(id, "GET", path("/containers/json?all=1&filters=" + percent_encode(f.str())), {},
         [this, id](Result<Reply> r, Instant t) {
           if (!alive(id)) return;
           if (!r) return void(fail(id, r.problem(), t));
           if (r.value().status != 200) return void(fail(id, daemon_error(r.value()), t));
           auto doc = json::parse(r.value().body);
           if (!doc) return void(fail(id, doc.problem(), t));
           std::vector<ManagedSandbox> out;
           for (const auto& c : doc.value().items()) {
             ManagedSandbox m;
             m.backend = "docker";
             m.id = std::string(c.string_at("Id").value_or(""));
             if (const json::Value* l = c.find("Labels"); l && l->is_object()) {
               for (const auto& [k, v] : l->members())
                 m.labels[k] = v.text();
             }
             auto label = [&](std::string_view k) {
               auto it = m.labels.find(std::string(k));
               return it == m.labels.end() ? std::string() : it->second;
             };
             m.owner = label(labels::kOwner);
             m.session = label(labels::kSession);
             m.created_unix = std::atoll(label(labels::kCreated).c_str());
             if (m.created_unix == 0) m.created_unix = c.int_at("Created").value_or(0);
             m.lifetime = std::chrono::seconds(std::atoll(label(labels::kLifetime).c_str()));
             const std::string state(c.string_at("State").value_or(""));
             m.state = state == "running"   ? SandboxState::Running
                       : state == "created" ? SandboxState::Created
                       : state == "paused"  ? SandboxState::Paused
                       : state.empty()      ? SandboxState::Unknown
                                            : SandboxState::Stopped;
             out.push_back(std::move(m));
           }
           complete(id, std::move(out), t);
         });
    return id;
  }

  OpId submit_remove_managed(std::string sandbox_id, Instant now) override {
    const OpId id = open(Operation::RemoveManaged, now, {});
    if (!ops_.count(id)) return id;
    if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
      return fail(id, not_found(sandbox_id), now);
    call(id, "GET", path("/containers/" + sandbox_id + "/json"), {},
         [this, id, sandbox_id](Result<Reply> r, Instant t) {
           if (!alive(id)) return;
           if (!r) return void(fail(id, r.problem(), t));
           if (r.value().status == 404) return void(fail(id, not_found(sandbox_id), t));
           auto doc = json::parse(r.value().body);
           if (!doc) return void(fail(id, doc.problem(), t));
           const json::Value* cfg = doc.value().find("Config");
           const json::Value* l = cfg ? cfg->find("Labels") : nullptr;
           if (!l || l->string_at(labels::kManaged) != "true") {
             return void(fail(id,
                              Problem{errc::SandboxNotFound,
                                      "container " + sandbox_id + " is not managed by sandboxio",
                                      "sandboxio removes only what it created."},
                              t));
           }
           call(id, "DELETE", path("/containers/" + sandbox_id + "?force=1&v=1"), {},
                [this, id](Result<Reply> d, Instant t2) {
                  if (!alive(id)) return;
                  if (!d) return void(fail(id, d.problem(), t2));
                  const int s = d.value().status;
                  if (s == 204 || s == 200 || s == 404 || s == 409)
                    return void(complete(id, std::monostate{}, t2));
                  fail(id, daemon_error(d.value()), t2);
                });
         });
    return id;
  }

  void submit_cancel(OpId id, Instant now) override {
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.cancelled) return;
    Op& op = it->second;
    op.cancelled = true;
    if (op.kind == Op::Kind::Exec) {
      kill_tree(id, Termination::Cancelled, now);
    } else if (op.kind == Op::Kind::Create) {
      op.deadline.reset();  // the continuation in flight sees `cancelled` and tears down
    } else {
      // Short control exchanges: drop them.
      for (auto c = conns_.begin(); c != conns_.end();) {
        if (c->second.op == id) {
          push_request(request::Close{c->first});
          c = conns_.erase(c);
        } else {
          ++c;
        }
      }
      cancelled(id, now);
    }
  }

  // ---- outputs ----
  std::optional<Request> poll_request() override {
    if (requests_.empty()) return std::nullopt;
    Request r = std::move(requests_.front());
    requests_.pop_front();
    return r;
  }

  std::optional<Event> poll_event() override {
    if (events_.empty()) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

  bool busy() const override { return conns_.size() > (lease_ != 0 ? 1u : 0u); }

  std::optional<Instant> poll_deadline() const override {
    std::optional<Instant> best;
    auto consider = [&](std::optional<Instant> t) {
      if (t && (!best || *t < *best)) best = t;
    };
    for (const auto& [id, op] : ops_)
      consider(op.deadline);
    for (const auto& [key, e] : execs_) {
      consider(e.reinspect_at);
      consider(e.backstop_at);
    }
    return best;
  }

 private:
  // ---- operations ----
  struct Op {
    enum class Kind : std::uint8_t { Control, Create, Exec } kind = Kind::Control;
    Instant started{};
    OperationRecord record{};
    std::optional<Instant> deadline{};
    std::chrono::milliseconds create_timeout{};
    bool cancelled = false;
    // exec operations
    bool streaming = false;
    std::uint64_t exec = 0;
    std::optional<Termination> forced{};
    Bytes out{}, err{};
    std::uint64_t offsets[2] = {0, 0};
    std::size_t unconsumed = 0;
    std::size_t output_limit = 0;
    Instant exec_started{};
  };

  struct Exec {
    OpId op = 0;
    bool user = false;  // output goes to the operation (run/stream/run_code)
    std::vector<std::string> argv{};
    std::vector<std::string> env{};
    std::string workdir{};
    Bytes stdin_data{};
    bool attach_stdin = false;
    std::string token{};
    std::string id{};  // the daemon's exec id
    ConnId conn = 0;
    bool started = false;  // the 101 arrived
    bool kill_pending = false;
    docker::StreamDemux demux{};
    bool first_stdout = true;
    bool runc_error = false;
    Bytes out{}, err{};
    std::size_t out_limit = kInternalOutputLimit;
    std::optional<Instant> reinspect_at{};
    std::optional<Instant> backstop_at{};
    std::optional<std::chrono::system_clock::time_point> wall_started{};
    std::function<void(Result<ExecDone>, Instant)> then{};
  };

  using Then = std::function<void(Result<Reply>, Instant)>;
  struct Conn {
    OpId op = 0;
    std::vector<Bytes> wire{};  // the request, in pieces sent in order (a file's content is one)
    std::unique_ptr<http::ResponseParser> parser{};
    Then then{};
    Reply reply{};
    bool head_seen = false;
    bool upgraded = false;
    bool lease = false;
    std::uint64_t exec = 0;  // an exec's stream (after the 101)
    std::size_t body_limit = kControlBodyLimit;
    std::function<bool(const http::ResponseParser&, Instant)> on_head{};
    std::function<std::optional<Problem>(std::string_view)> on_body{};
  };

  bool alive(OpId id) const { return ops_.count(id) != 0; }

  OpId open(Operation operation, Instant now, std::string command) {
    const OpId id = ++next_op_;
    Op op;
    op.started = now;
    op.record.sequence = ++sequence_;
    op.record.backend = "docker";
    op.record.sandbox_id = container_;
    op.record.operation = operation;
    op.record.tier = IsolationTier::Container;
    op.record.network_policy = (options_ ? options_->network : NetworkPolicy{}).describe();
    if (options_ && options_->audit.capture_commands && !command.empty())
      op.record.command = std::move(command);
    const bool full = operation != Operation::Kill && ops_.size() >= limits_.max_pending_operations;
    ops_.emplace(id, std::move(op));
    if (full) fail(id, queue_full(limits_), now);
    return id;
  }

  void push(Event e) { events_.push_back(std::move(e)); }
  void push_request(Request r) { requests_.push_back(std::move(r)); }

  void close_record(Op& op, Outcome outcome, Instant now, const std::optional<Problem>& problem) {
    if (problem) {
      op.record.error_code = static_cast<int>(problem->code);
      op.record.error_detail = problem->detail;
    }
    sandboxio::close_record(op.record, outcome, now - op.started, redactor_);
    push(event::Record{op.record, op.started});
  }

  OpId fail(OpId id, Problem problem, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return id;
    push(event::Failed{id, problem});
    close_record(it->second, Outcome::Failed, now, problem);
    ops_.erase(it);
    return id;
  }

  void complete(OpId id, Completion value, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    Op& op = it->second;
    const RecordEnding ending = record_completion(op.record, value, gone_problem());
    push(event::Done{id, std::move(value)});
    close_record(op, ending.outcome, now, ending.problem);
    ops_.erase(it);
  }

  void cancelled(OpId id, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    push(event::Cancelled{id, false});
    close_record(it->second, Outcome::Cancelled, now, std::nullopt);
    ops_.erase(it);
  }

  // ---- problems ----
  static Problem unsupported(Capability c, const std::string& what) {
    return Problem{errc::CapabilityNotSupported,
                   what + " needs the " + std::string(to_string(c)) +
                       " capability, which docker:// does not declare",
                   "docker:// runs code statelessly with python3 -c; use e2b:// for contexts."};
  }

  Problem gone_problem() const {
    return Problem{errc::SandboxGone,
                   "container " + short_id() +
                       " no longer exists (killed, reaped or its lifetime "
                       "ended)",
                   {}};
  }

  static Problem not_found(const std::string& id) {
    return Problem{errc::SandboxNotFound, "no container \"" + id + "\" on this Docker engine", {}};
  }

  static Problem missing_file(const std::string& file) {
    return Problem{errc::FileNotFound, "\"" + file + "\" does not exist in the sandbox", {}};
  }

  std::int64_t unix_seconds() const {
    if (!config_.wall_clock) return 0;
    return std::chrono::duration_cast<std::chrono::seconds>(config_.wall_clock().time_since_epoch())
        .count();
  }

  // A timestamp for the Engine API's since/until: seconds with nanoseconds.
  static std::string api_time(std::chrono::system_clock::time_point t) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    std::string frac = std::to_string(ns % 1'000'000'000);
    frac.insert(0, 9 - frac.size(), '0');
    return std::to_string(ns / 1'000'000'000) + "." + frac;
  }

  std::string short_id() const { return container_.substr(0, 12); }

  std::string describe_endpoint() const {
    const Endpoint& e = config_.endpoint;
    if (e.kind == Endpoint::Kind::Unix) return "unix://" + e.address;
    return std::string(e.tls ? "tcp+tls://" : "tcp://") + e.address + ":" + std::to_string(e.port);
  }

  Problem daemon_error(const Reply& r) const {
    return Problem{errc::SandboxError,
                   "the Docker engine answered " + std::to_string(r.status) + ": " + r.message(),
                   {}};
  }

  Problem archive_problem(const std::string& file, const Reply& r) const {
    const std::string msg = r.message();
    if (r.status == 404) {
      if (msg.find("No such container") != std::string::npos) return gone_problem();
      return missing_file(file);
    }
    if (msg.find("not a directory") != std::string::npos)
      return Problem{errc::NotADirectory, "a parent of \"" + file + "\" is not a directory", {}};
    if (msg.find("read-only") != std::string::npos ||
        msg.find("ermission denied") != std::string::npos)
      return Problem{errc::FilePermissionDenied, "cannot write \"" + file + "\": " + msg,
                     "The root filesystem is read-only: write under a tmpfs= mount."};
    return Problem{errc::FilesystemError, "the archive API refused \"" + file + "\": " + msg, {}};
  }

  static Problem exec_file_problem(const std::string& file, const ExecDone& d) {
    const std::string& e = d.err;
    if (d.exit_code == 21 || e.find("Is a directory") != std::string::npos ||
        e.find("is a directory") != std::string::npos)
      return Problem{errc::IsADirectory, "\"" + file + "\" is a directory", {}};
    if (e.find("No such file") != std::string::npos || e.find("can't cd") != std::string::npos ||
        e.find("can't open") != std::string::npos || d.exit_code == 2)
      return missing_file(file);
    if (e.find("Not a directory") != std::string::npos)
      return Problem{errc::NotADirectory, "a component of \"" + file + "\" is not a directory", {}};
    if (e.find("ermission denied") != std::string::npos || e.find("Read-only") != std::string::npos)
      return Problem{errc::FilePermissionDenied, "\"" + file + "\": " + e.substr(0, 200), {}};
    if (e.find("No space left") != std::string::npos)
      return Problem{errc::FilesystemError,
                     "\"" + file + "\": no space left on the sandbox's filesystem",
                     "Remove files in the sandbox, or write under a mount with more room."};
    return Problem{errc::FilesystemError,
                   "the file operation on \"" + file + "\" failed: " + e.substr(0, 200),
                   {}};
  }

  std::optional<Problem> check_create(const CreateOptions& options) const {
    if (!container_.empty())
      return Problem{errc::SandboxError, "this machine already holds a sandbox",
                     "Make one machine per sandbox."};
    if (auto r = options.validate(); !r) return r.problem();
    if (options.require_isolation && !tier().satisfies(*options.require_isolation)) {
      return Problem{errc::IsolationNotSatisfied,
                     "docker:// gives container isolation, which does not satisfy " +
                         std::string(options.require_isolation->name()),
                     "Use a gVisor or microVM backend (e2b://) for stronger isolation."};
    }
    if (!options.network.denies_all()) {
      return Problem{errc::PolicyUnenforceable,
                     "docker:// cannot enforce an allow list (" + options.network.describe() +
                         "): containers get network none or full access",
                     {}};
    }
    if (options.resources.disk_bytes) {
      return Problem{errc::ResourceLimitUnsupported,
                     "docker:// cannot enforce a disk limit on overlay2 (it needs xfs with "
                     "project quotas)",
                     "Drop resources.disk_bytes, or use a backend that declares disk_limit."};
    }
    if (config_.image.empty())
      return Problem{errc::InvalidDsn, "docker:// needs an image: docker://IMAGE", {}};
    return std::nullopt;
  }

  std::optional<Problem> need_sandbox(Instant now) const {
    if (container_.empty())
      return Problem{errc::SandboxError, "no sandbox yet: call create() or connect() first", {}};
    if (gone_ || (expires_at_ && now >= *expires_at_)) return gone_problem();
    return std::nullopt;
  }

  std::optional<Problem> file_checks(const std::string& file, Instant now) const {
    if (auto p = need_sandbox(now)) return p;
    if (file.empty() || file[0] != '/' || file.find('\0') != std::string::npos)
      return Problem{errc::InvalidPath, "\"" + file + "\" is not an absolute path", {}};
    if (file.find("/../") != std::string::npos || file.ends_with("/.."))
      return Problem{errc::InvalidPath, "\"" + file + "\" contains \"..\"", {}};
    return std::nullopt;
  }

  // True for a path the archive API cannot see: under a tmpfs= mount, or under the mounts
  // the runtime makes in every container (/dev with /dev/shm, /proc, /sys). The daemon would
  // read or write the root filesystem's layer beneath them instead, and say it succeeded.
  bool on_tmpfs(const std::string& file) const {
    const auto under = [&file](std::string_view m) {
      return file == m || (file.size() > m.size() && file.compare(0, m.size(), m) == 0 &&
                           (m == "/" || file[m.size()] == '/'));
    };
    for (std::string_view m : {"/dev", "/proc", "/sys"}) {
      if (under(m)) return true;
    }
    for (const auto& m : config_.tmpfs) {
      if (under(m)) return true;
    }
    return false;
  }

  SandboxInfo info_of(SandboxState state) const {
    SandboxInfo info;
    info.backend = "docker";
    info.id = container_;
    info.tier = IsolationTier::Container;
    info.capabilities = declared_capabilities();
    info.network = options_ ? options_->network : NetworkPolicy{};
    info.state = state;
    info.lifetime = lifetime_;
    return info;
  }

  static std::optional<FileInfo> path_stat(const http::ResponseParser& p) {
    auto h = p.header("X-Docker-Container-Path-Stat");
    if (!h) return std::nullopt;
    auto raw = base64_decode(*h);
    if (!raw) return std::nullopt;
    auto doc = json::parse(*raw);
    if (!doc) return std::nullopt;
    FileInfo f;
    f.name = std::string(doc.value().string_at("name").value_or(""));
    f.size = static_cast<std::uint64_t>(
        std::max<std::int64_t>(doc.value().int_at("size").value_or(0), 0));
    const std::int64_t mode = doc.value().int_at("mode").value_or(0);
    f.mode = static_cast<std::uint32_t>(mode & 07777);
    f.type = (mode & (std::int64_t{1} << 31))   ? FileType::Directory
             : (mode & (std::int64_t{1} << 27)) ? FileType::Symlink
                                                : FileType::File;
    return f;
  }

  static std::vector<FileInfo> parse_exec_listing(const std::string& dir, const Bytes& out) {
    std::vector<FileInfo> files;
    std::size_t pos = 0;
    while (pos < out.size()) {
      const std::size_t nul = out.find('\0', pos);
      if (nul == std::string::npos) break;
      const std::string rec = out.substr(pos, nul - pos);
      pos = nul + 1;
      const std::size_t s1 = rec.find('/');
      const std::size_t s2 = s1 == std::string::npos ? s1 : rec.find('/', s1 + 1);
      if (s2 == std::string::npos) continue;
      FileInfo f;
      const std::string t = rec.substr(0, s1);
      f.type = t == "d" ? FileType::Directory : t == "l" ? FileType::Symlink : FileType::File;
      f.size = f.type == FileType::File ? static_cast<std::uint64_t>(std::strtoull(
                                              rec.substr(s1 + 1, s2 - s1 - 1).c_str(), nullptr, 10))
                                        : 0;
      f.name = rec.substr(s2 + 1);
      f.path = (dir == "/" ? "" : dir) + "/" + f.name;
      files.push_back(std::move(f));
    }
    return files;
  }

  std::string path(const std::string& rest) const { return std::string(kApi) + rest; }

  // ---- HTTP exchanges ----
  ConnId call(OpId op, std::string method, std::string target, Bytes body, Then then,
              std::string content_type = "application/json") {
    http::Request req;
    req.method = std::move(method);
    req.target = std::move(target);
    if (!body.empty() || req.method == "POST" || req.method == "PUT")
      req.headers.push_back({"Content-Type", std::move(content_type)});
    req.body = std::move(body);
    return send(op, std::move(req), std::move(then));
  }

  ConnId send(OpId op, http::Request req, Then then) {
    auto wire = http::write_request(req, "docker");
    std::vector<Bytes> pieces;
    if (wire) pieces.push_back(std::move(wire).value());
    return send_wire(op, req.method, std::move(pieces), std::move(then));
  }

  // A request already written (head and body, in pieces) on a connection of its own.
  ConnId send_wire(OpId op, std::string_view method, std::vector<Bytes> wire, Then then) {
    const ConnId id = next_conn_++;
    Conn c;
    c.op = op;
    c.parser = std::make_unique<http::ResponseParser>();
    c.then = std::move(then);
    if (method == "HEAD") c.parser->expect_no_body();
    c.wire = std::move(wire);
    conns_.emplace(id, std::move(c));
    push_request(request::Open{id, config_.endpoint});
    return id;
  }

  // Body bytes of a plain exchange: streamed to on_body, or collected up to the body limit.
  // Returns false when the exchange ended here.
  bool take_body_piece(ConnId id, Bytes piece, Instant now) {
    Conn& c = conns_.at(id);
    if (c.on_body && c.parser->status() == 200) {
      if (auto p = c.on_body(piece)) {
        finish_conn(id, std::move(*p), now);
        return false;
      }
      return true;
    }
    if (c.reply.body.size() + piece.size() > c.body_limit) {
      finish_conn(id,
                  Problem{errc::MessageTooLarge,
                          "a reply from the Docker engine exceeded " +
                              std::to_string(c.body_limit) + " bytes",
                          {}},
                  now);
      return false;
    }
    c.reply.body += piece;
    return true;
  }

  void finish_conn(ConnId id, std::optional<Problem> problem, Instant now) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn c = std::move(it->second);
    conns_.erase(it);
    push_request(request::Close{id});
    if (c.exec != 0) {  // a plain reply where the exec's stream was expected
      if (!problem) {
        const Reply r{c.parser->status(), c.parser->headers(), std::move(c.reply.body)};
        if (r.status == 404 || r.status == 409) {
          gone_ = true;
          problem = gone_problem();
        } else {
          problem = Problem{errc::ExecutionFailed,
                            "the Docker engine did not start the exec: " + r.message(),
                            {}};
        }
      }
      exec_stream_failed(c.exec, std::move(*problem), now);
      return;
    }
    if (!c.then) return;
    if (problem) return c.then(std::move(*problem), now);
    c.reply.status = c.parser->status();
    c.reply.headers = c.parser->headers();
    c.then(std::move(c.reply), now);
  }

  // Ends an operation's exchanges early with a problem (a directory where a file was asked).
  void abort_call(OpId op, Problem problem, Instant now) {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.op == op && it->second.exec == 0 && !it->second.lease) {
        push_request(request::Close{it->first});
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    fail(op, std::move(problem), now);
  }

  // GET /containers/{id}/archive for `target`, read as a tar stream as it arrives: the stat
  // header must say directory (or not, for a file) before any content is taken; entries and
  // content go to the callbacks; `done` runs once the archive ended cleanly. Every failure
  // fails the operation with its code.
  void get_archive(OpId id, const std::string& target, bool directory,
                   std::function<void(const tar::Entry&)> on_entry,
                   std::function<std::optional<Problem>(std::string_view)> on_data,
                   std::function<void(Instant)> done) {
    auto reader = std::make_shared<tar::Reader>();
    auto data_problem = std::make_shared<std::optional<Problem>>();
    const ConnId conn =
        call(id, "GET",
             path("/containers/" + container_ + "/archive?path=" + percent_encode(target, "/")), {},
             [this, id, target, reader, done = std::move(done)](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               if (r.value().status != 200)
                 return void(fail(id, archive_problem(target, r.value()), t));
               reader->feed_eof();
               if (reader->error()) return void(fail(id, *reader->error(), t));
               done(t);
             });
    Conn& c = conns_.at(conn);
    c.on_head = [this, id, target, directory](const http::ResponseParser& p, Instant t) {
      if (p.status() != 200) return true;
      const auto stat = path_stat(p);
      if (!stat || (stat->type == FileType::Directory) == directory) return true;
      abort_call(id,
                 directory
                     ? Problem{errc::NotADirectory, "\"" + target + "\" is not a directory", {}}
                     : Problem{errc::IsADirectory, "\"" + target + "\" is a directory", {}},
                 t);
      return false;
    };
    c.on_body = [reader, data_problem, on_entry = std::move(on_entry),
                 on_data = std::move(on_data)](std::string_view piece) -> std::optional<Problem> {
      reader->feed(piece, on_entry, [&](std::string_view d) {
        if (on_data && !*data_problem) *data_problem = on_data(d);
      });
      if (reader->error()) return *reader->error();
      return *data_problem;
    };
  }

  // ---- create ----
  std::string create_body() const {
    const CreateOptions& o = *options_;
    const bool lease = !o.outlive_owner;
    const auto secs = std::max<std::int64_t>(1, o.lifetime.count());
    JsonWriter w;
    w.begin_object();
    w.key("Image").value(config_.image);
    // The lifetime backstop lives inside the container: its main process ends at the lifetime.
    // With the owner lease, it also ends when the attached stdin closes (the owner is gone).
    w.key("Cmd").begin_array().value("sh").value("-c");
    if (lease) {
      w.value("(sleep " + std::to_string(secs) + "; kill -TERM $$) & exec cat >/dev/null");
    } else {
      w.value("exec sleep " + std::to_string(secs));
    }
    w.end_array();
    w.key("Entrypoint").begin_array().end_array();
    w.key("Env").begin_array();
    for (const auto& v : o.env.vars())
      w.value(v.name + "=" + v.value);
    w.end_array();
    if (!o.workdir.empty()) w.key("WorkingDir").value(o.workdir);
    if (!config_.user.empty()) w.key("User").value(config_.user);
    w.key("Tty").value(false);
    w.key("OpenStdin").value(lease);
    w.key("StdinOnce").value(lease);
    w.key("AttachStdin").value(lease);
    w.key("AttachStdout").value(false);
    w.key("AttachStderr").value(false);
    w.key("Labels").begin_object();
    for (const auto& [k, v] : o.labels)
      w.key(k).value(v);
    w.key(labels::kManaged).value("true");
    w.key(labels::kOwner).value(config_.owner);
    w.key(labels::kSession).value(config_.session);
    w.key(labels::kCreated).value(std::to_string(unix_seconds()));
    w.key(labels::kLifetime).value(std::to_string(secs));
    w.key("io.sandboxio.lease").value(lease ? "owner" : "none");
    w.end_object();
    w.key("HostConfig").begin_object();
    w.key("NetworkMode").value("none");
    w.key("AutoRemove").value(true);
    w.key("Init").value(true);
    w.key("CapDrop").begin_array().value("ALL").end_array();
    w.key("SecurityOpt").begin_array().value("no-new-privileges").end_array();
    w.key("ReadonlyRootfs").value(config_.read_only);
    if (const auto& m = o.resources.memory_bytes) {
      w.key("Memory").value(static_cast<std::uint64_t>(*m));
      w.key("MemorySwap").value(static_cast<std::uint64_t>(*m));  // equal: no swap
    }
    if (const auto& c = o.resources.cpus)
      w.key("NanoCpus").value(static_cast<std::int64_t>(*c * 1e9));
    if (const auto& p = o.resources.pids) w.key("PidsLimit").value(static_cast<std::int64_t>(*p));
    if (!config_.tmpfs.empty()) {
      w.key("Tmpfs").begin_object();
      for (const auto& m : config_.tmpfs)
        w.key(m).value("rw,nosuid,nodev,mode=1777");
      w.end_object();
    }
    w.end_object();
    w.end_object();
    return std::move(w).str();
  }

  // A create step came back after the operation ended (timeout) or was cancelled: remove what
  // exists and report. Returns true when the step must not go on.
  bool create_abandoned(OpId id, Instant now) {
    const bool gone = !alive(id);
    const bool cancel = !gone && ops_.at(id).cancelled;
    if (!gone && !cancel) return false;
    if (!container_.empty()) {
      const std::string cid = container_;
      if (lease_) {
        push_request(request::Close{lease_});
        conns_.erase(lease_);
        lease_ = 0;
      }
      call(cancel ? id : 0, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
           [this, id, cancel](Result<Reply>, Instant t) {
             if (cancel) cancelled(id, t);
           });
      container_.clear();
    } else if (cancel) {
      cancelled(id, now);
    }
    return true;
  }

  void create_container(OpId id, bool pulled, Instant now) {
    (void)now;
    call(id, "POST", path("/containers/create"), create_body(),
         [this, id, pulled](Result<Reply> r, Instant t) {
           if (r && r.value().status == 201) {
             auto doc = json::parse(r.value().body);
             if (doc) container_ = std::string(doc.value().string_at("Id").value_or(""));
           }
           if (create_abandoned(id, t)) return;
           if (!r) return void(fail(id, r.problem(), t));
           const Reply& reply = r.value();
           if (reply.status == 404 && !pulled && config_.pull_missing &&
               reply.message().find("No such image") != std::string::npos) {
             return pull_image(id, t);
           }
           if (reply.status == 404) {
             return void(fail(id,
                              Problem{errc::ImageNotFound,
                                      "image \"" + config_.image + "\" is not on this engine" +
                                          (config_.pull_missing ? " and could not be pulled" : ""),
                                      {}},
                              t));
           }
           if (reply.status != 201 || container_.empty()) {
             return void(fail(id,
                              Problem{errc::CreateFailed,
                                      "the Docker engine refused the container: " + reply.message(),
                                      {}},
                              t));
           }
           ops_.at(id).record.sandbox_id = container_;
           if (options_->outlive_owner) return start_container(id, t);
           attach_lease(id, t);
         });
  }

  void pull_image(OpId id, Instant now) {
    (void)now;
    std::string image = config_.image, tag;
    const std::size_t at = image.find('@');
    const std::size_t slash = image.find_last_of('/');
    const std::size_t colon = image.find_last_of(':');
    if (at == std::string::npos && colon != std::string::npos &&
        (slash == std::string::npos || colon > slash)) {
      tag = image.substr(colon + 1);
      image.resize(colon);
    }
    if (tag.empty() && at == std::string::npos) tag = "latest";
    std::string target = path("/images/create?fromImage=" + percent_encode(image));
    if (!tag.empty()) target += "&tag=" + percent_encode(tag);
    auto errors = std::make_shared<std::string>();
    auto lines = std::make_shared<http::LineSplitter>();
    const ConnId conn =
        call(id, "POST", std::move(target), {}, [this, id, errors](Result<Reply> r, Instant t) {
          if (create_abandoned(id, t)) return;
          if (!r) return void(fail(id, r.problem(), t));
          if (r.value().status != 200 || !errors->empty()) {
            const std::string why = errors->empty() ? r.value().message() : *errors;
            return void(fail(
                id,
                Problem{
                    errc::ImageNotFound, "pulling \"" + config_.image + "\" failed: " + why, {}},
                t));
          }
          create_container(id, /*pulled=*/true, t);
        });
    conns_.at(conn).on_body = [errors, lines](std::string_view piece) -> std::optional<Problem> {
      lines->feed(piece);
      while (auto line = lines->next_line()) {
        auto doc = json::parse(*line);
        if (!doc) continue;
        if (auto e = doc.value().string_at("error")) *errors = std::string(*e);
      }
      if (lines->error()) return *lines->error();
      return std::nullopt;
    };
  }

  // Containers created but never started by owners that are gone (a process killed between
  // create and start): removed in the background, on this engine, once per machine.
  void sweep_unstarted() {
    if (!config_.owner_gone || swept_) return;
    swept_ = true;
    const std::string filters = R"({"label":["io.sandboxio.managed=true"],"status":["created"]})";
    call(0, "GET", path("/containers/json?all=1&filters=" + percent_encode(filters)), {},
         [this](Result<Reply> r, Instant) {
           if (!r || r.value().status != 200) return;
           auto doc = json::parse(r.value().body);
           if (!doc || !doc.value().is_array()) return;
           for (const auto& c : doc.value().items()) {
             const json::Value* labels = c.find("Labels");
             const auto owner = labels ? labels->string_at(labels::kOwner) : std::nullopt;
             const auto id = c.string_at("Id");
             if (!owner || !id || id->find_first_of("/?#") != std::string_view::npos) continue;
             if (!config_.owner_gone(*owner)) continue;
             call(0, "DELETE", path("/containers/" + std::string(*id) + "?force=1&v=1"), {},
                  [](Result<Reply>, Instant) {});
           }
         });
  }

  // The owner lease: the container's stdin, attached before start and held open for the
  // machine's life. When this process dies, the stream closes and the container ends.
  void attach_lease(OpId id, Instant now) {
    (void)now;
    http::Request req;
    req.method = "POST";
    req.target = path("/containers/" + container_ + "/attach?stream=1&stdin=1");
    req.headers = {
        {"Content-Type", "application/json"}, {"Connection", "Upgrade"}, {"Upgrade", "tcp"}};
    const ConnId conn = send(id, std::move(req), [this, id](Result<Reply> r, Instant t) {
      if (create_abandoned(id, t)) return;
      if (!r || r.value().status != 101) {
        const std::string why = r ? r.value().message() : r.problem().detail;
        remove_after_failed_start(id, "attaching the owner lease failed: " + why, t);
        return;
      }
      start_container(id, t);
    });
    conns_.at(conn).lease = true;
    lease_ = conn;
  }

  void start_container(OpId id, Instant now) {
    // The lifetime's sleep starts after this request: the container cannot end of old age
    // before now + lifetime.
    const Instant expires = now + std::chrono::duration_cast<nanoseconds>(options_->lifetime);
    call(id, "POST", path("/containers/" + container_ + "/start"), {},
         [this, id, expires](Result<Reply> r, Instant t) {
           if (create_abandoned(id, t)) return;
           if (!r) return void(remove_after_failed_start(id, r.problem().detail, t));
           if (r.value().status != 204 && r.value().status != 304) {
             return void(remove_after_failed_start(id, r.value().message(), t));
           }
           expires_at_ = expires;
           lifetime_ = options_->lifetime;
           complete(id, info_of(SandboxState::Running), t);
         });
  }

  // Some configuration errors surface only at start: never leave the created container.
  void remove_after_failed_start(OpId id, const std::string& why, Instant now) {
    (void)now;
    const std::string cid = container_;
    container_.clear();
    if (lease_) {
      push_request(request::Close{lease_});
      conns_.erase(lease_);
      lease_ = 0;
    }
    call(id, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
         [this, id, why](Result<Reply>, Instant t) {
           fail(id, Problem{errc::CreateFailed, "the container did not start: " + why, {}}, t);
         });
  }

  void remove_container(OpId id, Instant now) {
    (void)now;
    const std::string cid = container_;
    gone_ = true;
    if (lease_) {
      push_request(request::Close{lease_});
      conns_.erase(lease_);
      lease_ = 0;
    }
    call(id, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
         [this, id, cid](Result<Reply> r, Instant t) {
           if (!alive(id)) return;
           if (!r) return void(fail(id, r.problem(), t));
           const int s = r.value().status;
           if (s == 204 || s == 200 || s == 404) return void(complete(id, std::monostate{}, t));
           if (s != 409) return void(fail(id, daemon_error(r.value()), t));
           // 409: the removal is already under way (AutoRemove after the lease closed). kill()
           // returns once the container is really gone.
           call(id, "POST", path("/containers/" + cid + "/wait?condition=removed"), {},
                [this, id](Result<Reply> w, Instant t2) {
                  if (!alive(id)) return;
                  if (!w) return void(fail(id, w.problem(), t2));
                  complete(id, std::monostate{}, t2);  // 200 (removed) or 404 (already gone)
                });
         });
  }

  // ---- execs ----
  OpId start_user_exec(Operation operation, Command command, bool streaming, Instant now) {
    const OpId id = open(operation, now,
                         operation == Operation::RunCode && command.argv.size() == 3
                             ? command.argv[2]
                             : shell_join(command.argv));
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (command.argv.empty())
      return fail(id, Problem{errc::ExecutionFailed, "the command is empty", {}}, now);
    if (auto r = command.env.validate(); !r) return fail(id, r.problem(), now);
    if (!command.workdir.empty() && command.workdir[0] != '/')
      return fail(id, Problem{errc::InvalidPath, "the working directory must be absolute", {}},
                  now);
    redactor_.add_secrets(command.env.secret_values());
    Op& op = ops_.at(id);
    op.kind = Op::Kind::Exec;
    op.streaming = streaming;
    op.output_limit = command.output_limit;
    op.exec_started = now;
    op.deadline = now + std::chrono::duration_cast<nanoseconds>(command.timeout);
    Exec e;
    e.op = id;
    e.user = true;
    e.argv = std::move(command.argv);
    for (const auto& v : command.env.vars())
      e.env.push_back(v.name + "=" + v.value);
    e.workdir = std::move(command.workdir);
    e.attach_stdin = !command.stdin_data.empty();
    e.stdin_data = std::move(command.stdin_data);
    if (config_.wall_clock) e.wall_started = config_.wall_clock();
    op.exec = launch(std::move(e), now);
    return id;
  }

  // Internal execs (file operations on tmpfs, removal, the killer) collect their output.
  void run_internal(OpId op, std::vector<std::string> argv, Bytes stdin_data,
                    std::function<void(Result<ExecDone>, Instant)> then,
                    std::size_t out_limit = kInternalOutputLimit) {
    Exec e;
    e.op = op;
    e.argv = std::move(argv);
    e.attach_stdin = !stdin_data.empty();
    e.stdin_data = std::move(stdin_data);
    e.then = std::move(then);
    e.out_limit = out_limit;
    launch(std::move(e), Instant{});
  }

  std::uint64_t launch(Exec e, Instant now) {
    (void)now;
    const std::uint64_t key = ++next_exec_;
    e.token = config_.session + "x" + std::to_string(key);
    JsonWriter w;
    w.begin_object();
    w.key("AttachStdin").value(e.attach_stdin);
    w.key("AttachStdout").value(true);
    w.key("AttachStderr").value(true);
    w.key("Tty").value(false);
    w.key("Cmd").begin_array();
    for (const auto& a : e.argv)
      w.value(a);
    w.end_array();
    w.key("Env").begin_array();
    for (const auto& v : e.env)
      w.value(v);
    if (e.user) w.value(std::string(kExecTokenVar) + "=" + e.token);
    w.end_array();
    const std::string workdir =
        !e.workdir.empty() ? e.workdir : (options_ ? options_->workdir : std::string());
    if (!workdir.empty()) w.key("WorkingDir").value(workdir);
    w.end_object();
    const OpId op = e.op;
    const bool user = e.user;
    execs_.emplace(key, std::move(e));
    if (user && !killing_.empty()) {
      // A kill is in flight: commands submitted after it start once it is done, so that they
      // never see the processes it is killing.
      deferred_.push_back({key, std::move(w).str()});
      return key;
    }
    create_exec(key, op, std::move(w).str());
    return key;
  }

  void create_exec(std::uint64_t key, OpId op, std::string body) {
    call(op, "POST", path("/containers/" + container_ + "/exec"), std::move(body),
         [this, key](Result<Reply> r, Instant t) {
           auto it = execs_.find(key);
           if (it == execs_.end()) return;
           if (!r) return exec_failed(key, r.problem(), t);
           const Reply& reply = r.value();
           if (reply.status == 404 || reply.status == 409) {
             gone_ = true;
             return exec_failed(key, gone_problem(), t);
           }
           if (reply.status != 201) {
             return exec_failed(key,
                                Problem{errc::ExecutionFailed,
                                        "the Docker engine refused the exec: " + reply.message(),
                                        {}},
                                t);
           }
           auto doc = json::parse(reply.body);
           if (!doc) return exec_failed(key, doc.problem(), t);
           it->second.id = std::string(doc.value().string_at("Id").value_or(""));
           if (it->second.kill_pending && it->second.user) {
             // Cancelled before it started: nothing runs yet; end it without starting.
             return exec_stream_ended(key, t);
           }
           start_exec(key, t);
         });
  }

  // Forgets an exec; when the last exec being killed is gone, deferred commands start.
  void erase_exec(std::uint64_t key) {
    execs_.erase(key);
    if (killing_.erase(key) == 0 || !killing_.empty()) return;
    auto deferred = std::move(deferred_);
    deferred_.clear();
    for (auto& [k, body] : deferred) {
      auto it = execs_.find(k);
      if (it == execs_.end()) continue;
      create_exec(k, it->second.op, std::move(body));
    }
  }

  void start_exec(std::uint64_t key, Instant now) {
    (void)now;
    Exec& e = execs_.at(key);
    http::Request req;
    req.method = "POST";
    req.target = path("/exec/" + e.id + "/start");
    req.headers = {
        {"Content-Type", "application/json"}, {"Connection", "Upgrade"}, {"Upgrade", "tcp"}};
    req.body = R"({"Detach":false,"Tty":false})";
    const ConnId conn = send(e.op, std::move(req), {});
    conns_.at(conn).exec = key;
    e.conn = conn;
  }

  void exec_upgraded(ConnId conn, Instant now) {
    Conn& c = conns_.at(conn);
    auto it = execs_.find(c.exec);
    if (it == execs_.end()) return;
    Exec& e = it->second;
    if (c.parser->status() != 101) {
      // A plain reply instead of the stream: the daemon refused to start it.
      return;
    }
    e.started = true;
    // Stdin only after the 101: bytes sent earlier are dropped by the daemon.
    if (e.attach_stdin) {
      if (!e.stdin_data.empty()) push_request(request::Send{conn, std::move(e.stdin_data)});
      e.stdin_data.clear();
      push_request(request::HalfClose{conn});
    }
    if (e.kill_pending) {
      e.kill_pending = false;
      auto op = ops_.find(e.op);
      if (op != ops_.end() && op->second.forced) start_killer(e.op, now);
    }
  }

  // Demultiplexes an exec's stream. Streams hand output over as events, bounded by the
  // operation's unconsumed budget (backpressure); run() and internal execs collect it.
  std::size_t exec_bytes(Conn& c, std::string_view data, Instant now) {
    (void)now;
    auto it = execs_.find(c.exec);
    if (it == execs_.end()) return data.size();
    Exec& e = it->second;
    Op* op = nullptr;
    if (e.user) {
      auto o = ops_.find(e.op);
      if (o != ops_.end()) op = &o->second;
    }
    std::size_t take = data.size();
    if (op && op->streaming) {
      const std::size_t room =
          op->unconsumed >= limits_.stream_buffer ? 0 : limits_.stream_buffer - op->unconsumed;
      if (room == 0) return 0;
      take = std::min(take, room + 8);
    }
    std::optional<Problem> overflow;
    e.demux.feed(data.substr(0, take), [&](docker::FrameType type, std::string_view piece) {
      if (type == docker::FrameType::SystemError) {
        e.err.append(piece.substr(0, 4096));
        return;
      }
      bool to_err = type == docker::FrameType::Stderr;
      if (type == docker::FrameType::Stdout && e.first_stdout) {
        e.first_stdout = false;
        if (piece.starts_with(kRuncError)) e.runc_error = true;
      }
      if (type == docker::FrameType::Stdout && e.runc_error) {
        to_err = true;
        if (e.user && e.err.size() < 4096) e.err.append(piece.substr(0, 4096));
      }
      if (!op) {
        if (e.user) return;  // the operation already ended: drop
        Bytes& dst = to_err ? e.err : e.out;
        if (dst.size() + piece.size() > e.out_limit) {
          overflow =
              Problem{errc::MessageTooLarge, "an internal command's output is too large", {}};
          return;
        }
        dst.append(piece);
        return;
      }
      const int s = to_err ? 1 : 0;
      if (op->streaming) {
        OutputChunk chunk;
        chunk.stream = to_err ? StreamKind::Stderr : StreamKind::Stdout;
        chunk.data = Bytes(piece);
        chunk.offset = op->offsets[s];
        op->offsets[s] += piece.size();
        op->unconsumed += piece.size();
        push(event::Output{e.op, std::move(chunk)});
        return;
      }
      Bytes& dst = to_err ? op->err : op->out;
      if (op->out.size() + op->err.size() + piece.size() > op->output_limit) {
        overflow = Problem{
            errc::OutputLimitExceeded,
            "the command wrote more than " + std::to_string(op->output_limit) + " bytes of output",
            {}};
        return;
      }
      dst.append(piece);
    });
    if (e.demux.error()) {
      exec_failed(it->first, *e.demux.error(), now);
      return data.size();
    }
    if (overflow) {
      const OpId opid = e.op;
      if (e.user) {
        kill_tree(opid, Termination::Cancelled, now);
        fail(opid, std::move(*overflow), now);
      } else {
        exec_failed(it->first, std::move(*overflow), now);
      }
      return data.size();
    }
    return take;
  }

  // The output stream of a running exec broke (reset, not ended): the rest of its output is
  // lost, so the operation fails with ConnectionLost (what arrived was already handed over),
  // and the command, which would run on unseen, is stopped by its token.
  void exec_stream_broke(std::uint64_t key, Problem problem, Instant now) {
    auto it = execs_.find(key);
    if (it == execs_.end()) return;
    const std::string token = it->second.token;
    problem.code = errc::ConnectionLost;
    problem.detail = "the connection carrying the command's output broke: " + problem.detail;
    if (problem.hint.empty())
      problem.hint =
          "The output that arrived was delivered; the command was stopped. Check the path to "
          "the Docker engine and run it again.";
    exec_stream_failed(key, std::move(problem), now);
    if (!token.empty() && !gone_) kill_by_token(token, [](Result<ExecDone>, Instant) {});
  }

  void exec_stream_failed(std::uint64_t key, Problem problem, Instant now) {
    exec_failed(key, std::move(problem), now);
  }

  void exec_failed(std::uint64_t key, Problem problem, Instant now) {
    auto it = execs_.find(key);
    if (it == execs_.end()) return;
    Exec e = std::move(it->second);
    erase_exec(it->first);
    if (e.conn != 0 && conns_.count(e.conn)) {
      conns_.erase(e.conn);
      push_request(request::Close{e.conn});
    }
    if (e.user) {
      auto op = ops_.find(e.op);
      if (op != ops_.end() && op->second.forced && problem.code == errc::SandboxGone) {
        return finish_user_exec(e, std::nullopt, now);
      }
      fail(e.op, std::move(problem), now);
    } else if (e.then) {
      e.then(std::move(problem), now);
    }
  }

  void exec_stream_ended(std::uint64_t key, Instant now) {
    auto it = execs_.find(key);
    if (it == execs_.end()) return;
    Exec& e = it->second;
    e.conn = 0;
    e.backstop_at.reset();
    if (e.id.empty() || !e.started) {
      // Never started (cancelled first) or refused: report without asking the daemon.
      Exec done = std::move(e);
      erase_exec(key);
      if (done.user) return finish_user_exec(done, std::nullopt, now);
      if (done.then) done.then(Problem{errc::ExecutionFailed, "the exec did not start", {}}, now);
      return;
    }
    inspect_exec(key, now);
  }

  void inspect_exec(std::uint64_t key, Instant now) {
    (void)now;
    const Exec& e = execs_.at(key);
    call(e.op, "GET", path("/exec/" + e.id + "/json"), {}, [this, key](Result<Reply> r, Instant t) {
      auto it = execs_.find(key);
      if (it == execs_.end()) return;
      Exec& ex = it->second;
      if (!r) return exec_failed(key, r.problem(), t);
      if (r.value().status == 404) {  // the container went away under the exec
        Exec done = std::move(ex);
        erase_exec(key);
        gone_ = true;
        if (done.user) return finish_user_exec(done, std::nullopt, t, Termination::SandboxGone);
        if (done.then) done.then(gone_problem(), t);
        return;
      }
      if (r.value().status != 200) return exec_failed(key, daemon_error(r.value()), t);
      auto doc = json::parse(r.value().body);
      if (!doc) return exec_failed(key, doc.problem(), t);
      if (doc.value().bool_at("Running") == true) {
        // The stream ended but the process runs on (it closed its output): ask again shortly.
        ex.reinspect_at = t + kReinspectEvery;
        return;
      }
      std::optional<int> code;
      if (auto c = doc.value().int_at("ExitCode")) code = static_cast<int>(*c);
      const std::int64_t pid = doc.value().int_at("Pid").value_or(0);
      Exec done = std::move(ex);
      erase_exec(key);
      if (done.runc_error && pid == 0 && code == 126) {
        // runc could not start the program: 127 for a missing one, as a shell would say.
        const Bytes& text = done.err;
        if (text.find("not found") != std::string::npos ||
            text.find("no such file") != std::string::npos)
          code = 127;
      }
      if (!done.user) {
        if (done.then)
          done.then(ExecDone{code, done.runc_error, std::move(done.out), std::move(done.err)}, t);
        return;
      }
      auto op = ops_.find(done.op);
      const bool signalled = code && *code > 128 && *code <= 128 + 64;
      if (op != ops_.end() && signalled && !op->second.forced) {
        // A SIGKILL may be the container ending (lifetime, kill): ask whether it still runs.
        const OpId opid = done.op;
        call(opid, "GET", path("/containers/" + container_ + "/json"), {},
             [this, done = std::move(done), code](Result<Reply> c, Instant t2) mutable {
               bool gone = false;
               if (c && c.value().status == 404) gone = true;
               if (c && c.value().status == 200) {
                 auto d = json::parse(c.value().body);
                 const json::Value* st = d ? d.value().find("State") : nullptr;
                 gone = !st || st->bool_at("Running") != true;
               }
               if (gone_ || (expires_at_ && t2 >= *expires_at_)) gone = true;
               if (gone) {
                 gone_ = true;
                 return finish_user_exec(done, std::nullopt, t2, Termination::SandboxGone);
               }
               if (code == 137 && done.wall_started && config_.wall_clock) {
                 return check_oom(std::move(done), *code, t2);
               }
               finish_user_exec(done, code, t2);
             });
        return;
      }
      finish_user_exec(done, code, t);
    });
  }

  // A SIGKILL while the container runs on: was it the memory limit? The daemon's event log
  // says, for the command's time window (an exec's OOM kill leaves the container running).
  void check_oom(Exec done, int code, Instant now) {
    (void)now;
    const std::string filters =
        R"({"container":[")" + container_ + R"("],"type":["container"],"event":["oom"]})";
    const std::string target =
        path("/events?since=" + api_time(*done.wall_started) +
             "&until=" + api_time(config_.wall_clock()) + "&filters=" + percent_encode(filters));
    const OpId opid = done.op;
    call(opid, "GET", target, {},
         [this, done = std::move(done), code](Result<Reply> r, Instant t) mutable {
           const bool oom =
               r && r.value().status == 200 && r.value().body.find("\"oom\"") != std::string::npos;
           finish_user_exec(done, code, t,
                            oom ? std::optional(Termination::OutOfMemory) : std::nullopt);
         });
  }

  void finish_user_exec(Exec& e, std::optional<int> code, Instant now,
                        std::optional<Termination> why = std::nullopt) {
    auto it = ops_.find(e.op);
    if (it == ops_.end()) return;
    Op& op = it->second;
    ExecResult r;
    r.exit_code = code;
    r.duration = now - op.exec_started;
    r.streamed = op.streaming;
    if (!op.streaming) {
      r.stdout_bytes = std::move(op.out);
      r.stderr_bytes = std::move(op.err);
    }
    if (why) {
      r.termination = *why;
    } else if (op.forced) {
      r.termination = *op.forced;
    } else if (code && *code > 128 && *code <= 128 + 64) {
      r.termination = Termination::Signalled;
      r.signal = *code - 128;
    } else {
      r.termination = Termination::Exited;
    }
    if (op.cancelled) return cancelled(e.op, now);
    complete(e.op, std::move(r), now);
  }

  // Kills the operation's process tree: every process carrying its exec token, setsid
  // escapees included. The stream then ends and the exec is inspected as usual.
  void kill_tree(OpId id, Termination why, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    Op& op = it->second;
    op.deadline.reset();
    if (op.forced) return;
    op.forced = why;
    auto ex = execs_.find(op.exec);
    if (ex == execs_.end()) return;
    killing_.insert(op.exec);
    if (!ex->second.started) {
      ex->second.kill_pending = true;  // killed as soon as it starts (or never started)
      return;
    }
    start_killer(id, now);
  }

  void start_killer(OpId id, Instant now) {
    (void)now;
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    const std::uint64_t target = it->second.exec;
    auto ex = execs_.find(target);
    if (ex == execs_.end()) return;
    kill_by_token(ex->second.token, [this, target](Result<ExecDone>, Instant t) {
      // Whatever the killer said, the stream must end soon; if it does not, the backstop
      // reports without it.
      auto e = execs_.find(target);
      if (e != execs_.end() && e->second.conn != 0) e->second.backstop_at = t + kKillBackstop;
    });
  }

  // Kills the process tree of the exec that carries `token` (an internal exec of its own).
  void kill_by_token(const std::string& token,
                     std::function<void(Result<ExecDone>, Instant)> then) {
    run_internal(0, {"sh", "-c", std::string(kKillByTokenScript), "sh", token}, {},
                 std::move(then));
  }

  Config config_;
  Limits limits_{};
  std::optional<CreateOptions> options_{};
  Redactor redactor_{};
  std::string container_{};
  std::string user_{};
  std::chrono::seconds lifetime_{0};
  std::optional<Instant> expires_at_{};
  bool gone_ = false;
  bool swept_ = false;
  ConnId lease_ = 0;
  std::map<OpId, Op> ops_{};
  std::map<std::uint64_t, Exec> execs_{};
  std::set<std::uint64_t> killing_{};  // execs whose process tree is being killed
  std::vector<std::pair<std::uint64_t, std::string>> deferred_{};  // exec creations waiting
  std::map<ConnId, Conn> conns_{};
  std::deque<Request> requests_{};
  std::deque<Event> events_{};  // bounded as Limits describes
  OpId next_op_ = 0;
  std::uint64_t next_exec_ = 0;
  std::uint64_t sequence_ = 0;
  ConnId next_conn_ = 1;
};

}  // namespace

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::Filesystem, Capability::Streaming,
                       Capability::ResourceCaps, Capability::Reattach};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<DockerMachine>(std::move(config));
}

}  // namespace sandboxio::docker
