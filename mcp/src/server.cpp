// The MCP server's JSON-RPC handling and its six tools, over the async API.
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <deque>
#include <map>

#include <cstring>

#include "sandboxio/async.hpp"
#include "sandboxio/codec/base64.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/dsn.hpp"
#include "sandboxio/mcp.hpp"

namespace sandboxio::mcp {
namespace {

constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kHeaderMismatch = -32020;
constexpr int kUnsupportedVersion = -32022;

constexpr std::string_view kMetaVersion = "io.modelcontextprotocol/protocolVersion";
constexpr std::string_view kMetaCapabilities = "io.modelcontextprotocol/clientCapabilities";
constexpr std::string_view kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

// The tools, as tools/list shows them.
constexpr std::string_view kTools = R"([
{"name":"run_command","title":"Run a command in the sandbox","description":"Runs a command inside the isolated sandbox (never on the host) and returns its exit code, stdout and stderr apart. Give `command` (a shell command line, run with sh -c) or `argv` (an argument list run without a shell). Network egress is denied unless the operator allowed it.","inputSchema":{"type":"object","properties":{"command":{"type":"string","description":"shell command line, run with sh -c"},"argv":{"type":"array","items":{"type":"string"},"minItems":1,"description":"program and arguments, run without a shell"},"timeout_seconds":{"type":"number","exclusiveMinimum":0,"maximum":3600,"default":60,"description":"seconds before it is killed; the result then says timeout"},"env":{"type":"object","additionalProperties":{"type":"string"},"description":"environment variables for the command"},"workdir":{"type":"string","description":"absolute working directory"}}},"annotations":{"title":"Run a command","readOnlyHint":false,"destructiveHint":true,"idempotentHint":false,"openWorldHint":false}},
{"name":"run_code","title":"Run code in the sandbox","description":"Runs a snippet of code (python) inside the sandbox and returns its output and exit code. Each call is a fresh interpreter unless the backend offers stateful contexts.","inputSchema":{"type":"object","properties":{"code":{"type":"string","description":"the code to run"},"language":{"type":"string","enum":["python"],"default":"python","description":"the language of the code"},"timeout_seconds":{"type":"number","exclusiveMinimum":0,"maximum":3600,"default":60,"description":"seconds before it is killed; the result then says timeout"}},"required":["code"]},"annotations":{"title":"Run code","readOnlyHint":false,"destructiveHint":true,"idempotentHint":false,"openWorldHint":false}},
{"name":"write_file","title":"Write a file in the sandbox","description":"Writes a file inside the sandbox, making missing parent directories. `content` is text, or base64 when `encoding` is base64.","inputSchema":{"type":"object","properties":{"path":{"type":"string","description":"absolute path inside the sandbox"},"content":{"type":"string","description":"the file's content"},"encoding":{"type":"string","enum":["utf-8","base64"],"default":"utf-8","description":"how content is encoded"}},"required":["path","content"]},"annotations":{"title":"Write a file","readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false}},
{"name":"read_file","title":"Read a file from the sandbox","description":"Reads a file inside the sandbox. Text comes back as is; other bytes come back base64-encoded (encoding says which).","inputSchema":{"type":"object","properties":{"path":{"type":"string","description":"absolute path inside the sandbox"}},"required":["path"]},"annotations":{"title":"Read a file","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}},
{"name":"list_files","title":"List a directory in the sandbox","description":"Lists the entries of a directory inside the sandbox with their type and size.","inputSchema":{"type":"object","properties":{"path":{"type":"string","description":"absolute directory path inside the sandbox"}},"required":["path"]},"annotations":{"title":"List files","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}},
{"name":"sandbox_info","title":"Describe the sandbox","description":"Says which backend and isolation tier the sandbox has, what it can do, its network policy and its lifetime.","inputSchema":{"type":"object","properties":{}},"annotations":{"title":"Sandbox info","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}}
])";

bool is_legacy(std::string_view v) {
  for (auto l : kLegacyVersions)
    if (v == l) return true;
  return false;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
    ++i;
  return s.substr(i);
}

std::string id_text(const json::Value* id) {
  if (!id) return {};
  JsonWriter w;
  write_json(w, *id);
  return std::move(w).str();
}

// MCP clients may wrap base64 in lines or leave off the padding; the engine's decoder is strict.
std::optional<std::string> unbase64(std::string_view in) {
  std::string text;
  text.reserve(in.size() + 3);
  for (char c : in) {
    if (c != '\n' && c != '\r') text.push_back(c);
  }
  while (text.size() % 4 != 0)
    text.push_back('=');
  return base64_decode(text);
}

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  asio::any_io_executor ex;
  ServerOptions options;
  std::optional<async::Sandbox> sandbox;
  std::optional<std::string> code_context;  // run_code's, where the sandbox keeps state
  bool creating = false;
  std::error_code create_error;
  std::deque<std::function<void(std::error_code)>> waiting;
  std::map<std::string, std::shared_ptr<asio::cancellation_signal>> running;  // by request id
  std::function<void()> on_closed;  // set by close() while the sandbox is being made

  Impl(asio::any_io_executor e, ServerOptions o) : ex(std::move(e)), options(std::move(o)) {}

  // ---- messages out ----
  static std::string response(const std::string& id, const std::string& result_json) {
    return R"({"jsonrpc":"2.0","id":)" + id + R"(,"result":)" + result_json + "}";
  }
  static std::string error(const std::string& id, int code, std::string_view message,
                           const std::string& data_json = {}) {
    JsonWriter w;
    w.begin_object().key("code").value(code).key("message").value(message).end_object();
    std::string err = std::move(w).str();
    if (!data_json.empty()) err.insert(err.size() - 1, R"(,"data":)" + data_json);
    // An error about a message whose id is unknown omits the id (parse errors).
    return id.empty() ? R"({"jsonrpc":"2.0","error":)" + err + "}"
                      : R"({"jsonrpc":"2.0","id":)" + id + R"(,"error":)" + err + "}";
  }

  static void send_error(const Reply& r, const std::string& id, int code, std::string_view msg,
                         int http, const std::string& data = {}) {
    r.message(error(id, code, msg, data));
    r.end(http);
  }

  // ---- the sandbox, made on first use ----
  void with_sandbox(std::function<void(std::error_code)> then) {
    if (sandbox) return then({});
    if (create_error) return then(create_error);
    waiting.push_back(std::move(then));
    if (creating) return;
    creating = true;
    async::Sandbox::async_create(
        ex, options.backend, options.create,
        [self = shared_from_this()](std::error_code ec, async::Sandbox sb) {
          self->creating = false;
          if (self->on_closed) {  // the server stopped while the sandbox was being made
            if (!ec) {
              auto made = std::make_shared<async::Sandbox>(std::move(sb));
              made->async_kill([made, self](std::error_code) {
                auto done = std::move(self->on_closed);
                done();
              });
            } else {
              auto done = std::move(self->on_closed);
              done();
            }
            return;
          }
          if (ec) {
            self->create_error = ec;
          } else {
            self->sandbox.emplace(std::move(sb));
          }
          auto queued = std::move(self->waiting);
          self->waiting.clear();
          for (auto& w : queued)
            w(ec);
        });
  }

  // ---- JSON-RPC ----
  void handle(std::string_view text, const Transport& t, Reply reply) {
    auto doc = json::parse(text);
    if (!doc)
      return send_error(reply, {}, kParseError, "Parse error: the message is not JSON", 400);
    const json::Value& msg = doc.value();
    if (msg.is_array())
      return send_error(reply, {}, kInvalidRequest, "batches are not supported", 400);
    if (!msg.is_object() || msg.string_at("jsonrpc") != "2.0")
      return send_error(reply, id_text(msg.find("id")), kInvalidRequest,
                        "not a JSON-RPC 2.0 message", 400);
    const json::Value* id = msg.find("id");
    const auto method = msg.string_at("method");
    if (!method) {  // a response to something we never sent: nothing to do
      reply.end(202);
      return;
    }
    const json::Value* params = msg.find("params");
    if (params && !params->is_object())
      return send_error(reply, id_text(id), kInvalidParams, "params must be an object", 400);
    if (!id) return notification(*method, params, reply);
    if (!id->is_string() && !id->integer())
      return send_error(reply, {}, kInvalidRequest, "the id must be a string or an integer", 400);
    const std::string rid = id_text(id);

    // Which revision: the stateless one when the request says so (its _meta or header).
    const json::Value* meta = params ? params->find("_meta") : nullptr;
    const auto header = [&](const std::string& name) -> std::optional<std::string> {
      auto it = t.headers.find(name);
      if (it == t.headers.end()) return std::nullopt;
      return trim(it->second);
    };
    const auto header_version = header("mcp-protocol-version");
    const bool meta_version = meta && meta->find(kMetaVersion);
    const bool stateless = *method == "server/discover" || meta_version ||
                           (header_version && !is_legacy(*header_version));
    if (stateless) {
      if (!meta || !meta->is_object() || !meta->find(kMetaVersion) ||
          !meta->find(kMetaVersion)->is_string() || !meta->find(kMetaCapabilities) ||
          !meta->find(kMetaCapabilities)->is_object()) {
        return send_error(reply, rid, kInvalidParams,
                          "params._meta must carry io.modelcontextprotocol/protocolVersion and "
                          "io.modelcontextprotocol/clientCapabilities",
                          400);
      }
      const std::string version = meta->find(kMetaVersion)->text();
      if (t.http) {
        if (!header_version || *header_version != version)
          return send_error(reply, rid, kHeaderMismatch,
                            "the MCP-Protocol-Version header does not match _meta", 400);
        const auto m = header("mcp-method");
        if (!m || *m != *method)
          return send_error(reply, rid, kHeaderMismatch,
                            "the Mcp-Method header does not match the method", 400);
        if (*method == "tools/call" && params) {
          const auto n = header("mcp-name");
          const auto body_name = params->string_at("name");
          if (body_name && (!n || *n != *body_name))
            return send_error(reply, rid, kHeaderMismatch,
                              "the Mcp-Name header does not match params.name", 400);
        }
      }
      if (version != kStatelessVersion) {
        JsonWriter d;
        d.begin_object().key("supported").begin_array().value(kStatelessVersion);
        for (auto l : kLegacyVersions)
          d.value(l);
        d.end_array().key("requested").value(version).end_object();
        return send_error(reply, rid, kUnsupportedVersion,
                          "unsupported protocol version " + version, 400, std::move(d).str());
      }
      if (*method == "server/discover") return reply_result(reply, rid, complete(discover(), true));
      if (*method == "tools/list") return reply_result(reply, rid, complete(tools_list(), true));
      if (*method == "tools/call") return tools_call(rid, *params, reply, true);
      return send_error(reply, rid, kMethodNotFound, "method not found: " + std::string(*method),
                        404);
    }
    if (t.http && header_version && !is_legacy(*header_version))
      return send_error(reply, rid, kInvalidRequest,
                        "unsupported MCP-Protocol-Version " + *header_version, 400);
    if (*method == "initialize") return reply_result(reply, rid, initialize(params));
    if (*method == "ping") return reply_result(reply, rid, "{}");
    if (*method == "tools/list") return reply_result(reply, rid, tools_list());
    if (*method == "tools/call") {
      if (!params) return send_error(reply, rid, kInvalidParams, "tools/call needs params", 200);
      return tools_call(rid, *params, reply, false);
    }
    send_error(reply, rid, kMethodNotFound, "method not found: " + std::string(*method), 200);
  }

  static void reply_result(const Reply& r, const std::string& id, const std::string& result) {
    r.message(response(id, result));
    r.end(200);
  }

  // The stateless revision's results say what they are; its lists say how long they keep.
  static std::string complete(std::string result, bool cacheable = false) {
    std::string extra = R"("resultType":"complete")";
    if (cacheable) extra += R"(,"ttlMs":3600000,"cacheScope":"public")";
    result.insert(result.size() - 1, (result.size() > 2 ? "," : "") + extra);
    return result;
  }

  void notification(std::string_view method, const json::Value* params, const Reply& reply) {
    if (method == "notifications/cancelled" && params) {
      const std::string rid = id_text(params->find("requestId"));
      auto it = running.find(rid);
      if (it != running.end()) it->second->emit(asio::cancellation_type::terminal);
    }
    reply.end(202);  // initialized, cancelled, progress, anything else: accepted, no answer
  }

  static std::string server_info() {
    return R"({"name":"sandboxio","title":"sandboxio","version":"0.1.0"})";
  }

  std::string initialize(const json::Value* params) const {
    std::string version(kLegacyVersions[0]);
    if (params) {
      if (auto asked = params->string_at("protocolVersion"); asked && is_legacy(*asked))
        version = std::string(*asked);
    }
    JsonWriter w;
    w.begin_object().key("protocolVersion").value(version);
    w.key("capabilities").begin_object().key("tools").begin_object();
    w.key("listChanged").value(false).end_object().end_object();
    w.key("instructions")
        .value("Tools run inside an isolated " + options.backend +
               " sandbox, never on the host. Network egress is " +
               options.create.network.describe() + ".");
    w.end_object();
    std::string out = std::move(w).str();
    out.insert(out.size() - 1, R"(,"serverInfo":)" + server_info());
    return out;
  }

  std::string discover() const {
    JsonWriter w;
    w.begin_object().key("supportedVersions").begin_array().value(kStatelessVersion);
    for (auto l : kLegacyVersions)
      w.value(l);
    w.end_array();
    w.key("capabilities").begin_object().key("tools").begin_object().end_object().end_object();
    w.end_object();
    std::string out = std::move(w).str();
    out.insert(out.size() - 1, R"(,"serverInfo":)" + server_info() + R"(,"_meta":{")" +
                                   std::string(kMetaServerInfo) + R"(":)" + server_info() + "}");
    return out;
  }

  static std::string tools_list() {
    // One line: stdio frames messages by newline.
    static const std::string list = [] {
      std::string t(kTools);
      std::erase(t, '\n');
      return R"({"tools":)" + t + "}";
    }();
    return list;
  }

  // ---- tools ----
  struct Call {
    std::string id;
    Reply reply;
    std::optional<std::string> progress_token;  // JSON text
    std::shared_ptr<asio::cancellation_signal> cancel;
    bool stateless = false;
  };

  static void finish(const std::shared_ptr<Call>& call, std::string result) {
    if (call->stateless) result = complete(std::move(result));
    call->reply.message(response(call->id, result));
    call->reply.end(200);
  }

  void tools_call(const std::string& rid, const json::Value& params, Reply reply, bool stateless) {
    const auto name = params.string_at("name");
    if (!name) return send_error(reply, rid, kInvalidParams, "tools/call needs params.name", 400);
    const json::Value* args = params.find("arguments");
    static const json::Value empty = json::Value::object({});
    if (!args) args = &empty;
    if (!args->is_object())
      return send_error(reply, rid, kInvalidParams, "arguments must be an object", 400);
    auto call = std::make_shared<Call>();
    call->id = rid;
    call->stateless = stateless;
    call->reply = std::move(reply);
    if (const json::Value* meta = params.find("_meta"); meta && meta->find("progressToken"))
      call->progress_token = id_text(meta->find("progressToken"));
    // Arguments that do not fit the schema are a tool error the model can correct (isError),
    // not a protocol error.
    auto bad = [&](std::string why) { invalid_arguments(call, why); };
    if (*name == "run_command" || *name == "run_code") {
      Command c;
      const double timeout = args->find("timeout_seconds") && args->find("timeout_seconds")->real()
                                 ? *args->find("timeout_seconds")->real()
                                 : 60.0;
      if (!(timeout > 0 && timeout <= 3600)) return bad("timeout_seconds must be in (0, 3600]");
      c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
      if (*name == "run_code") {
        const auto code = args->string_at("code");
        if (!code) return bad("run_code needs code");
        const auto lang = args->string_at("language").value_or("python");
        if (lang != "python") return bad("run_code runs python only");
        CodeRequest r;
        r.code = std::string(*code);
        r.timeout = c.timeout;
        return run_code(call, std::move(r));
      } else if (auto cmd = args->string_at("command")) {
        c.argv = {"sh", "-c", std::string(*cmd)};
      } else if (const json::Value* argv = args->find("argv"); argv && argv->is_array()) {
        for (const auto& a : argv->items()) {
          if (!a.is_string()) return bad("argv must hold strings");
          c.argv.push_back(a.text());
        }
        if (c.argv.empty()) return bad("argv is empty");
      } else {
        return bad("run_command needs command (a string) or argv (a list)");
      }
      if (const json::Value* env = args->find("env")) {
        if (!env->is_object()) return bad("env must be an object of strings");
        for (const auto& [k, v] : env->members()) {
          if (!v.is_string()) return bad("env values must be strings");
          c.env.set(k, v.text());
        }
      }
      if (auto wd = args->string_at("workdir")) c.workdir = std::string(*wd);
      return run_command(call, std::move(c));
    }
    if (*name == "write_file") {
      const auto path = args->string_at("path");
      const auto content = args->string_at("content");
      if (!path || !content) return bad("write_file needs path and content");
      std::string data(*content);
      if (args->string_at("encoding") == "base64") {
        auto raw = unbase64(data);
        if (!raw) return bad("content is not valid base64");
        data = std::move(*raw);
      }
      const std::size_t size = data.size();
      const std::string p(*path);
      return with(
          call, [self = shared_from_this(), call, p, data = std::move(data), size]() mutable {
            self->sandbox->async_write_file(
                p, std::move(data), [self, call, p, size](std::error_code ec) {
                  if (ec) return self->tool_error(call, ec);
                  JsonWriter s;
                  s.begin_object()
                      .key("path")
                      .value(p)
                      .key("bytes")
                      .value(static_cast<std::uint64_t>(size))
                      .end_object();
                  self->tool_result(call, "wrote " + std::to_string(size) + " bytes to " + p,
                                    std::move(s).str());
                });
          });
    }
    if (*name == "read_file") {
      const auto path = args->string_at("path");
      if (!path) return bad("read_file needs path");
      const std::string p(*path);
      return with(call, [self = shared_from_this(), call, p] {
        self->sandbox->async_read_file(p, [self, call, p](std::error_code ec, Bytes data) {
          if (ec) return self->tool_error(call, ec);
          const bool text = is_valid_utf8(data) && data.find('\0') == std::string::npos;
          const std::string shown = text ? data : base64_encode(data);
          JsonWriter s;
          s.begin_object().key("path").value(p).key("size").value(
              static_cast<std::uint64_t>(data.size()));
          s.key("encoding")
              .value(text ? "utf-8" : "base64")
              .key("content")
              .value(shown)
              .end_object();
          self->tool_result(call, shown, std::move(s).str());
        });
      });
    }
    if (*name == "list_files") {
      const auto path = args->string_at("path");
      if (!path) return bad("list_files needs path");
      const std::string p(*path);
      return with(call, [self = shared_from_this(), call, p] {
        self->sandbox->async_list_files(
            p, [self, call, p](std::error_code ec, std::vector<FileInfo> files) {
              if (ec) return self->tool_error(call, ec);
              JsonWriter s;
              s.begin_object().key("path").value(p).key("entries").begin_array();
              std::string text;
              for (const auto& f : files) {
                s.begin_object().key("name").value(f.name).key("type").value(to_string(f.type));
                s.key("size").value(static_cast<std::uint64_t>(f.size)).end_object();
                text += f.name + (f.type == FileType::Directory ? "/" : "") + "\t" +
                        std::to_string(f.size) + "\n";
              }
              s.end_array().end_object();
              self->tool_result(call, text.empty() ? "(empty)" : text, std::move(s).str());
            });
      });
    }
    if (*name == "sandbox_info") {
      return with(call, [self = shared_from_this(), call] {
        self->sandbox->async_info([self, call](std::error_code ec, SandboxInfo info) {
          if (ec) return self->tool_error(call, ec);
          JsonWriter s;
          s.begin_object().key("backend").value(info.backend).key("id").value(info.id);
          s.key("tier").value(info.tier.name()).key("network").value(info.network.describe());
          s.key("state").value(to_string(info.state));
          s.key("lifetime_s").value(static_cast<std::int64_t>(info.lifetime.count()));
          if (!info.agent.empty()) s.key("agent").value(info.agent);
          s.key("capabilities").begin_array();
          for (auto c : kAllCapabilities)
            if (info.capabilities.contains(c)) s.value(to_string(c));
          s.end_array().end_object();
          const std::string text = info.backend + " sandbox " + info.id + ", isolation tier " +
                                   std::string(info.tier.name()) + ", network " +
                                   info.network.describe();
          self->tool_result(call, text, std::move(s).str());
        });
      });
    }
    send_error(call->reply, rid, kInvalidParams, "unknown tool: " + std::string(*name), 400);
  }

  // Runs `then` once the sandbox exists; a failure to make it is a tool error.
  void with(const std::shared_ptr<Call>& call, std::function<void()> then) {
    with_sandbox([self = shared_from_this(), call, then = std::move(then)](std::error_code ec) {
      if (ec) return self->tool_error(call, ec);
      then();
    });
  }

  void run_command(const std::shared_ptr<Call>& call, Command c) {
    call->cancel = std::make_shared<asio::cancellation_signal>();
    running[call->id] = call->cancel;
    with(call, [self = shared_from_this(), call, c = std::move(c)]() mutable {
      if (!self->running.count(call->id)) return;  // cancelled while the sandbox was made
      auto done = [self, call](std::error_code ec, ExecResult r) {
        self->running.erase(call->id);
        if (ec == asio::error::operation_aborted) return call->reply.end(200);  // cancelled
        if (ec) return self->tool_error(call, ec);
        self->exec_result(call, r);
      };
      if (!call->progress_token) {
        self->sandbox->async_run(std::move(c),
                                 asio::bind_cancellation_slot(call->cancel->slot(), done));
        return;
      }
      // Progress asked for: stream, and tell the client as output arrives.
      self->sandbox->async_stream(std::move(c),
                                  [self, call, done](std::error_code ec, async::Process p) mutable {
                                    if (ec) return done(ec, {});
                                    auto proc = std::make_shared<async::Process>(std::move(p));
                                    auto out = std::make_shared<ExecResult>();
                                    auto count = std::make_shared<std::uint64_t>(0);
                                    self->pump(call, proc, out, count, std::move(done));
                                  });
    });
  }

  // run_code: in the session's code context where the sandbox keeps state (one context for
  // the whole MCP session, made on first use), else in a fresh interpreter each call.
  void run_code(const std::shared_ptr<Call>& call, CodeRequest r) {
    call->cancel = std::make_shared<asio::cancellation_signal>();
    running[call->id] = call->cancel;
    with(call, [self = shared_from_this(), call, r = std::move(r)]() mutable {
      if (!self->running.count(call->id)) return;  // cancelled while the sandbox was made
      auto run = [self, call](CodeRequest req) {
        auto done = [self, call](std::error_code ec, ExecResult result) {
          self->running.erase(call->id);
          if (ec == asio::error::operation_aborted) return call->reply.end(200);  // cancelled
          if (ec) return self->tool_error(call, ec);
          self->exec_result(call, result);
        };
        if (self->code_context) req.context = *self->code_context;
        self->sandbox->async_run_code(std::move(req),
                                      asio::bind_cancellation_slot(call->cancel->slot(), done));
      };
      if (self->code_context || !self->sandbox->capabilities().contains(Capability::StatefulCode)) {
        return run(std::move(r));
      }
      self->sandbox->async_create_context(
          "python",
          [self, call, run, r = std::move(r)](std::error_code ec, CodeContext ctx) mutable {
            if (ec) {
              self->running.erase(call->id);
              return self->tool_error(call, ec);
            }
            if (!self->code_context) self->code_context = ctx.id;
            run(std::move(r));
          });
    });
  }

  void pump(const std::shared_ptr<Call>& call, const std::shared_ptr<async::Process>& proc,
            const std::shared_ptr<ExecResult>& out, const std::shared_ptr<std::uint64_t>& count,
            std::function<void(std::error_code, ExecResult)> done) {
    proc->async_next(asio::bind_cancellation_slot(
        call->cancel->slot(), [self = shared_from_this(), call, proc, out, count, done](
                                  std::error_code ec, std::optional<OutputChunk> chunk) mutable {
          if (ec) return done(ec, {});
          if (!chunk) {
            proc->async_wait([out, done](std::error_code e, ExecResult r) mutable {
              r.stdout_bytes = std::move(out->stdout_bytes);
              r.stderr_bytes = std::move(out->stderr_bytes);
              done(e, std::move(r));
            });
            return;
          }
          Bytes& dst = chunk->stream == StreamKind::Stdout ? out->stdout_bytes : out->stderr_bytes;
          if (dst.size() < self->options.max_output_bytes * 2) dst += chunk->data;
          *count += chunk->data.size();
          JsonWriter w;
          w.begin_object().key("progress").value(*count);
          w.key("message").value(std::to_string(*count) + " bytes of output").end_object();
          std::string params = std::move(w).str();
          params.insert(1, R"("progressToken":)" + *call->progress_token + ",");
          call->reply.message(R"({"jsonrpc":"2.0","method":"notifications/progress","params":)" +
                              params + "}");
          self->pump(call, proc, out, count, std::move(done));
        }));
  }

  std::string clip(const Bytes& b, bool& cut) const {
    if (b.size() <= options.max_output_bytes) return b;
    cut = true;
    return b.substr(0, options.max_output_bytes);
  }

  void exec_result(const std::shared_ptr<Call>& call, const ExecResult& r) {
    bool cut = false;
    const std::string out = clip(r.stdout_bytes, cut), err = clip(r.stderr_bytes, cut);
    JsonWriter s;
    s.begin_object();
    if (r.exit_code) {
      s.key("exit_code").value(*r.exit_code);
    } else {
      s.key("exit_code").null();
    }
    s.key("termination").value(to_string(r.termination));
    if (r.signal) s.key("signal").value(*r.signal);
    s.key("stdout").value(out).key("stderr").value(err);
    s.key("duration_ms")
        .value(static_cast<std::int64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(r.duration).count()));
    // run_code: the values it returned, the exception it raised, a context that lost its state.
    std::vector<std::string> images;  // MCP image content: what a model can look at
    std::string values;
    if (!r.results.empty()) {
      s.key("results").begin_array();
      for (const auto& v : r.results) {
        bool clipped = false;
        const std::string data = clip(v.data, clipped);
        cut = cut || clipped;
        s.begin_object().key("mime_type").value(v.mime_type).key("data").value(data).end_object();
        if (v.mime_type == "text/plain") values += data + "\n";
        if ((v.mime_type == "image/png" || v.mime_type == "image/jpeg") && !clipped) {
          JsonWriter img;
          img.begin_object().key("type").value("image").key("data").value(v.data);
          img.key("mimeType").value(v.mime_type).end_object();
          images.push_back(std::move(img).str());
        }
      }
      s.end_array();
    }
    if (r.error) {
      s.key("error").begin_object().key("name").value(r.error->name);
      s.key("value").value(r.error->value).key("traceback").value(r.error->traceback).end_object();
    }
    if (r.context_restarted) s.key("context_restarted").value(true);
    s.key("truncated").value(cut).end_object();
    std::string text = std::string(to_string(r.termination));
    if (r.exit_code) text += ", exit code " + std::to_string(*r.exit_code);
    if (r.error) text += ", " + r.error->name + ": " + r.error->value;
    if (r.context_restarted)
      text += "\n(the code context was restarted: variables from earlier calls are gone)";
    text += "\n--- stdout ---\n" + out + "\n--- stderr ---\n" + err;
    if (!values.empty()) text += "\n--- value ---\n" + values;
    if (cut) text += "\n(output cut at " + std::to_string(options.max_output_bytes) + " bytes)";
    answer(call, text, false, std::move(s).str(), images);
  }

  // A CallToolResult: the text for the model, the same facts as structured content.
  static void answer(const std::shared_ptr<Call>& call, const std::string& text, bool is_error,
                     const std::string& structured, const std::vector<std::string>& more = {}) {
    JsonWriter w;
    w.begin_object().key("content").begin_array().begin_object().key("type").value("text");
    w.key("text").value(text).end_object().end_array().key("isError").value(is_error);
    w.end_object();
    std::string result = std::move(w).str();
    // Further content items (images) after the text, already written as JSON objects.
    std::string items;
    for (const auto& m : more)
      items += "," + m;
    if (!items.empty()) result.insert(result.find("],\"isError\""), items);
    result.insert(result.size() - 1, R"(,"structuredContent":)" + structured);
    finish(call, std::move(result));
  }

  static void tool_result(const std::shared_ptr<Call>& call, const std::string& text,
                          const std::string& structured) {
    answer(call, text, false, structured);
  }

  void invalid_arguments(const std::shared_ptr<Call>& call, const std::string& why) {
    JsonWriter s;
    s.begin_object().key("error").begin_object().key("code").value("invalid_arguments");
    s.key("message").value(why).end_object().end_object();
    answer(call, "Invalid arguments: " + why, true, std::move(s).str());
  }

  // A sandbox error is a tool error: the SBX code, what it means and how to fix it.
  void tool_error(const std::shared_ptr<Call>& call, std::error_code ec) {
    std::string code_id = "SBX_E????", name = ec.message(), summary = ec.message(), hint;
    if (ec.category() == sandbox_category()) {
      const ErrorInfo& info = error_info(static_cast<errc>(ec.value()));
      code_id = std::string(info.id);
      name = std::string(info.name);
      summary = std::string(info.message);
      hint = std::string(info.hint);
    }
    JsonWriter s;
    s.begin_object().key("error").begin_object().key("code").value(code_id);
    s.key("name").value(name).key("message").value(summary).key("hint").value(hint);
    s.end_object().end_object();
    answer(call, code_id + " " + name + ": " + summary + (hint.empty() ? "" : " Hint: " + hint),
           true, std::move(s).str());
  }
};

Server::Server(asio::any_io_executor executor, ServerOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

Server::~Server() = default;

void Server::handle(std::string_view text, const Transport& transport, Reply reply) {
  impl_->handle(text, transport, std::move(reply));
}

void Server::close(std::function<void()> done) {
  for (auto& [id, signal] : impl_->running)
    signal->emit(asio::cancellation_type::terminal);
  if (impl_->creating) {
    impl_->on_closed = std::move(done);
    return;
  }
  if (!impl_->sandbox) return done();
  auto impl = impl_;
  impl->sandbox->async_kill([impl, done = std::move(done)](std::error_code) {
    impl->sandbox.reset();
    done();
  });
}

}  // namespace sandboxio::mcp
