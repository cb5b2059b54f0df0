// The e2b:// machine: E2B's control plane (REST + JSON), envd (Connect + JSON over HTTP/1.1,
// and /files) and the code interpreter (/execute NDJSON) as one sans-I/O state machine. Every
// HTTP exchange gets its own connection (TLS is the transport's); operations are chains of
// exchanges written as continuations. Protocol facts: ../shared/e2b-protocol/ and
// docs/explanation/e2b.md.
#include <algorithm>
#include <deque>
#include <map>

#include "sandboxio/base64.hpp"
#include "sandboxio/connect.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/errors.hpp"
#include "sandboxio/http.hpp"
#include "sandboxio/json.hpp"
#include "sandboxio/json_writer.hpp"
#include "sandboxio/redact.hpp"
#include "sandboxio/shell.hpp"

namespace sandboxio::e2b {
namespace {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

constexpr std::size_t kControlBodyLimit = std::size_t{16} << 20;
constexpr std::size_t kReadFileLimit = std::size_t{2} << 30;
constexpr std::string_view kEnvdPort = "49983";
constexpr std::string_view kCodePort = "49999";
constexpr std::string_view kUserAgent = "sandboxio";
// How long a command's stream may stay open after its process tree was killed.
constexpr nanoseconds kKillBackstop = 3s;
// envd ends a process when Connect-Timeout-Ms runs out: a backstop past the command's own
// timeout, which the machine enforces itself.
constexpr std::chrono::milliseconds kEnvdLifetimeSlack = 30s;
// 429 Too Many Requests: retried this many times, waiting what Retry-After says up to a bound.
constexpr int kMaxRetries = 3;
// Bodies up to this size are kept for a retry after 429 (a copy); larger ones are not.
constexpr std::size_t kRetryBodyLimit = std::size_t{1} << 20;
constexpr std::chrono::seconds kMaxRetryAfter = 30s;

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
  /// The error text of a reply: {"message": ...} (control plane and envd) or the raw body.
  [[nodiscard]] std::string message() const {
    if (auto doc = json::parse(body); doc) {
      if (auto m = doc.value().string_at("message")) return std::string(*m);
    }
    std::string text = body.substr(0, 300);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
      text.pop_back();
    return text;
  }
  /// The Connect error code of an envd unary reply ("not_found"), or empty.
  [[nodiscard]] std::string connect_code() const {
    if (auto doc = json::parse(body); doc) {
      if (auto e = connect::error_of(doc.value())) return e->code;
    }
    return {};
  }
};

// Go's os.ProcessState strings for signals, as envd reports them ("signal: killed").
struct SignalName {
  std::string_view name;
  int number;
};
constexpr SignalName kSignals[] = {
    {"hangup", 1},
    {"interrupt", 2},
    {"quit", 3},
    {"illegal instruction", 4},
    {"trace/breakpoint trap", 5},
    {"aborted", 6},
    {"bus error", 7},
    {"floating point exception", 8},
    {"killed", 9},
    {"user defined signal 1", 10},
    {"segmentation fault", 11},
    {"user defined signal 2", 12},
    {"broken pipe", 13},
    {"alarm clock", 14},
    {"terminated", 15},
};

std::optional<int> signal_of(std::string_view status) {
  constexpr std::string_view prefix = "signal: ";
  if (!status.starts_with(prefix)) return std::nullopt;
  status.remove_prefix(prefix.size());
  if (status.ends_with(" (core dumped)")) status.remove_suffix(14);
  for (const auto& s : kSignals) {
    if (s.name == status) return s.number;
  }
  return std::nullopt;
}

class E2bMachine final : public Machine, public Extensions {
 public:
  explicit E2bMachine(Config config) : config_(std::move(config)) {}

  std::string_view scheme() const noexcept override { return "e2b"; }
  CapabilitySet capabilities() const noexcept override { return declared_capabilities(); }
  IsolationTier tier() const noexcept override { return IsolationTier::Microvm; }

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
    if (problem.code == errc::ConnectionFailed) {
      problem.code = errc::BackendUnavailable;
      problem.detail = "cannot reach E2B at " + it->second.origin + ": " + problem.detail;
      problem.hint =
          "Check E2B_API_URL / E2B_SANDBOX_URL / E2B_DOMAIN and the network; `sandboxio "
          "doctor` checks the control plane.";
    }
    finish_conn(id, std::move(problem), now);
  }

  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override {
    std::size_t used_total = 0;
    while (!data.empty()) {
      auto it = conns_.find(id);
      if (it == conns_.end()) return used_total + data.size();
      Conn& c = it->second;
      if (held_back(c)) break;  // backpressure: the consumer has not taken the output yet
      const std::size_t used = c.parser->feed(data);
      used_total += used;
      data.remove_prefix(used);
      if (c.parser->error()) {
        finish_conn(id, *c.parser->error(), now);
        return used_total + data.size();
      }
      if (!take_progress(id, now)) return used_total + data.size();
      if (conns_.at(id).parser->complete()) {
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
    it->second.parser->feed_eof();
    if (!take_progress(id, now)) return;
    Conn& c = conns_.at(id);
    if (c.parser->complete()) return finish_conn(id, std::nullopt, now);
    finish_conn(id,
                c.parser->error().value_or(
                    Problem{errc::ConnectionLost, "E2B closed the connection mid-reply", {}}),
                now);
  }

  void handle_timeout(Instant now) override {
    std::vector<OpId> due;
    for (const auto& [id, op] : ops_) {
      if ((op.deadline && now >= *op.deadline) || (op.backstop && now >= *op.backstop))
        due.push_back(id);
    }
    for (OpId id : due) {
      auto it = ops_.find(id);
      if (it == ops_.end()) continue;
      Op& op = it->second;
      if (op.backstop && now >= *op.backstop) {
        op.backstop.reset();
        close_conns_of(id);  // the stream outlived the kill: report what is known
        finish_command(id, now);
        continue;
      }
      op.deadline.reset();
      if (op.kind == Op::Kind::Create) {
        fail(
            id,
            Problem{errc::CreateTimeout,
                    "creating the E2B sandbox took longer than " +
                        format_duration(std::chrono::duration_cast<nanoseconds>(op.create_timeout)),
                    {}},
            now);  // the reply that comes back is killed (created_after_all)
      } else if (op.kind == Op::Kind::Command) {
        kill_command(id, Termination::Timeout, now);
      } else if (op.kind == Op::Kind::Code) {
        stop_code(id, Termination::Timeout, now);
      }
    }
    std::vector<Retry> ready;
    for (auto it = retries_.begin(); it != retries_.end();) {
      if (now >= it->at) {
        ready.push_back(std::move(*it));
        it = retries_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& r : ready) {
      if (r.op != 0 && !alive(r.op)) continue;
      send(r.op, std::move(r.origin), std::move(r.request), std::move(r.then), r.attempt);
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
    create_sandbox(id, "/v2/sandboxes", now);
    return id;
  }

  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Connect, now, {});
    if (!ops_.count(id)) return id;
    if (!sandbox_.empty())
      return fail(id, Problem{errc::SandboxError, "this machine already holds a sandbox", {}}, now);
    if (auto p = need_key()) return fail(id, std::move(*p), now);
    if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
      return fail(id, not_found(sandbox_id), now);
    options_ = options;
    redactor_.add_secrets(options.env.secret_values());
    api_call(id, "GET", "/sandboxes/" + sandbox_id, {},
             [this, id, sandbox_id](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               const Reply& reply = r.value();
               if (reply.status == 404) return void(fail(id, not_found(sandbox_id), t));
               if (reply.status != 200) return void(fail(id, api_problem(reply, "connect"), t));
               auto doc = json::parse(reply.body);
               if (!doc) return void(fail(id, doc.problem(), t));
               if (auto p = adopt(doc.value(), sandbox_id)) return void(fail(id, std::move(*p), t));
               if (auto m = doc.value().find("metadata")) {
                 if (auto life = m->string_at(labels::kLifetime))
                   lifetime_ =
                       std::chrono::seconds(std::strtoll(std::string(*life).c_str(), nullptr, 10));
               }
               const std::string state(doc.value().string_at("state").value_or("running"));
               if (state != "paused") return void(complete(id, info_of(SandboxState::Running), t));
               // A paused sandbox is resumed by connecting to it.
               JsonWriter w;
               w.begin_object()
                   .key("timeout")
                   .value(static_cast<std::int64_t>(std::max<std::int64_t>(lifetime_.count(), 1)))
                   .end_object();
               api_call(id, "POST", "/v2/sandboxes/" + sandbox_id + "/connect", std::move(w).str(),
                        [this, id](Result<Reply> r2, Instant t2) {
                          if (!alive(id)) return;
                          if (!r2) return void(fail(id, r2.problem(), t2));
                          if (r2.value().status != 200 && r2.value().status != 201)
                            return void(fail(id, api_problem(r2.value(), "resume"), t2));
                          complete(id, info_of(SandboxState::Running), t2);
                        });
             });
    return id;
  }

  OpId submit_info(Instant now) override {
    const OpId id = open(Operation::Info, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now, /*paused_ok=*/true)) return fail(id, std::move(*p), now);
    api_call(id, "GET", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      if (r.value().status == 404) {
        gone_ = true;
        return void(fail(id, gone_problem(), t));
      }
      if (r.value().status != 200) return void(fail(id, api_problem(r.value(), "info"), t));
      auto doc = json::parse(r.value().body);
      if (!doc) return void(fail(id, doc.problem(), t));
      const std::string state(doc.value().string_at("state").value_or("running"));
      complete(id, info_of(state == "paused" ? SandboxState::Paused : SandboxState::Running), t);
    });
    return id;
  }

  OpId submit_run(Command command, Instant now) override {
    return start_command(Operation::Run, std::move(command), false, now);
  }

  OpId submit_stream(Command command, Instant now) override {
    return start_command(Operation::Stream, std::move(command), true, now);
  }

  OpId submit_run_code(CodeRequest request, Instant now) override {
    const OpId id = open(Operation::RunCode, now, request.code);
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    Op& op = ops_.at(id);
    op.kind = Op::Kind::Code;
    op.exec_started = now;
    op.deadline = now + std::chrono::duration_cast<nanoseconds>(request.timeout);
    redactor_.add_secrets(request.env.secret_values());
    if (request.context) {
      op.context = *request.context;
      execute(id, std::move(request), now);
      return id;
    }
    // Stateless: a fresh context of its own, deleted afterwards.
    JsonWriter w;
    w.begin_object().key("language").value(request.language).end_object();
    code_call(id, "POST", "/contexts", std::move(w).str(),
              [this, id, request = std::move(request)](Result<Reply> r, Instant t) mutable {
                if (!alive(id)) return;
                if (!r) return void(fail(id, r.problem(), t));
                auto ctx = context_of(r.value());
                if (!ctx) return void(fail(id, ctx.problem(), t));
                Op& o = ops_.at(id);
                o.context = ctx.value().id;
                o.ephemeral_context = true;
                execute(id, std::move(request), t);
              });
    return id;
  }

  OpId submit_create_context(std::string language, Instant now) override {
    const OpId id = open(Operation::CreateContext, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    JsonWriter w;
    w.begin_object().key("language").value(language.empty() ? "python" : language).end_object();
    code_call(id, "POST", "/contexts", std::move(w).str(), [this, id](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      auto ctx = context_of(r.value());
      if (!ctx) return void(fail(id, ctx.problem(), t));
      complete(id, std::move(ctx).value(), t);
    });
    return id;
  }

  OpId submit_write_file(std::string file, Bytes data, Instant now) override {
    const OpId id = open(Operation::WriteFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    http::Request req = envd_request("POST", "/files?path=" + percent_encode(file, "/"), kEnvdPort);
    req.headers.push_back({"Content-Type", "application/octet-stream"});
    req.body = std::move(data);
    send(id, envd_origin(kEnvdPort), std::move(req), [this, id, file](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      if (r.value().status == 200) return void(complete(id, std::monostate{}, t));
      fail(id, files_problem(file, r.value()), t);
    });
    return id;
  }

  OpId submit_read_file(std::string file, Instant now) override {
    const OpId id = open(Operation::ReadFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    const ConnId conn =
        send(id, envd_origin(kEnvdPort),
             envd_request("GET", "/files?path=" + percent_encode(file, "/"), kEnvdPort),
             [this, id, file](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               if (r.value().status == 200) return void(complete(id, std::move(r.value().body), t));
               fail(id, files_problem(file, r.value()), t);
             });
    conns_.at(conn).body_limit = kReadFileLimit;
    return id;
  }

  OpId submit_list_files(std::string dir, Instant now) override {
    const OpId id = open(Operation::ListFiles, now, dir);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(dir, now)) return fail(id, std::move(*p), now);
    JsonWriter w;
    w.begin_object().key("path").value(dir).key("depth").value(1).end_object();
    rpc(id, "filesystem.Filesystem/ListDir", std::move(w).str(),
        [this, id, dir](Result<Reply> r, Instant t) {
          if (!alive(id)) return;
          if (!r) return void(fail(id, r.problem(), t));
          if (r.value().status != 200) return void(fail(id, rpc_file_problem(dir, r.value()), t));
          auto doc = json::parse(r.value().body);
          if (!doc) return void(fail(id, doc.problem(), t));
          std::vector<FileInfo> files;
          if (const json::Value* entries = doc.value().find("entries")) {
            for (const json::Value& e : entries->items())
              files.push_back(file_info(e));
          }
          complete(id, std::move(files), t);
        });
    return id;
  }

  OpId submit_remove_file(std::string file, Instant now) override {
    const OpId id = open(Operation::RemoveFile, now, file);
    if (!ops_.count(id)) return id;
    if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
    JsonWriter w;
    w.begin_object().key("path").value(file).end_object();
    rpc(id, "filesystem.Filesystem/Remove", std::move(w).str(),
        [this, id, file](Result<Reply> r, Instant t) {
          if (!alive(id)) return;
          if (!r) return void(fail(id, r.problem(), t));
          if (r.value().status != 200) return void(fail(id, rpc_file_problem(file, r.value()), t));
          complete(id, std::monostate{}, t);
        });
    return id;
  }

  OpId submit_kill(Instant now) override {
    const OpId id = open(Operation::Kill, now, {});
    if (!ops_.count(id)) return id;
    if (sandbox_.empty())
      return fail(id, Problem{errc::SandboxError, "no sandbox yet: nothing to kill", {}}, now);
    if (gone_) return complete(id, std::monostate{}, now), id;
    api_call(id, "DELETE", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      const int s = r.value().status;
      if (s != 204 && s != 200 && s != 404)
        return void(fail(id, api_problem(r.value(), "kill"), t));
      gone_ = true;
      complete(id, std::monostate{}, t);
    });
    return id;
  }

  OpId submit_list_managed(std::map<std::string, std::string> wanted, Instant now) override {
    const OpId id = open(Operation::ListManaged, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_key()) return fail(id, std::move(*p), now);
    wanted[std::string(labels::kManaged)] = "true";
    std::string query;
    for (const auto& [k, v] : wanted)
      query += (query.empty() ? "" : "&") + percent_encode(k) + "=" + percent_encode(v);
    list_page(
        id, "/v2/sandboxes?metadata=" + percent_encode(query) + "&state=running%2Cpaused&limit=100",
        {}, 0, now);
    return id;
  }

  OpId submit_remove_managed(std::string sandbox_id, Instant now) override {
    const OpId id = open(Operation::RemoveManaged, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_key()) return fail(id, std::move(*p), now);
    if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
      return fail(id, not_found(sandbox_id), now);
    api_call(id, "DELETE", "/sandboxes/" + sandbox_id, {},
             [this, id, sandbox_id](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               const int s = r.value().status;
               if (s == 404) return void(fail(id, not_found(sandbox_id), t));
               if (s != 204 && s != 200) return void(fail(id, api_problem(r.value(), "kill"), t));
               complete(id, std::monostate{}, t);
             });
    return id;
  }

  void submit_cancel(OpId id, Instant now) override {
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.cancelled) return;
    Op& op = it->second;
    op.cancelled = true;
    switch (op.kind) {
      case Op::Kind::Create:
        // The reply may still make a sandbox: it is killed when it comes (created_after_all),
        // and the driver keeps driving while busy().
        if (!sandbox_.empty()) {
          kill_created(sandbox_);
          sandbox_.clear();
        }
        return cancelled(id, now);
      case Op::Kind::Command:
        return kill_command(id, Termination::Cancelled, now);
      case Op::Kind::Code:
        return stop_code(id, Termination::Cancelled, now);
      case Op::Kind::Control:
        close_conns_of(id);
        return cancelled(id, now);
    }
  }

  // ---- extensions ----
  OpId submit_pause(Instant now) override {
    const OpId id = open(Operation::Pause, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    api_call(id, "POST", "/sandboxes/" + sandbox_ + "/pause", "{}",
             [this, id](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               if (r.value().status == 404) {
                 gone_ = true;
                 return void(fail(id, gone_problem(), t));
               }
               if (r.value().status != 204 && r.value().status != 200)
                 return void(fail(id, api_problem(r.value(), "pause"), t));
               paused_ = true;
               expires_at_.reset();  // a paused sandbox's lifetime does not run
               complete(id, std::monostate{}, t);
             });
    return id;
  }

  OpId submit_resume(std::chrono::seconds lifetime, Instant now) override {
    const OpId id = open(Operation::Resume, now, {});
    if (!ops_.count(id)) return id;
    if (sandbox_.empty() || gone_) return fail(id, gone_problem(), now);
    if (lifetime.count() <= 0) lifetime = lifetime_;
    JsonWriter w;
    w.begin_object().key("timeout").value(static_cast<std::int64_t>(lifetime.count())).end_object();
    api_call(id, "POST", "/v2/sandboxes/" + sandbox_ + "/connect", std::move(w).str(),
             [this, id, lifetime](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               if (r.value().status == 404) {
                 gone_ = true;
                 return void(fail(id, gone_problem(), t));
               }
               if (r.value().status != 200 && r.value().status != 201)
                 return void(fail(id, api_problem(r.value(), "resume"), t));
               paused_ = false;
               lifetime_ = lifetime;
               expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime);
               complete(id, info_of(SandboxState::Running), t);
             });
    return id;
  }

  OpId submit_set_lifetime(std::chrono::seconds lifetime, Instant now) override {
    const OpId id = open(Operation::SetLifetime, now, {});
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (lifetime.count() <= 0)
      return fail(id, Problem{errc::InvalidCreateOptions, "a lifetime must be positive", {}}, now);
    JsonWriter w;
    w.begin_object().key("timeout").value(static_cast<std::int64_t>(lifetime.count())).end_object();
    api_call(id, "POST", "/sandboxes/" + sandbox_ + "/timeout", std::move(w).str(),
             [this, id, lifetime](Result<Reply> r, Instant t) {
               if (!alive(id)) return;
               if (!r) return void(fail(id, r.problem(), t));
               if (r.value().status == 404) {
                 gone_ = true;
                 return void(fail(id, gone_problem(), t));
               }
               if (r.value().status != 204 && r.value().status != 200)
                 return void(fail(id, api_problem(r.value(), "set-timeout"), t));
               lifetime_ = lifetime;
               expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime);
               complete(id, std::monostate{}, t);
             });
    return id;
  }

  OpId submit_run_pty(Command command, std::uint16_t cols, std::uint16_t rows,
                      Instant now) override {
    pty_ = std::pair<std::uint16_t, std::uint16_t>{cols, rows};
    const OpId id = start_command(Operation::Run, std::move(command), false, now);
    pty_.reset();
    return id;
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

  bool busy() const override { return !conns_.empty() || !retries_.empty(); }

  std::optional<Instant> poll_deadline() const override {
    std::optional<Instant> best;
    auto consider = [&](std::optional<Instant> t) {
      if (t && (!best || *t < *best)) best = t;
    };
    for (const auto& [id, op] : ops_) {
      consider(op.deadline);
      consider(op.backstop);
    }
    for (const auto& r : retries_)
      consider(r.at);
    return best;
  }

 private:
  using Then = std::function<void(Result<Reply>, Instant)>;

  struct Op {
    enum class Kind : std::uint8_t { Control, Create, Command, Code } kind = Kind::Control;
    Instant started{};
    OperationRecord record{};
    std::optional<Instant> deadline{};
    std::optional<Instant> backstop{};
    std::chrono::milliseconds create_timeout{};
    bool cancelled = false;
    // commands
    bool streaming = false;
    std::string token{};
    std::optional<std::uint32_t> pid{};
    Bytes stdin_data{};
    bool stdin_sent = false;
    std::optional<Termination> forced{};
    bool kill_pending = false;
    std::optional<json::Value> end{};
    std::optional<connect::Error> stream_error{};
    Bytes out{}, err{};
    std::uint64_t offsets[2] = {0, 0};
    std::size_t unconsumed = 0;
    std::size_t output_limit = 0;
    Instant exec_started{};
    // code
    std::string context{};
    bool ephemeral_context = false;
    bool stopping = false;
    bool code_error = false;
    std::vector<RichOutput> results{};
    // list_managed
    std::vector<ManagedSandbox> listed{};
  };

  struct Conn {
    OpId op = 0;
    std::string origin{};       // for messages
    std::vector<Bytes> wire{};  // the request in pieces (a large body is one, never copied)
    std::unique_ptr<http::ResponseParser> parser{};
    Then then{};
    Reply reply{};
    bool head_seen = false;
    int attempt = 0;
    Origin retry_origin{};
    http::Request retry_request{};
    std::size_t body_limit = kControlBodyLimit;
    bool streams_output = false;  // its body becomes a command's output (backpressure applies)
    std::function<std::optional<Problem>(const http::ResponseParser&)> on_head{};
    std::function<std::optional<Problem>(std::string_view, Instant)> on_body{};
  };

  struct Retry {
    Instant at{};
    OpId op = 0;
    Origin origin{};
    http::Request request{};
    Then then{};
    int attempt = 0;
  };

  bool alive(OpId id) const { return ops_.count(id) != 0; }

  OpId open(Operation operation, Instant now, std::string command) {
    const OpId id = ++next_op_;
    Op op;
    op.started = now;
    op.record.sequence = ++sequence_;
    op.record.backend = "e2b";
    op.record.sandbox_id = sandbox_;
    op.record.operation = operation;
    op.record.tier = IsolationTier::Microvm;
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
  Problem gone_problem() const {
    return Problem{errc::SandboxGone,
                   "E2B sandbox " + sandbox_ +
                       " no longer exists (killed, reaped or its "
                       "timeout ran out)",
                   {}};
  }

  static Problem not_found(const std::string& id) {
    return Problem{errc::SandboxNotFound, "E2B has no sandbox \"" + id + "\"", {}};
  }

  std::optional<Problem> need_key() const {
    if (!config_.api_key.empty()) return std::nullopt;
    return Problem{errc::CredentialsMissing, "E2B_API_KEY is not set",
                   "Export E2B_API_KEY (from https://e2b.dev/dashboard); sandboxio never reads "
                   "it from a DSN."};
  }

  // A control-plane reply that is not what was hoped for. E2B's body is
  // {"code": <int>, "message": "..."}.
  Problem api_problem(const Reply& r, std::string_view what) const {
    const std::string msg = r.message();
    if (r.status == 401 || r.status == 403)
      return Problem{errc::AuthenticationError,
                     "E2B refused the API key (" + std::to_string(r.status) + "): " + msg,
                     "Check E2B_API_KEY: it must be a valid key of your E2B team."};
    if (r.status == 429)
      return Problem{errc::RateLimited,
                     "E2B kept answering 429 Too Many Requests to " + std::string(what) +
                         " after " + std::to_string(kMaxRetries) + " retries: " + msg,
                     {}};
    if (r.status >= 500)
      return Problem{
          errc::BackendUnavailable,
          "E2B answered " + std::to_string(r.status) + " to " + std::string(what) + ": " + msg,
          {}};
    return Problem{
        what == "create" ? errc::CreateFailed : errc::SandboxError,
        "E2B answered " + std::to_string(r.status) + " to " + std::string(what) + ": " + msg,
        {}};
  }

  static Problem missing_file(const std::string& file) {
    return Problem{errc::FileNotFound, "\"" + file + "\" does not exist in the sandbox", {}};
  }

  Problem files_problem(const std::string& file, const Reply& r) const {
    const std::string msg = r.message();
    if (r.status == 502) return gone_problem();
    if (r.status == 404) return missing_file(file);
    if (msg.find("is a directory") != std::string::npos)
      return Problem{errc::IsADirectory, "\"" + file + "\" is a directory", {}};
    if (msg.find("not a directory") != std::string::npos)
      return Problem{errc::NotADirectory, "a parent of \"" + file + "\" is not a directory", {}};
    if (r.status == 401 || r.status == 403 || msg.find("ermission denied") != std::string::npos)
      return Problem{errc::FilePermissionDenied, "\"" + file + "\": " + msg, {}};
    return Problem{errc::FilesystemError,
                   "envd answered " + std::to_string(r.status) + " for \"" + file + "\": " + msg,
                   {}};
  }

  Problem rpc_file_problem(const std::string& file, const Reply& r) const {
    const std::string code = r.connect_code();
    const std::string msg = r.message();
    if (r.status == 502) return gone_problem();
    if (code == "not_found") return missing_file(file);
    if (msg.find("not a directory") != std::string::npos)
      return Problem{errc::NotADirectory, "\"" + file + "\" is not a directory", {}};
    if (code == "permission_denied")
      return Problem{errc::FilePermissionDenied, "\"" + file + "\": " + msg, {}};
    return Problem{errc::FilesystemError,
                   "envd answered " + (code.empty() ? std::to_string(r.status) : code) + " for \"" +
                       file + "\": " + msg,
                   {}};
  }

  std::optional<Problem> check_create(const CreateOptions& options) const {
    if (!sandbox_.empty())
      return Problem{errc::SandboxError, "this machine already holds a sandbox",
                     "Make one machine per sandbox."};
    if (auto r = options.validate(); !r) return r.problem();
    if (auto p = need_key()) return p;
    if (options.require_isolation && !tier().satisfies(*options.require_isolation)) {
      return Problem{errc::IsolationNotSatisfied,
                     "e2b:// gives microVM isolation, which does not satisfy " +
                         std::string(options.require_isolation->name()),
                     {}};
    }
    for (const auto& host : options.network.allow) {
      if (host.find('*') != std::string::npos || host.find(':') != std::string::npos) {
        return Problem{errc::PolicyUnenforceable,
                       "E2B's network rules take host names, IP addresses and CIDR ranges, not \"" +
                           host + "\"",
                       "Name each host (no wildcards, no ports)."};
      }
    }
    if (options.resources.cpus || options.resources.memory_bytes || options.resources.pids ||
        options.resources.disk_bytes) {
      return Problem{errc::ResourceLimitUnsupported,
                     "e2b:// takes CPU, memory and disk sizes from the template, not from "
                     "create()",
                     "Build an E2B template with the sizes you need, and drop resources."};
    }
    if (config_.template_id.empty())
      return Problem{errc::InvalidDsn, "e2b:// needs a template: e2b://TEMPLATE", {}};
    return std::nullopt;
  }

  std::optional<Problem> need_sandbox(Instant now, bool paused_ok = false) const {
    if (sandbox_.empty())
      return Problem{errc::SandboxError, "no sandbox yet: call create() or connect() first", {}};
    if (gone_ || (expires_at_ && now >= *expires_at_)) return gone_problem();
    if (paused_ && !paused_ok)
      return Problem{errc::SandboxGone, "E2B sandbox " + sandbox_ + " is paused",
                     "Resume it first: e2b::extensions(m).submit_resume()."};
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

  SandboxInfo info_of(SandboxState state) const {
    SandboxInfo info;
    info.backend = "e2b";
    info.id = sandbox_;
    info.tier = IsolationTier::Microvm;
    info.capabilities = declared_capabilities();
    info.network = options_ ? options_->network : NetworkPolicy{};
    info.state = state;
    info.lifetime = lifetime_;
    return info;
  }

  static FileInfo file_info(const json::Value& e) {
    FileInfo f;
    f.name = std::string(e.string_at("name").value_or(""));
    f.path = std::string(e.string_at("path").value_or(""));
    const std::string_view type = e.string_at("type").value_or("");
    f.type = type == "FILE_TYPE_DIRECTORY" ? FileType::Directory
             : type == "FILE_TYPE_SYMLINK" ? FileType::Symlink
                                           : FileType::File;
    // protojson writes int64 as a string, uint32 as a number.
    if (auto s = e.string_at("size")) {
      f.size = std::strtoull(std::string(*s).c_str(), nullptr, 10);
    } else {
      f.size = static_cast<std::uint64_t>(std::max<std::int64_t>(e.int_at("size").value_or(0), 0));
    }
    f.mode = static_cast<std::uint32_t>(e.int_at("mode").value_or(0) & 07777);
    return f;
  }

  static Result<CodeContext> context_of(const Reply& r) {
    if (r.status != 200 && r.status != 201)
      return Problem{errc::ExecutionFailed,
                     "the code interpreter refused to make a context (" + std::to_string(r.status) +
                         "): " + r.message(),
                     {}};
    auto doc = json::parse(r.body);
    if (!doc) return doc.problem();
    CodeContext ctx;
    ctx.id = std::string(doc.value().string_at("id").value_or(""));
    ctx.language = std::string(doc.value().string_at("language").value_or("python"));
    if (ctx.id.empty())
      return Problem{errc::RemoteProtocolViolation, "a code context without an id", {}};
    return ctx;
  }

  // ---- HTTP exchanges ----
  Origin envd_origin(std::string_view port) const {
    if (config_.sandbox) return *config_.sandbox;
    Origin o;
    o.endpoint.kind = Endpoint::Kind::Tcp;
    o.endpoint.address = std::string(port) + "-" + sandbox_ + "." + domain_;
    o.endpoint.port = 443;
    o.endpoint.tls = true;
    o.endpoint.server_name = o.endpoint.address;
    o.endpoint.ca_file = config_.ca_file;
    o.host = o.endpoint.address;
    return o;
  }

  http::Request envd_request(std::string method, std::string target, std::string_view port) const {
    http::Request req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.headers.push_back({"User-Agent", std::string(kUserAgent)});
    req.headers.push_back({"E2b-Sandbox-Id", sandbox_});
    req.headers.push_back({"E2b-Sandbox-Port", std::string(port)});
    if (!access_token_.empty()) req.headers.push_back({"X-Access-Token", access_token_});
    return req;
  }

  ConnId api_call(OpId op, std::string method, std::string target, Bytes body, Then then) {
    http::Request req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.headers.push_back({"User-Agent", std::string(kUserAgent)});
    req.headers.push_back({"X-API-KEY", config_.api_key});
    if (!body.empty()) req.headers.push_back({"Content-Type", "application/json"});
    req.body = std::move(body);
    return send(op, config_.api, std::move(req), std::move(then));
  }

  ConnId rpc(OpId op, std::string_view method, Bytes body, Then then) {
    http::Request req = envd_request("POST", "/" + std::string(method), kEnvdPort);
    req.headers.push_back({"Content-Type", "application/json"});
    req.headers.push_back({"Connect-Protocol-Version", "1"});
    req.body = std::move(body);
    return send(op, envd_origin(kEnvdPort), std::move(req), std::move(then));
  }

  ConnId code_call(OpId op, std::string method, std::string target, Bytes body, Then then) {
    http::Request req = envd_request(std::move(method), std::move(target), kCodePort);
    if (!body.empty()) req.headers.push_back({"Content-Type", "application/json"});
    req.body = std::move(body);
    return send(op, envd_origin(kCodePort), std::move(req), std::move(then));
  }

  ConnId send(OpId op, Origin origin, http::Request req, Then then, int attempt = 0) {
    const ConnId id = next_conn_++;
    auto head = http::write_request_head(req, origin.host, req.body.size());
    Conn c;
    c.op = op;
    c.origin = (origin.endpoint.tls ? "https://" : "http://") + origin.host;
    c.parser = std::make_unique<http::ResponseParser>();
    c.then = std::move(then);
    c.attempt = attempt;
    // A request is kept to be sent again after a 429, unless its body is large (a file):
    // that body goes to the link as it is, and a 429 on it is reported (RateLimited).
    const bool keep = req.body.size() <= kRetryBodyLimit;
    if (head) {
      c.wire.push_back(std::move(head).value());
      if (keep && !req.body.empty()) {
        c.wire.push_back(req.body);
      } else if (!req.body.empty()) {
        c.wire.push_back(std::move(req.body));
      }
    }
    if (!keep) c.attempt = kMaxRetries;
    const Endpoint endpoint = origin.endpoint;
    c.retry_origin = std::move(origin);
    if (keep) c.retry_request = std::move(req);
    conns_.emplace(id, std::move(c));
    push_request(request::Open{id, endpoint});
    return id;
  }

  bool held_back(const Conn& c) const {
    if (!c.streams_output) return false;
    auto it = ops_.find(c.op);
    return it != ops_.end() && it->second.streaming &&
           it->second.unconsumed >= limits_.stream_buffer;
  }

  // Hands new head and body bytes of a connection to its callbacks. False when the exchange
  // ended here (the connection is gone).
  bool take_progress(ConnId id, Instant now) {
    Conn& c = conns_.at(id);
    if (c.parser->head_done() && !c.head_seen) {
      c.head_seen = true;
      if (c.on_head) {
        if (auto p = c.on_head(*c.parser)) {
          finish_conn(id, std::move(*p), now);
          return false;
        }
      }
    }
    Bytes piece = conns_.at(id).parser->take_body();
    if (piece.empty()) return true;
    Conn& c2 = conns_.at(id);
    if (c2.on_body && c2.parser->status() == 200) {
      if (auto p = c2.on_body(piece, now)) {
        finish_conn(id, std::move(*p), now);
        return false;
      }
      return conns_.count(id) != 0;
    }
    if (c2.reply.body.size() + piece.size() > c2.body_limit) {
      finish_conn(id,
                  Problem{errc::MessageTooLarge,
                          "a reply from E2B exceeded " + std::to_string(c2.body_limit) + " bytes",
                          {}},
                  now);
      return false;
    }
    c2.reply.body += piece;
    return true;
  }

  void finish_conn(ConnId id, std::optional<Problem> problem, Instant now) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn c = std::move(it->second);
    conns_.erase(it);
    push_request(request::Close{id});
    if (!c.then) return;
    if (problem) return c.then(std::move(*problem), now);
    c.reply.status = c.parser->status();
    c.reply.headers = c.parser->headers();
    if (c.reply.status == 429 && c.attempt < kMaxRetries && (c.op == 0 || alive(c.op))) {
      // Too Many Requests: wait what Retry-After says (bounded), then send it again.
      std::chrono::seconds wait = 1s;
      if (auto h = c.reply.header("Retry-After")) {
        const long long s = std::strtoll(std::string(*h).c_str(), nullptr, 10);
        if (s > 0) wait = std::chrono::seconds(s);
      }
      wait = std::min(wait, kMaxRetryAfter);
      retries_.push_back(Retry{now + std::chrono::duration_cast<nanoseconds>(wait), c.op,
                               std::move(c.retry_origin), std::move(c.retry_request),
                               std::move(c.then), c.attempt + 1});
      return;
    }
    c.then(std::move(c.reply), now);
  }

  void close_conns_of(OpId op) {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.op == op) {
        push_request(request::Close{it->first});
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    retries_.erase(std::remove_if(retries_.begin(), retries_.end(),
                                  [op](const Retry& r) { return r.op == op; }),
                   retries_.end());
  }

  // ---- create ----
  std::string create_body(bool v1) const {
    const CreateOptions& o = *options_;
    JsonWriter w;
    w.begin_object();
    w.key("templateID").value(config_.template_id);
    w.key("timeout").value(static_cast<std::int64_t>(o.lifetime.count()));
    w.key("metadata").begin_object();
    w.key(labels::kManaged).value("true");
    w.key(labels::kOwner).value(config_.owner);
    w.key(labels::kSession).value(config_.session);
    w.key(labels::kLifetime).value(std::to_string(o.lifetime.count()));
    if (config_.wall_clock) {
      w.key(labels::kCreated)
          .value(std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                    config_.wall_clock().time_since_epoch())
                                    .count()));
    }
    for (const auto& [k, v] : o.labels)
      w.key(k).value(v);
    w.end_object();
    w.key("envVars").begin_object();
    for (const auto& var : o.env.vars())
      w.key(var.name).value(var.value);
    w.end_object();
    // Deny by default: no internet access. An allow list opens exactly those destinations.
    w.key("allow_internet_access").value(false);
    if (!o.network.denies_all()) {
      w.key("network").begin_object();
      w.key("allowOut").begin_array();
      for (const auto& host : o.network.allow)
        w.value(host);
      w.end_array();
      w.key("denyOut").begin_array().value("0.0.0.0/0").end_array();
      w.end_object();
    }
    if (v1) w.key("secure").value(true);
    w.end_object();
    return std::move(w).str();
  }

  void create_sandbox(OpId id, const std::string& target, Instant now) {
    const bool v1 = target == "/sandboxes";
    api_call(id, "POST", target, create_body(v1), [this, id, v1](Result<Reply> r, Instant t) {
      if (!r) return void(fail(id, r.problem(), t));
      const Reply& reply = r.value();
      if (reply.status == 201 || reply.status == 200) {
        auto doc = json::parse(reply.body);
        if (!doc) return void(fail(id, doc.problem(), t));
        const std::string made(doc.value().string_at("sandboxID").value_or(""));
        if (!alive(id) || ops_.at(id).cancelled) {  // timed out or cancelled meanwhile
          if (!made.empty()) kill_created(made);
          return;
        }
        if (auto p = adopt(doc.value(), {})) {
          if (!made.empty()) kill_created(made);
          sandbox_.clear();
          return void(fail(id, std::move(*p), t));
        }
        lifetime_ = options_->lifetime;
        expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime_);
        ops_.at(id).record.sandbox_id = sandbox_;
        return void(complete(id, info_of(SandboxState::Running), t));
      }
      if (!alive(id)) return;
      // A control plane without the v2 endpoint: the v1 one (SDKs up to 2.50 use it).
      const std::string msg = reply.message();
      if (!v1 && (reply.status == 404 || reply.status == 405) &&
          msg.find("emplate") == std::string::npos)
        return create_sandbox(id, "/sandboxes", t);
      if (reply.status == 404)
        return void(fail(id,
                         Problem{errc::ImageNotFound,
                                 "E2B has no template \"" + config_.template_id + "\": " + msg,
                                 "List your templates with `e2b template list`."},
                         t));
      fail(id, api_problem(reply, "create"), t);
    });
    (void)now;
  }

  // Takes the sandbox a create or connect reply describes. A problem when it is unusable.
  std::optional<Problem> adopt(const json::Value& doc, const std::string& expected) {
    const std::string made(doc.string_at("sandboxID").value_or(expected));
    if (made.empty() || made.find_first_of("/?#% .") != std::string::npos)
      return Problem{errc::RemoteProtocolViolation, "E2B answered without a usable sandboxID", {}};
    const std::string version(doc.string_at("envdVersion").value_or("0.0.0"));
    if (!version_at_least(version, 0, 1))
      return Problem{errc::CreateFailed, "the template's envd " + version + " is older than 0.1.0",
                     "Rebuild the template with a current E2B base image."};
    sandbox_ = made;
    access_token_ = std::string(doc.string_at("envdAccessToken").value_or(""));
    redactor_.add_secrets({access_token_});
    const std::string domain(doc.string_at("domain").value_or(""));
    domain_ = domain.empty() ? config_.domain : domain;
    return std::nullopt;
  }

  static bool version_at_least(const std::string& v, int major, int minor) {
    int a = 0, b = 0;
    if (std::sscanf(v.c_str(), "%d.%d", &a, &b) != 2) return false;
    return a > major || (a == major && b >= minor);
  }

  // Kills a sandbox nobody will own (created after its create was cancelled or timed out).
  void kill_created(const std::string& sandbox_id) {
    api_call(0, "DELETE", "/sandboxes/" + sandbox_id, {}, [](Result<Reply>, Instant) {});
  }

  void list_page(OpId id, const std::string& first, const std::string& token, int page,
                 Instant now) {
    const std::string target = first + (token.empty() ? "" : "&nextToken=" + percent_encode(token));
    api_call(id, "GET", target, {}, [this, id, first, page](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (!r) return void(fail(id, r.problem(), t));
      if (r.value().status != 200) return void(fail(id, api_problem(r.value(), "list"), t));
      auto doc = json::parse(r.value().body);
      if (!doc) return void(fail(id, doc.problem(), t));
      Op& op = ops_.at(id);
      for (const json::Value& s : doc.value().items()) {
        ManagedSandbox m;
        m.backend = "e2b";
        m.id = std::string(s.string_at("sandboxID").value_or(""));
        const std::string state(s.string_at("state").value_or(""));
        m.state = state == "running"  ? SandboxState::Running
                  : state == "paused" ? SandboxState::Paused
                                      : SandboxState::Unknown;
        if (const json::Value* meta = s.find("metadata")) {
          for (const auto& [k, v] : meta->members())
            m.labels[k] = v.text();
        }
        m.owner = m.labels[std::string(labels::kOwner)];
        m.session = m.labels[std::string(labels::kSession)];
        m.created_unix = std::strtoll(m.labels[std::string(labels::kCreated)].c_str(), nullptr, 10);
        m.lifetime = std::chrono::seconds(
            std::strtoll(m.labels[std::string(labels::kLifetime)].c_str(), nullptr, 10));
        op.listed.push_back(std::move(m));
      }
      const std::string next(r.value().header("X-Next-Token").value_or(""));
      if (!next.empty() && page < 100) return list_page(id, first, next, page + 1, t);
      complete(id, std::move(op.listed), t);
    });
    (void)now;
  }

  // ---- commands ----
  OpId start_command(Operation operation, Command command, bool streaming, Instant now) {
    const OpId id = open(operation, now, shell_join(command.argv));
    if (!ops_.count(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (command.argv.empty())
      return fail(id, Problem{errc::ExecutionError, "an empty command", {}}, now);
    redactor_.add_secrets(command.env.secret_values());
    Op& op = ops_.at(id);
    op.kind = Op::Kind::Command;
    op.streaming = streaming;
    op.output_limit = command.output_limit;
    op.exec_started = now;
    op.deadline = now + std::chrono::duration_cast<nanoseconds>(command.timeout);
    op.token = config_.session + "-" + std::to_string(id) + "-" + std::to_string(++tokens_);
    op.stdin_data = std::move(command.stdin_data);
    auto launch = [this, id, script = shell_join(command.argv), env = std::move(command.env),
                   cwd = std::move(command.workdir), timeout = command.timeout,
                   pty = pty_](Instant) {
      if (!alive(id)) return;
      start_process(id, script, env, cwd, !ops_.at(id).stdin_data.empty(),
                    timeout + kEnvdLifetimeSlack, true, pty);
    };
    // A command submitted while another one is being killed waits for the kill: what it sees
    // (a process list, a port) must not include what was killed.
    if (kills_in_flight_ > 0) {
      after_kills_.push_back(std::move(launch));
    } else {
      launch(now);
    }
    return id;
  }

  // POST process.Process/Start: `bash -l -c SCRIPT` (what envd and E2B's SDKs run), the token in
  // its environment. `user` operations stream into the operation; internal ones (the killer)
  // only need to run.
  void start_process(OpId id, const std::string& script, const Env& env, const std::string& cwd,
                     bool stdin_open, std::chrono::milliseconds lifetime, bool user,
                     std::optional<std::pair<std::uint16_t, std::uint16_t>> pty = std::nullopt) {
    JsonWriter w;
    w.begin_object().key("process").begin_object();
    w.key("cmd").value("/bin/bash");
    w.key("args").begin_array().value("-l").value("-c").value(script).end_array();
    w.key("envs").begin_object();
    for (const auto& var : env.vars())
      w.key(var.name).value(var.value);
    if (user) w.key(kExecTokenVar).value(ops_.at(id).token);
    w.end_object();
    if (!cwd.empty()) w.key("cwd").value(cwd);
    w.end_object();
    if (pty) {
      w.key("pty").begin_object().key("size").begin_object();
      w.key("cols").value(static_cast<std::int64_t>(pty->first));
      w.key("rows").value(static_cast<std::int64_t>(pty->second));
      w.end_object().end_object();
    }
    w.key("stdin").value(stdin_open);
    w.end_object();
    http::Request req = envd_request("POST", "/process.Process/Start", kEnvdPort);
    req.headers.push_back({"Content-Type", "application/connect+json"});
    req.headers.push_back({"Connect-Protocol-Version", "1"});
    req.headers.push_back({"Connect-Timeout-Ms", std::to_string(lifetime.count())});
    req.body = connect::envelope(std::move(w).str());
    if (!user) {  // the killer
      ++kills_in_flight_;
      send(0, envd_origin(kEnvdPort), std::move(req),
           [this](Result<Reply>, Instant t) { kill_step_done(t); });
      return;
    }
    auto reader = std::make_shared<connect::EnvelopeReader>();
    const ConnId conn = send(id, envd_origin(kEnvdPort), std::move(req),
                             [this, id, reader](Result<Reply> r, Instant t) {
                               if (!alive(id)) return;
                               command_stream_ended(id, std::move(r), *reader, t);
                             });
    Conn& c = conns_.at(conn);
    c.streams_output = true;
    c.on_head = [](const http::ResponseParser& p) -> std::optional<Problem> {
      if (p.status() != 200) return std::nullopt;  // an error body, read whole
      const auto type = p.header("Content-Type");
      if (!type || !type->starts_with("application/connect+json"))
        return Problem{errc::RemoteProtocolViolation,
                       "envd answered a process stream with Content-Type \"" +
                           std::string(type.value_or("")) + "\"",
                       {}};
      return std::nullopt;
    };
    c.on_body = [this, id, reader](std::string_view piece, Instant t) -> std::optional<Problem> {
      reader->feed(piece);
      while (auto e = reader->next()) {
        if (!alive(id)) return std::nullopt;
        if (auto p = on_process_message(id, *e, t)) return p;
      }
      return reader->error();
    };
  }

  // The message envd sends most, {"event":{"data":{"stdout":"<base64>"}}}, in its compact form:
  // the base64 text without a JSON parse. Any other spelling (spaces, more fields) returns
  // nothing and takes the full parse.
  static std::optional<std::pair<std::string_view, std::string_view>> compact_data(
      std::string_view m) {
    constexpr std::string_view kHead = R"({"event":{"data":{")";
    constexpr std::string_view kTail = R"("}}})";
    if (!m.starts_with(kHead) || !m.ends_with(kTail)) return std::nullopt;
    m.remove_prefix(kHead.size());
    m.remove_suffix(kTail.size());
    const std::size_t colon = m.find("\":\"");
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string_view key = m.substr(0, colon);
    const std::string_view text = m.substr(colon + 3);
    // (two memchr scans: find_first_of would test every character against the set)
    if (text.find('"') != std::string_view::npos || text.find('\\') != std::string_view::npos)
      return std::nullopt;
    return std::pair{key, text};
  }

  std::optional<Problem> on_process_message(OpId id, const connect::Envelope& e, Instant now) {
    if (!e.end_stream()) {
      if (auto fast = compact_data(e.message);
          fast && (fast->first == "stdout" || fast->first == "stderr" || fast->first == "pty")) {
        auto bytes = base64_decode(fast->second);
        if (!bytes)
          return Problem{errc::RemoteProtocolViolation, "envd sent output that is not base64", {}};
        return take_output(id, fast->first == "stderr" ? StreamKind::Stderr : StreamKind::Stdout,
                           std::move(*bytes), now);
      }
    }
    auto doc = json::parse(e.message);
    if (!doc) return doc.problem();
    Op& op = ops_.at(id);
    if (e.end_stream()) {
      op.stream_error = connect::error_of(doc.value());
      return std::nullopt;
    }
    const json::Value* event = doc.value().find("event");
    if (!event) return std::nullopt;
    if (const json::Value* start = event->find("start")) {
      op.pid = static_cast<std::uint32_t>(start->int_at("pid").value_or(0));
      if (op.kill_pending) {
        op.kill_pending = false;
        signal_process(id);
      } else if (!op.stdin_data.empty() && !op.stdin_sent) {
        send_stdin(id);
      }
    } else if (const json::Value* data = event->find("data")) {
      for (const std::string_view key : {"stdout", "stderr", "pty"}) {
        const StreamKind kind = key == "stderr" ? StreamKind::Stderr : StreamKind::Stdout;
        const auto text = data->string_at(key);
        if (!text) continue;
        auto bytes = base64_decode(*text);
        if (!bytes)
          return Problem{errc::RemoteProtocolViolation, "envd sent output that is not base64", {}};
        if (auto p = take_output(id, kind, std::move(*bytes), now)) return p;
      }
    } else if (const json::Value* end = event->find("end")) {
      op.end = *end;
    }
    return std::nullopt;
  }

  std::optional<Problem> take_output(OpId id, StreamKind kind, Bytes bytes, Instant now) {
    Op& op = ops_.at(id);
    if (bytes.empty() || op.forced) return std::nullopt;
    const int s = kind == StreamKind::Stdout ? 0 : 1;
    if (op.streaming) {
      const std::uint64_t offset = op.offsets[s];
      op.offsets[s] += bytes.size();
      op.unconsumed += bytes.size();
      push(event::Output{id, OutputChunk{kind, std::move(bytes), offset}});
      return std::nullopt;
    }
    Bytes& into = s == 0 ? op.out : op.err;
    if (op.out.size() + op.err.size() + bytes.size() > op.output_limit) {
      // Past the limit: the command is killed and the run fails with what it said.
      Problem p{errc::OutputLimitExceeded,
                "the command wrote more than " + std::to_string(op.output_limit) +
                    " bytes; stream() it instead of run()",
                {}};
      kill_tree(id);
      close_conns_of(id);
      fail(id, std::move(p), now);
      return std::nullopt;
    }
    into += bytes;
    return std::nullopt;
  }

  void send_stdin(OpId id) {
    Op& op = ops_.at(id);
    op.stdin_sent = true;
    JsonWriter w;
    w.begin_object().key("process").begin_object().key("pid").value(
        static_cast<std::int64_t>(*op.pid));
    w.end_object().key("input").begin_object().key("stdin").value(base64_encode(op.stdin_data));
    w.end_object().end_object();
    op.stdin_data.clear();
    const std::int64_t pid = *op.pid;
    rpc(id, "process.Process/SendInput", std::move(w).str(), [this, pid](Result<Reply>, Instant) {
      JsonWriter c;
      c.begin_object()
          .key("process")
          .begin_object()
          .key("pid")
          .value(pid)
          .end_object()
          .end_object();
      rpc(0, "process.Process/CloseStdin", std::move(c).str(), [](Result<Reply>, Instant) {});
    });
  }

  void signal_process(OpId id) {
    Op& op = ops_.at(id);
    if (!op.pid) {
      op.kill_pending = true;
      return;
    }
    JsonWriter w;
    w.begin_object().key("process").begin_object().key("pid").value(
        static_cast<std::int64_t>(*op.pid));
    w.end_object().key("signal").value("SIGNAL_SIGKILL").end_object();
    ++kills_in_flight_;
    rpc(0, "process.Process/SendSignal", std::move(w).str(),
        [this](Result<Reply>, Instant t) { kill_step_done(t); });
  }

  // One part of a kill (the signal, the killer) ended; commands waiting for kills start once
  // none is in flight.
  void kill_step_done(Instant now) {
    if (kills_in_flight_ > 0) --kills_in_flight_;
    if (kills_in_flight_ > 0) return;
    auto waiting = std::move(after_kills_);
    after_kills_.clear();
    for (auto& launch : waiting)
      launch(now);
  }

  // SIGKILL to the process envd started, and a killer for everything carrying its token
  // (background and setsid children included). The sandbox and its files are untouched.
  void kill_tree(OpId id) {
    signal_process(id);
    std::string script(kKillByTokenScript);
    start_process(0, "sh -c " + shell_quote(script) + " sh " + shell_quote(ops_.at(id).token), {},
                  {}, false, 60s, false);
  }

  void kill_command(OpId id, Termination why, Instant now) {
    Op& op = ops_.at(id);
    if (op.forced) return;
    op.forced = why;
    op.deadline.reset();
    op.backstop = now + kKillBackstop;
    kill_tree(id);
  }

  void command_stream_ended(OpId id, Result<Reply> r, connect::EnvelopeReader& reader,
                            Instant now) {
    Op& op = ops_.at(id);
    if (r && r.value().status != 200) {
      const Reply& reply = r.value();
      if (reply.status == 502 || reply.status == 404) return check_gone(id, now);
      return void(fail(id,
                       Problem{errc::ExecutionFailed,
                               "envd did not start the command (" + std::to_string(reply.status) +
                                   "): " + reply.message(),
                               {}},
                       now));
    }
    if (r) reader.finish();
    if (op.end || op.forced) return finish_command(id, now);
    if (op.stream_error) {
      return void(fail(id,
                       Problem{errc::ExecutionFailed,
                               "envd ended the command with " + op.stream_error->code + ": " +
                                   op.stream_error->message,
                               {}},
                       now));
    }
    // Cut without an end: the sandbox may have ended under it.
    check_gone(id, now);
  }

  // A command's stream was cut: gone sandbox (its timeout ran out, it was killed) or a lost
  // connection to a sandbox that still runs.
  void check_gone(OpId id, Instant now) {
    if (gone_ || (expires_at_ && now >= *expires_at_)) {
      gone_ = true;
      return finish_command(id, now);
    }
    api_call(id, "GET", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
      if (!alive(id)) return;
      if (r && r.value().status == 404) {
        gone_ = true;
        return finish_command(id, t);
      }
      fail(id,
           Problem{errc::ConnectionLost,
                   "the connection to envd was cut mid-command; the sandbox still runs",
                   {}},
           t);
    });
  }

  void finish_command(OpId id, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    Op& op = it->second;
    close_conns_of(id);
    if (op.cancelled) return cancelled(id, now);
    ExecResult r;
    r.duration = now - op.exec_started;
    r.streamed = op.streaming;
    if (!op.streaming) {
      r.stdout_bytes = std::move(op.out);
      r.stderr_bytes = std::move(op.err);
    }
    if (op.forced) {
      r.termination = *op.forced;
    } else if (op.end) {
      const std::string status(op.end->string_at("status").value_or(""));
      const bool exited = op.end->bool_at("exited").value_or(false);
      const auto code = op.end->int_at("exitCode").value_or(0);
      if (exited) {
        r.exit_code = static_cast<int>(code);
      } else if (auto sig = signal_of(status)) {
        r.termination = Termination::Signalled;
        r.signal = *sig;
        r.exit_code = 128 + *sig;
      } else {
        r.exit_code = static_cast<int>(code);
      }
    } else {
      r.termination = Termination::SandboxGone;
    }
    complete(id, std::move(r), now);
  }

  // ---- code ----
  void execute(OpId id, CodeRequest request, Instant now) {
    JsonWriter w;
    w.begin_object().key("code").value(request.code);
    w.key("context_id").value(ops_.at(id).context);
    if (!request.env.vars().empty()) {
      w.key("env_vars").begin_object();
      for (const auto& var : request.env.vars())
        w.key(var.name).value(var.value);
      w.end_object();
    }
    w.end_object();
    auto lines = std::make_shared<http::LineSplitter>();
    const ConnId conn = code_call(
        id, "POST", "/execute", std::move(w).str(), [this, id, lines](Result<Reply> r, Instant t) {
          if (!alive(id)) return;
          if (!r) return check_code_gone(id, r.problem(), t);
          const Reply& reply = r.value();
          if (reply.status == 404)
            return void(
                fail(id,
                     Problem{errc::CodeContextNotFound,
                             "no code context \"" + ops_.at(id).context + "\" in this sandbox",
                             {}},
                     t));
          if (reply.status == 502) return check_code_gone(id, gone_problem(), t);
          if (reply.status != 200)
            return void(fail(id,
                             Problem{errc::ExecutionFailed,
                                     "the code interpreter answered " +
                                         std::to_string(reply.status) + ": " + reply.message(),
                                     {}},
                             t));
          if (auto rest = lines->finish()) {
            if (auto p = on_code_line(id, *rest)) return void(fail(id, *p, t));
          }
          finish_code(id, t);
        });
    conns_.at(conn).on_body = [this, id, lines](std::string_view piece,
                                                Instant) -> std::optional<Problem> {
      lines->feed(piece);
      while (auto line = lines->next_line()) {
        if (line->empty()) continue;
        if (auto p = on_code_line(id, *line)) return p;
      }
      return lines->error();
    };
    (void)now;
  }

  std::optional<Problem> on_code_line(OpId id, const std::string& line) {
    auto doc = json::parse(line);
    if (!doc) return doc.problem();
    const json::Value& v = doc.value();
    const std::string_view type = v.string_at("type").value_or("");
    Op& op = ops_.at(id);
    if (type == "stdout" || type == "stderr") {
      Bytes& into = type == "stdout" ? op.out : op.err;
      into += v.string_at("text").value_or("");
    } else if (type == "result") {
      add_results(op, v);
    } else if (type == "error") {
      op.code_error = true;
      std::string tb(v.string_at("traceback").value_or(""));
      if (tb.empty())
        tb = std::string(v.string_at("name").value_or("Error")) + ": " +
             std::string(v.string_at("value").value_or("")) + "\n";
      op.err += tb;
    }
    return std::nullopt;
  }

  // A Jupyter-style bundle: text/plain first, then the richer forms.
  static void add_results(Op& op, const json::Value& v) {
    struct Field {
      std::string_view key, mime;
    };
    static constexpr Field kFields[] = {
        {"text", "text/plain"},
        {"html", "text/html"},
        {"markdown", "text/markdown"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"jpeg", "image/jpeg"},
        {"pdf", "application/pdf"},
        {"latex", "text/latex"},
        {"json", "application/json"},
        {"javascript", "application/javascript"},
        {"data", "application/vnd.e2b.data+json"},
        {"chart", "application/vnd.e2b.chart+json"},
    };
    for (const Field& f : kFields) {
      const json::Value* field = v.find(f.key);
      if (!field || field->is_null()) continue;
      RichOutput out;
      out.mime_type = std::string(f.mime);
      out.data = field->is_string() ? field->text() : to_json(*field);
      op.results.push_back(std::move(out));
    }
  }

  static std::string to_json(const json::Value& v) {
    JsonWriter w;
    write_value(w, v);
    return std::move(w).str();
  }

  static void write_value(JsonWriter& w, const json::Value& v) {
    switch (v.type()) {
      case json::Value::Type::Null:
        w.null();
        break;
      case json::Value::Type::Bool:
        w.value(v.boolean_value().value_or(false));
        break;
      case json::Value::Type::Number:
        if (auto i = v.integer()) {
          w.value(*i);
        } else {
          w.value(v.real().value_or(0));
        }
        break;
      case json::Value::Type::String:
        w.value(v.text());
        break;
      case json::Value::Type::Array:
        w.begin_array();
        for (const auto& item : v.items())
          write_value(w, item);
        w.end_array();
        break;
      case json::Value::Type::Object:
        w.begin_object();
        for (const auto& [k, item] : v.members()) {
          w.key(k);
          write_value(w, item);
        }
        w.end_object();
        break;
    }
  }

  void check_code_gone(OpId id, Problem problem, Instant now) {
    if (gone_ || (expires_at_ && now >= *expires_at_)) {
      gone_ = true;
      return void(fail(id, gone_problem(), now));
    }
    fail(id, std::move(problem), now);
  }

  // A timed-out or cancelled cell: the only way to stop it is to restart its context (a fresh
  // one is deleted instead).
  void stop_code(OpId id, Termination why, Instant now) {
    Op& op = ops_.at(id);
    op.deadline.reset();
    op.forced = why;
    op.stopping = true;
    close_conns_of(id);
    if (op.context.empty()) {
      // The context is still being made: its reply finds the operation gone and, when it was
      // a fresh one, nobody deletes it; the sandbox's kill does.
      return finish_code(id, now, /*wait_for_context=*/true);
    }
    if (!op.ephemeral_context)
      code_call(0, "POST", "/contexts/" + op.context + "/restart", {},
                [](Result<Reply>, Instant) {});
    finish_code(id, now);
  }

  void finish_code(OpId id, Instant now, bool wait_for_context = false) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    Op& op = it->second;
    if (wait_for_context) {
      op.stopping = true;
      if (op.cancelled) return cancelled(id, now);
      ExecResult r;
      r.termination = *op.forced;
      r.duration = now - op.exec_started;
      return complete(id, std::move(r), now);
    }
    if (op.ephemeral_context)
      code_call(0, "DELETE", "/contexts/" + op.context, {}, [](Result<Reply>, Instant) {});
    if (op.cancelled) return cancelled(id, now);
    ExecResult r;
    r.duration = now - op.exec_started;
    if (op.forced) {
      r.termination = *op.forced;
    } else {
      r.exit_code = op.code_error ? 1 : 0;
      r.stdout_bytes = std::move(op.out);
      r.stderr_bytes = std::move(op.err);
      r.results = std::move(op.results);
    }
    complete(id, std::move(r), now);
  }

  Config config_;
  Limits limits_{};
  std::optional<CreateOptions> options_{};
  Redactor redactor_{};
  std::string sandbox_{};
  std::string access_token_{};
  std::string domain_{};
  std::chrono::seconds lifetime_{0};
  std::optional<Instant> expires_at_{};
  bool gone_ = false;
  bool paused_ = false;
  std::optional<std::pair<std::uint16_t, std::uint16_t>> pty_{};  // for the command being submitted
  OpId next_op_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t tokens_ = 0;
  int kills_in_flight_ = 0;
  std::vector<std::function<void(Instant)>> after_kills_{};
  ConnId next_conn_ = 1;
  std::map<OpId, Op> ops_{};
  std::map<ConnId, Conn> conns_{};
  std::vector<Retry> retries_{};
  std::deque<Request> requests_{};
  std::deque<Event> events_{};
};

}  // namespace

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::NetworkAllowList,
                       Capability::Filesystem,    Capability::Streaming,
                       Capability::StatefulCode,  Capability::RichOutput,
                       Capability::Reattach};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<E2bMachine>(std::move(config));
}

Extensions& extensions(Machine& machine) {
  if (auto* e = dynamic_cast<Extensions*>(&machine)) return *e;
  throw Error(errc::CapabilityNotSupported,
              std::string(machine.scheme()) + ":// has no E2B extensions (pause, resume, PTY)");
}

}  // namespace sandboxio::e2b
