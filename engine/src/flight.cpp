// The flight recorder's encoder, reader and replay (sandboxio/flight.hpp). The trace is
// protocol buffers written with codec/protobuf.hpp; docs/reference/trace-format.md is its
// schema, and the field numbers below are the ones it names.
#include "sandboxio/flight.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "sandboxio/codec/protobuf.hpp"

namespace sandboxio::flight {
namespace {

using protobuf::Field;
using protobuf::Reader;
using protobuf::Writer;

std::int64_t ns(Instant t) {
  return t.time_since_epoch().count();
}
Instant instant(std::uint64_t v) {
  return Instant(std::chrono::nanoseconds(static_cast<std::int64_t>(v)));
}

// ---- secrets ----

/// Replaces, in text the trace keeps, each secret value by its placeholder.
class Scrubber {
 public:
  void add(std::string_view name, std::string_view value) {
    if (!value.empty()) pairs_.emplace_back(std::string(value), secret_placeholder(name));
    std::sort(pairs_.begin(), pairs_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  void add_env(const Env& env) {
    for (const Env::Var& v : env.vars())
      if (v.secret) add(v.name, v.value);
  }
  [[nodiscard]] std::string scrub(std::string_view text) const {
    if (pairs_.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
      bool hit = false;
      for (const auto& [value, placeholder] : pairs_) {
        if (text.compare(i, value.size(), value) == 0) {
          out += placeholder;
          i += value.size();
          hit = true;
          break;
        }
      }
      if (!hit) out.push_back(text[i++]);
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> pairs_{};
};

// ---- encoding of the values a call carries ----

void put_env(Writer& w, std::uint32_t field, const Env& env, const Scrubber& s) {
  for (const Env::Var& v : env.vars()) {
    Writer var;
    var.string(1, v.name);
    var.string(2, v.secret ? secret_placeholder(v.name) : s.scrub(v.value));
    var.boolean(3, v.secret);
    w.message(field, var);
  }
}
void put_map(Writer& w, std::uint32_t field, const std::map<std::string, std::string>& m) {
  for (const auto& [k, v] : m) {
    Writer kv;
    kv.string(1, k);
    kv.string(2, v);
    w.message(field, kv);
  }
}
void put_ms(Writer& w, std::uint32_t field, std::chrono::milliseconds d) {
  w.int64(field, d.count());
}

Writer options_message(const CreateOptions& o, const Scrubber& s) {
  Writer w;
  w.int64(1, o.lifetime.count());
  put_ms(w, 2, o.create_timeout);
  put_env(w, 3, o.env, s);
  w.string(4, o.workdir);
  put_map(w, 5, o.labels);
  Writer net;
  for (const std::string& host : o.network.allow)
    net.string(1, host);
  net.boolean(2, o.network.learn);
  put_map(net, 3, o.network.pinned);
  w.message(6, net);
  Writer res;
  if (o.resources.cpus) res.float64(1, *o.resources.cpus), res.boolean(5, true);
  if (o.resources.memory_bytes) res.varint_present(2, *o.resources.memory_bytes);
  if (o.resources.pids) res.varint_present(3, *o.resources.pids);
  if (o.resources.disk_bytes) res.varint_present(4, *o.resources.disk_bytes);
  w.message(7, res);
  if (o.require_isolation) w.varint_present(8, o.require_isolation->value());
  Writer audit;
  audit.boolean(1, o.audit.capture_commands);
  audit.varint(2, static_cast<std::uint64_t>(o.audit.on_failure));
  put_ms(audit, 3, o.audit.sink_timeout);
  w.message(9, audit);
  w.boolean(10, o.outlive_owner);
  if (o.teardown_grace) w.varint_present(11, static_cast<std::uint64_t>(o.teardown_grace->count()));
  Writer limits;
  limits.varint_present(1, o.limits.stream_buffer);
  limits.varint_present(2, o.limits.max_pending_operations);
  put_ms(limits, 3, o.limits.operation_timeout);
  w.message(12, limits);
  if (o.trace) {
    Writer t;
    t.string(1, o.trace->trace_id);
    t.string(2, o.trace->parent_span_id);
    t.boolean(3, o.trace->sampled);
    t.fixed64(4, o.trace->span_seed);
    w.message(13, t);
  }
  return w;
}

Writer command_message(const Command& c, const Scrubber& s) {
  Writer w;
  for (const std::string& arg : c.argv)
    w.string_present(1, s.scrub(arg));
  put_env(w, 2, c.env, s);
  w.string(3, c.workdir);
  put_ms(w, 4, c.timeout);
  w.string(5, c.stdin_data);
  w.varint_present(6, c.output_limit);
  return w;
}

Writer code_message(const CodeRequest& r, const Scrubber& s) {
  Writer w;
  w.string(1, s.scrub(r.code));
  w.string(2, r.language);
  if (r.context) w.string_present(3, *r.context);
  put_ms(w, 4, r.timeout);
  put_env(w, 5, r.env, s);
  return w;
}

Writer problem_message(const Problem& p) {
  Writer w;
  w.varint(1, static_cast<std::uint64_t>(p.code));
  w.string(2, p.detail);
  w.string(3, p.hint);
  return w;
}

// ---- decoding ----

Problem invalid(std::size_t at, std::string what) {
  return Problem{errc::TraceInvalid, "at byte " + std::to_string(at) + ": " + std::move(what), {}};
}

/// Reads a nested message's fields into `f` by number; false on malformed bytes.
template <class F>
bool each(std::string_view bytes, F&& f) {
  Reader r(bytes);
  Field field;
  while (r.next(field))
    if (!f(field)) return false;
  return !r.failed();
}

bool get_env(std::string_view bytes, Env& env) {
  std::string name, value;
  bool secret = false;
  if (!each(bytes, [&](const Field& f) {
        if (f.number == 1) name = f.bytes;
        if (f.number == 2) value = f.bytes;
        if (f.number == 3) secret = f.value != 0;
        return true;
      }))
    return false;
  if (secret)
    env.set_secret(std::move(name), std::move(value));
  else
    env.set(std::move(name), std::move(value));
  return true;
}
bool get_kv(std::string_view bytes, std::map<std::string, std::string>& m) {
  std::string k, v;
  if (!each(bytes, [&](const Field& f) {
        if (f.number == 1) k = f.bytes;
        if (f.number == 2) v = f.bytes;
        return true;
      }))
    return false;
  m[std::move(k)] = std::move(v);
  return true;
}
std::chrono::milliseconds ms(std::uint64_t v) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(v));
}

bool get_options(std::string_view bytes, CreateOptions& o) {
  // Proto3: an absent field is its zero, not the C++ default.
  o.lifetime = std::chrono::seconds(0);
  o.create_timeout = std::chrono::milliseconds(0);
  o.audit.sink_timeout = std::chrono::milliseconds(0);
  o.limits.operation_timeout = std::chrono::milliseconds(0);
  return each(bytes, [&](const Field& f) {
    switch (f.number) {
      case 1:
        o.lifetime = std::chrono::seconds(static_cast<std::int64_t>(f.value));
        return true;
      case 2:
        o.create_timeout = ms(f.value);
        return true;
      case 3:
        return get_env(f.bytes, o.env);
      case 4:
        o.workdir = f.bytes;
        return true;
      case 5:
        return get_kv(f.bytes, o.labels);
      case 6:
        return each(f.bytes, [&](const Field& n) {
          if (n.number == 1) o.network.allow.emplace_back(n.bytes);
          if (n.number == 2) o.network.learn = n.value != 0;
          if (n.number == 3) return get_kv(n.bytes, o.network.pinned);
          return true;
        });
      case 7:
        return each(f.bytes, [&](const Field& n) {
          if (n.number == 1) {
            double d = 0;
            std::memcpy(&d, &n.value, sizeof d);
            o.resources.cpus = d;
          }
          if (n.number == 5 && !o.resources.cpus) o.resources.cpus = 0.0;
          if (n.number == 2) o.resources.memory_bytes = n.value;
          if (n.number == 3) o.resources.pids = static_cast<std::uint32_t>(n.value);
          if (n.number == 4) o.resources.disk_bytes = n.value;
          return true;
        });
      case 8:
        if (f.value > IsolationTier::Microvm) return false;
        o.require_isolation = IsolationTier(static_cast<IsolationTier::Value>(f.value));
        return true;
      case 9:
        return each(f.bytes, [&](const Field& n) {
          if (n.number == 1) o.audit.capture_commands = n.value != 0;
          if (n.number == 2)
            o.audit.on_failure = n.value == 1 ? AuditFailurePolicy::Fail : AuditFailurePolicy::Warn;
          if (n.number == 3) o.audit.sink_timeout = ms(n.value);
          return true;
        });
      case 10:
        o.outlive_owner = f.value != 0;
        return true;
      case 11:
        o.teardown_grace = ms(f.value);
        return true;
      case 12:
        return each(f.bytes, [&](const Field& n) {
          if (n.number == 1) o.limits.stream_buffer = n.value;
          if (n.number == 2) o.limits.max_pending_operations = n.value;
          if (n.number == 3) o.limits.operation_timeout = ms(n.value);
          return true;
        });
      case 13: {
        TraceContext t;
        t.sampled = false;
        if (!each(f.bytes, [&](const Field& n) {
              if (n.number == 1) t.trace_id = n.bytes;
              if (n.number == 2) t.parent_span_id = n.bytes;
              if (n.number == 3) t.sampled = n.value != 0;
              if (n.number == 4) t.span_seed = n.value;
              return true;
            }))
          return false;
        o.trace = std::move(t);
        return true;
      }
      default:
        return true;
    }
  });
}

bool get_command(std::string_view bytes, Command& c) {
  c.timeout = std::chrono::milliseconds(0);
  c.output_limit = 0;
  return each(bytes, [&](const Field& f) {
    switch (f.number) {
      case 1:
        c.argv.emplace_back(f.bytes);
        return true;
      case 2:
        return get_env(f.bytes, c.env);
      case 3:
        c.workdir = f.bytes;
        return true;
      case 4:
        c.timeout = ms(f.value);
        return true;
      case 5:
        c.stdin_data = f.bytes;
        return true;
      case 6:
        c.output_limit = f.value;
        return true;
      default:
        return true;
    }
  });
}

bool get_code(std::string_view bytes, CodeRequest& r) {
  r.timeout = std::chrono::milliseconds(0);
  r.language.clear();
  return each(bytes, [&](const Field& f) {
    switch (f.number) {
      case 1:
        r.code = f.bytes;
        return true;
      case 2:
        r.language = f.bytes;
        return true;
      case 3:
        r.context = std::string(f.bytes);
        return true;
      case 4:
        r.timeout = ms(f.value);
        return true;
      case 5:
        return get_env(f.bytes, r.env);
      default:
        return true;
    }
  });
}

// ---- digests ----

/// A 64-bit digest at memory speed (output is digested as it streams): little-endian 8-byte
/// words mixed in with a multiply and a shift, long strings in four independent lanes that are
/// folded in at the end. Each step is a bijection of the state for a given word and of the
/// word for a given state, so one changed word always changes the digest. Lengths are mixed in
/// too: different splits of the same bytes into fields digest differently.
class Digest {
 public:
  void u64(std::uint64_t v) { h_ = mix(h_, v); }
  void str(std::string_view s) {
    u64(s.size());
    const char* p = s.data();
    std::size_t n = s.size();
    if (n >= 32) {
      std::uint64_t a = h_, b = h_ ^ 0x243F6A8885A308D3ULL, c = h_ ^ 0x13198A2E03707344ULL,
                    d = h_ ^ 0xA4093822299F31D0ULL;
      for (; n >= 32; p += 32, n -= 32) {
        a = mix(a, load(p));
        b = mix(b, load(p + 8));
        c = mix(c, load(p + 16));
        d = mix(d, load(p + 24));
      }
      h_ = a;
      u64(b);
      u64(c);
      u64(d);
    }
    for (; n >= 8; p += 8, n -= 8)
      u64(load(p));
    if (n > 0) {
      std::uint64_t w = 0;
      for (std::size_t k = 0; k < n; ++k)
        w |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[k])) << (8 * k);
      u64(w);
    }
  }
  [[nodiscard]] std::uint64_t value() const { return h_; }

 private:
  static std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
  }
  static std::uint64_t load(const char* p) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, sizeof w);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
    return w;
  }
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

void digest_problem(Digest& d, const Problem& p) {
  d.u64(static_cast<std::uint64_t>(p.code));
  d.str(p.detail);
  d.str(p.hint);
}
void digest_opt(Digest& d, const std::optional<int>& v) {
  d.u64(v ? 1 : 0);
  d.u64(static_cast<std::uint64_t>(static_cast<std::int64_t>(v.value_or(0))));
}

void digest_exec(Digest& d, const ExecResult& r) {
  digest_opt(d, r.exit_code);
  d.str(r.stdout_bytes);
  d.str(r.stderr_bytes);
  d.u64(static_cast<std::uint64_t>(r.duration.count()));
  d.u64(static_cast<std::uint64_t>(r.termination));
  digest_opt(d, r.signal);
  d.u64(r.streamed);
  d.u64(r.results.size());
  for (const RichOutput& o : r.results) {
    d.str(o.mime_type);
    d.str(o.data);
  }
  d.u64(r.error.has_value());
  if (r.error) {
    d.str(r.error->name);
    d.str(r.error->value);
    d.str(r.error->traceback);
  }
  d.u64(r.context_restarted);
  d.u64(r.bytes_in);
  d.u64(r.bytes_out);
  d.str(r.backend);
}

void digest_completion(Digest& d, const Completion& c) {
  d.u64(c.index());
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, SandboxInfo>) {
          d.str(v.backend);
          d.str(v.id);
          d.str(v.tier.name());
          d.u64(v.capabilities.bits());
          d.str(v.network.describe());
          d.u64(static_cast<std::uint64_t>(v.state));
          d.u64(static_cast<std::uint64_t>(v.lifetime.count()));
          d.str(v.agent);
        } else if constexpr (std::is_same_v<V, ExecResult>) {
          digest_exec(d, v);
        } else if constexpr (std::is_same_v<V, Bytes>) {
          d.str(v);
        } else if constexpr (std::is_same_v<V, std::vector<FileInfo>>) {
          d.u64(v.size());
          for (const FileInfo& f : v) {
            d.str(f.path);
            d.str(f.name);
            d.u64(static_cast<std::uint64_t>(f.type));
            d.u64(f.size);
            d.u64(f.mode);
            d.u64(static_cast<std::uint64_t>(f.mtime_unix.value_or(-1)));
            d.str(f.link_target);
          }
        } else if constexpr (std::is_same_v<V, CodeContext>) {
          d.str(v.id);
          d.str(v.language);
        } else if constexpr (std::is_same_v<V, std::vector<ManagedSandbox>>) {
          d.u64(v.size());
          for (const ManagedSandbox& m : v) {
            d.str(m.backend);
            d.str(m.id);
            d.str(m.owner);
            d.str(m.session);
            d.u64(static_cast<std::uint64_t>(m.created_unix));
            d.u64(static_cast<std::uint64_t>(m.lifetime.count()));
            d.u64(static_cast<std::uint64_t>(m.state));
            d.u64(m.labels.size());
            for (const auto& [k, val] : m.labels) {
              d.str(k);
              d.str(val);
            }
          }
        }
      },
      c);
}

}  // namespace

std::string secret_placeholder(std::string_view name) {
  return "[secret:" + std::string(name) + "]";
}

bool secret_name(std::string_view name) noexcept {
  std::string upper(name);
  for (char& c : upper)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (std::string_view end : {"API_KEY", "TOKEN", "SECRET", "PASSWORD"})
    if (upper.size() >= end.size() &&
        upper.compare(upper.size() - end.size(), end.size(), end) == 0)
      return true;
  return false;
}

std::string_view to_string(Call call) noexcept {
  switch (call) {
    case Call::Create:
      return "create";
    case Call::Connect:
      return "connect";
    case Call::Info:
      return "info";
    case Call::Run:
      return "run";
    case Call::Stream:
      return "stream";
    case Call::RunCode:
      return "run_code";
    case Call::CreateContext:
      return "create_context";
    case Call::WriteFile:
      return "write_file";
    case Call::ReadFile:
      return "read_file";
    case Call::ListFiles:
      return "list_files";
    case Call::RemoveFile:
      return "remove_file";
    case Call::Kill:
      return "kill";
    case Call::ListManaged:
      return "list_managed";
    case Call::RemoveManaged:
      return "remove_managed";
    case Call::Cancel:
      return "cancel";
    case Call::Release:
      return "release";
  }
  return "unknown";
}

std::uint64_t digest(const Event& event) {
  Digest d;
  d.u64(event.index());
  std::visit(
      [&](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, event::Output>) {
          d.u64(e.op);
          d.u64(static_cast<std::uint64_t>(e.chunk.stream));
          d.str(e.chunk.data);
          d.u64(e.chunk.offset);
        } else if constexpr (std::is_same_v<E, event::Done>) {
          d.u64(e.op);
          digest_completion(d, e.value);
        } else if constexpr (std::is_same_v<E, event::Failed>) {
          d.u64(e.op);
          digest_problem(d, e.problem);
        } else if constexpr (std::is_same_v<E, event::Cancelled>) {
          d.u64(e.op);
          d.u64(e.possible_orphan);
        } else if constexpr (std::is_same_v<E, event::Record>) {
          d.str(to_json_line(e.record));
          d.u64(static_cast<std::uint64_t>(ns(e.started)));
        } else if constexpr (std::is_same_v<E, event::Warning>) {
          digest_problem(d, e.problem);
        }
      },
      event);
  return d.value();
}

// ---- Recorder ----

class Recorder::Impl {
 public:
  Impl(std::shared_ptr<TraceSink> sink, std::uint64_t max_bytes, RecorderStats& stats)
      : sink_(std::move(sink)), max_(max_bytes), stats_(stats) {}

  void raw(std::string_view bytes) {
    if (stopped_) return;
    if (!sink_->write(bytes)) {
      stopped_ = true;
      stats_.truncated = true;
      return;
    }
    stats_.trace_bytes += bytes.size();
  }
  /// Writes one entry, after the output counts of the calls before it.
  void entry(Kind kind, const Writer& body) {
    flush_outputs();
    put(kind, body);
  }
  void put(Kind kind, const Writer& body) {
    if (stopped_) return;
    Writer w;
    w.message(static_cast<std::uint32_t>(kind), body);
    if (stats_.trace_bytes + w.view().size() > max_) return truncate();
    raw(w.view());
  }
  /// The bound is reached: a Truncated entry ends the trace (it may pass the bound by its few
  /// bytes), and nothing more is written.
  void truncate() {
    Writer t;
    t.varint_present(1, stats_.trace_bytes);
    Writer tw;
    tw.message(static_cast<std::uint32_t>(Kind::Truncated), t);
    raw(tw.view());
    stopped_ = true;
    stats_.truncated = true;
  }
  /// A Bytes entry, its data written straight from the caller's buffer (no copy here).
  void put_bytes(const Writer& head, std::string_view data) {
    if (stopped_) return;
    Writer data_prefix;
    data_prefix.length_prefix(4, data.size());
    const std::size_t body = head.view().size() + data_prefix.view().size() + data.size();
    Writer frame;
    frame.length_prefix(static_cast<std::uint32_t>(Kind::Bytes), body);
    if (stats_.trace_bytes + frame.view().size() + body > max_) return truncate();
    for (std::string_view piece : {std::string_view(frame.view()), std::string_view(head.view()),
                                   std::string_view(data_prefix.view()), data})
      raw(piece);
  }
  void checkpoint() {
    if (!stopped_) sink_->checkpoint();
  }
  void close() { sink_->close(); }
  void flush_outputs() {
    if (requests_ > 0) {
      Writer w;
      w.varint(1, requests_);
      requests_ = 0;
      put(Kind::Requests, w);
    }
    if (events_ > 0) {
      Writer w;
      w.varint(1, events_);
      w.fixed64(2, events_digest_.value());
      events_ = 0;
      events_digest_ = Digest{};
      put(Kind::Events, w);
    }
  }
  // Runs of requests and of events alternate in the trace as the driver polled them.
  void request() {
    if (events_ > 0) flush_outputs();
    ++requests_;
  }
  void event(const Event& e) {
    if (requests_ > 0) flush_outputs();
    ++events_;
    events_digest_.u64(digest(e));
  }

  /// The bytes an offer on `conn` repeats from the last one's untaken tail.
  std::size_t kept(ConnId conn, std::string_view data) {
    auto it = tails_.find(conn);
    if (it == tails_.end() || it->second.empty()) return 0;
    const std::string& tail = it->second;
    return data.size() >= tail.size() && data.compare(0, tail.size(), tail) == 0 ? tail.size() : 0;
  }
  void taken(ConnId conn, std::string_view data, std::size_t used) {
    if (used >= data.size())
      tails_.erase(conn);
    else
      tails_[conn] = std::string(data.substr(used));
  }
  void forget(ConnId conn) { tails_.erase(conn); }

  Scrubber scrubber{};
  bool extension_noted = false;

 private:
  std::shared_ptr<TraceSink> sink_;
  std::uint64_t max_;
  RecorderStats& stats_;
  bool stopped_ = false;
  std::uint64_t requests_ = 0;
  std::uint64_t events_ = 0;
  Digest events_digest_{};
  std::unordered_map<ConnId, std::string> tails_{};
};

namespace {
Writer at(ConnId conn, Instant now) {
  Writer w;
  w.varint(1, conn);
  w.int64(2, ns(now));
  return w;
}
Writer submit(Call call, Instant now) {
  Writer w;
  w.varint(1, static_cast<std::uint64_t>(call));
  w.int64(2, ns(now));
  return w;
}
}  // namespace

Recorder::Recorder(std::unique_ptr<Machine> inner, const Header& header,
                   std::shared_ptr<TraceSink> sink, std::uint64_t max_bytes)
    : ForwardingMachine(std::move(inner)),
      impl_(std::make_unique<Impl>(std::move(sink), max_bytes, stats_)) {
  for (const auto& [key, value] : header.ambient)
    if (key.starts_with("env:") && secret_name(key.substr(4)) &&
        value != secret_placeholder(key.substr(4)))
      impl_->scrubber.add(key.substr(4), value);
  impl_->raw(kMagic);
  Writer h;
  h.string(1, header.dsn);
  for (const auto& [key, value] : header.ambient) {
    Writer kv;
    kv.string(1, key);
    const bool secret = key.starts_with("env:") && secret_name(key.substr(4));
    kv.string(2, secret && !value.empty() ? secret_placeholder(key.substr(4)) : value);
    h.message(2, kv);
  }
  h.string(3, header.version);
  h.int64(4, header.recorded_unix_ns);
  impl_->put(Kind::Header, h);
}

Recorder::~Recorder() {
  impl_->flush_outputs();
  Writer w;
  w.varint(1, stats_.bytes_in);
  w.varint(2, stats_.bytes_out);
  impl_->put(Kind::End, w);
  impl_->close();
}

void Recorder::handle_connected(ConnId c, Instant now) {
  impl_->entry(Kind::Connected, at(c, now));
  ForwardingMachine::handle_connected(c, now);
}
void Recorder::handle_reused(ConnId c, Instant now) {
  impl_->entry(Kind::Reused, at(c, now));
  ForwardingMachine::handle_reused(c, now);
}
void Recorder::handle_connect_failed(ConnId c, Problem p, Instant now) {
  Writer w = at(c, now);
  w.message(3, problem_message(p));
  impl_->entry(Kind::ConnectFailed, w);
  impl_->forget(c);
  ForwardingMachine::handle_connect_failed(c, std::move(p), now);
}
std::size_t Recorder::handle_bytes(ConnId c, std::string_view d, Instant now) {
  // Written before the machine sees the bytes, so that a crash in it leaves them in the trace;
  // how many it took follows when that is not all of them.
  const std::size_t kept = impl_->kept(c, d);
  Writer w = at(c, now);
  w.varint(3, kept);
  impl_->flush_outputs();
  impl_->put_bytes(w, d.substr(kept));
  const std::size_t used = ForwardingMachine::handle_bytes(c, d, now);
  stats_.bytes_in += d.size() - kept;
  if (used < d.size()) {
    Writer t;
    t.varint_present(1, used);
    impl_->put(Kind::Taken, t);
  }
  impl_->taken(c, d, used);
  return used;
}

void Recorder::handle_eof(ConnId c, Instant now) {
  impl_->entry(Kind::Eof, at(c, now));
  impl_->forget(c);
  ForwardingMachine::handle_eof(c, now);
}
void Recorder::handle_timeout(Instant now) {
  impl_->entry(Kind::Timeout, at(0, now));
  ForwardingMachine::handle_timeout(now);
}
void Recorder::handle_consumed(OpId op, std::size_t n, Instant now) {
  Writer w;
  w.varint(1, op);
  w.int64(2, ns(now));
  w.varint(3, n);
  impl_->entry(Kind::Consumed, w);
  ForwardingMachine::handle_consumed(op, n, now);
}
void Recorder::handle_wall_clock(Instant at_, std::chrono::system_clock::time_point wall) {
  Writer w;
  w.int64(2, ns(at_));
  w.int64(3, std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count());
  impl_->entry(Kind::WallClock, w);
  ForwardingMachine::handle_wall_clock(at_, wall);
}
void Recorder::handle_owners_gone(std::vector<std::string> gone, Instant now) {
  Writer w = at(0, now);
  for (const std::string& g : gone)
    w.string_present(3, g);
  impl_->entry(Kind::OwnersGone, w);
  ForwardingMachine::handle_owners_gone(std::move(gone), now);
}
void Recorder::handle_driver_features(DriverFeatures features) {
  Writer w;
  w.boolean(1, features.pass_sockets);
  impl_->entry(Kind::DriverFeatures, w);
  ForwardingMachine::handle_driver_features(features);
}

// Each submit is written before the machine sees it (a crash in it leaves it in the trace).
#define SBX_RECORD_SUBMIT(call, body, forward) \
  do {                                         \
    Writer w = submit(call, now);              \
    body;                                      \
    impl_->entry(Kind::Submit, w);             \
    impl_->checkpoint();                       \
    return forward;                            \
  } while (0)

OpId Recorder::submit_create(const CreateOptions& o, Instant now) {
  impl_->scrubber.add_env(o.env);
  SBX_RECORD_SUBMIT(Call::Create, w.message(4, options_message(o, impl_->scrubber)),
                    ForwardingMachine::submit_create(o, now));
}
OpId Recorder::submit_connect(std::string id, const CreateOptions& o, Instant now) {
  impl_->scrubber.add_env(o.env);
  SBX_RECORD_SUBMIT(Call::Connect,
                    (w.message(4, options_message(o, impl_->scrubber)), w.string(5, id)),
                    ForwardingMachine::submit_connect(std::move(id), o, now));
}
OpId Recorder::submit_info(Instant now) {
  SBX_RECORD_SUBMIT(Call::Info, (void)0, ForwardingMachine::submit_info(now));
}
OpId Recorder::submit_run(Command c, Instant now) {
  impl_->scrubber.add_env(c.env);
  SBX_RECORD_SUBMIT(Call::Run, w.message(6, command_message(c, impl_->scrubber)),
                    ForwardingMachine::submit_run(std::move(c), now));
}
OpId Recorder::submit_stream(Command c, Instant now) {
  impl_->scrubber.add_env(c.env);
  SBX_RECORD_SUBMIT(Call::Stream, w.message(6, command_message(c, impl_->scrubber)),
                    ForwardingMachine::submit_stream(std::move(c), now));
}
OpId Recorder::submit_run_code(CodeRequest r, Instant now) {
  impl_->scrubber.add_env(r.env);
  SBX_RECORD_SUBMIT(Call::RunCode, w.message(7, code_message(r, impl_->scrubber)),
                    ForwardingMachine::submit_run_code(std::move(r), now));
}
OpId Recorder::submit_create_context(std::string l, Instant now) {
  SBX_RECORD_SUBMIT(Call::CreateContext, w.string(5, l),
                    ForwardingMachine::submit_create_context(std::move(l), now));
}
OpId Recorder::submit_write_file(std::string p, Bytes d, Instant now) {
  SBX_RECORD_SUBMIT(Call::WriteFile, (w.string(5, p), w.string(8, d)),
                    ForwardingMachine::submit_write_file(std::move(p), std::move(d), now));
}
OpId Recorder::submit_read_file(std::string p, Instant now) {
  SBX_RECORD_SUBMIT(Call::ReadFile, w.string(5, p),
                    ForwardingMachine::submit_read_file(std::move(p), now));
}
OpId Recorder::submit_list_files(std::string p, Instant now) {
  SBX_RECORD_SUBMIT(Call::ListFiles, w.string(5, p),
                    ForwardingMachine::submit_list_files(std::move(p), now));
}
OpId Recorder::submit_remove_file(std::string p, Instant now) {
  SBX_RECORD_SUBMIT(Call::RemoveFile, w.string(5, p),
                    ForwardingMachine::submit_remove_file(std::move(p), now));
}
OpId Recorder::submit_kill(Instant now) {
  SBX_RECORD_SUBMIT(Call::Kill, (void)0, ForwardingMachine::submit_kill(now));
}
OpId Recorder::submit_list_managed(std::map<std::string, std::string> l, Instant now) {
  SBX_RECORD_SUBMIT(Call::ListManaged, put_map(w, 9, l),
                    ForwardingMachine::submit_list_managed(std::move(l), now));
}
OpId Recorder::submit_remove_managed(std::string id, Instant now) {
  SBX_RECORD_SUBMIT(Call::RemoveManaged, w.string(5, id),
                    ForwardingMachine::submit_remove_managed(std::move(id), now));
}
std::optional<OpId> Recorder::submit_release(Instant now) {
  SBX_RECORD_SUBMIT(Call::Release, (void)0, ForwardingMachine::submit_release(now));
}
#undef SBX_RECORD_SUBMIT

void Recorder::submit_cancel(OpId op, Instant now) {
  Writer w = submit(Call::Cancel, now);
  w.varint(3, op);
  impl_->entry(Kind::Submit, w);
  ForwardingMachine::submit_cancel(op, now);
}

std::optional<Request> Recorder::poll_request() {
  auto r = ForwardingMachine::poll_request();
  if (!r) return r;
  if (const auto* send = std::get_if<request::Send>(&*r)) stats_.bytes_out += send->data.size();
  if (const auto* pass = std::get_if<request::Pass>(&*r)) stats_.bytes_out += pass->data.size();
  impl_->request();
  return r;
}

std::optional<Event> Recorder::poll_event() {
  auto e = ForwardingMachine::poll_event();
  if (e) impl_->event(*e);
  return e;
}

Machine& Recorder::backend() noexcept {
  if (!impl_->extension_noted) {
    impl_->extension_noted = true;
    impl_->entry(Kind::Extension, Writer{});
  }
  return ForwardingMachine::backend();
}

// ---- TraceReader ----

namespace {

Result<Header> read_header(std::string_view in, std::size_t& pos) {
  const std::string_view magic = kMagic.substr(0, kMagic.size() - 1);
  if (in.substr(0, magic.size()) != magic)
    return invalid(0, "this is not a sandboxio trace (it does not start with SBXTRACE)");
  if (in.size() < kMagic.size() || in[kMagic.size() - 1] != kMagic.back())
    return invalid(magic.size(), "the trace's format is not one this sandboxio reads");
  pos = kMagic.size();
  Reader r(in.substr(pos));
  Field f;
  if (!r.next(f) || f.number != static_cast<std::uint32_t>(Kind::Header) || f.wire_type != 2)
    return invalid(pos, "the trace does not begin with its header");
  Header h;
  const bool ok = each(f.bytes, [&](const Field& n) {
    if (n.number == 1) h.dsn = n.bytes;
    if (n.number == 2) return get_kv(n.bytes, h.ambient);
    if (n.number == 3) h.version = n.bytes;
    if (n.number == 4) h.recorded_unix_ns = static_cast<std::int64_t>(n.value);
    return true;
  });
  if (!ok) return invalid(pos, "the trace's header is malformed");
  pos += r.position();
  return h;
}

bool read_problem(std::string_view bytes, Problem& p) {
  return each(bytes, [&](const Field& f) {
    if (f.number == 1) {
      if (f.value < 1000 || f.value > 1999) return false;
      p.code = static_cast<errc>(f.value);
    }
    if (f.number == 2) p.detail = f.bytes;
    if (f.number == 3) p.hint = f.bytes;
    return true;
  });
}

bool read_submit(std::string_view bytes, Entry& e) {
  bool call_seen = false;
  const bool ok = each(bytes, [&](const Field& f) {
    switch (f.number) {
      case 1:
        if (f.value < 1 || f.value > static_cast<std::uint64_t>(Call::Release)) return false;
        e.call = static_cast<Call>(f.value);
        call_seen = true;
        return true;
      case 2:
        e.now = instant(f.value);
        return true;
      case 3:
        e.op = f.value;
        return true;
      case 4:
        return get_options(f.bytes, e.options);
      case 5:
        e.text = f.bytes;
        return true;
      case 6:
        return get_command(f.bytes, e.command);
      case 7:
        return get_code(f.bytes, e.code);
      case 8:
        e.file = f.bytes;
        return true;
      case 9:
        return get_kv(f.bytes, e.labels);
      default:
        return true;
    }
  });
  return ok && call_seen;
}

// The fields of the entries other than Submit: what field N means for each kind.
bool read_plain(std::string_view bytes, Entry& e) {
  return each(bytes, [&](const Field& n) {
    switch (n.number) {
      case 1:
        switch (e.kind) {
          case Kind::Consumed:
            e.op = n.value;
            break;
          case Kind::Requests:
          case Kind::Events:
          case Kind::Taken:
            e.count = n.value;
            break;
          case Kind::DriverFeatures:
            e.features.pass_sockets = n.value != 0;
            break;
          case Kind::End:
            e.stats.bytes_in = n.value;
            break;
          case Kind::Truncated:
            e.stats.trace_bytes = n.value;
            break;
          default:
            if (n.value > 0xFFFFFFFFu) return false;
            e.conn = static_cast<ConnId>(n.value);
        }
        return true;
      case 2:
        if (e.kind == Kind::Events) e.digest = n.value;
        if (e.kind == Kind::End) e.stats.bytes_out = n.value;
        e.now = instant(n.value);
        return true;
      case 3:
        if (e.kind == Kind::Bytes) e.kept = n.value;
        if (e.kind == Kind::Consumed) e.count = n.value;
        if (e.kind == Kind::ConnectFailed) return read_problem(n.bytes, e.problem);
        if (e.kind == Kind::OwnersGone) e.names.emplace_back(n.bytes);
        if (e.kind == Kind::WallClock)
          e.wall = std::chrono::system_clock::time_point(
              std::chrono::duration_cast<std::chrono::system_clock::duration>(
                  std::chrono::nanoseconds(static_cast<std::int64_t>(n.value))));
        return true;
      case 4:
        e.data = n.bytes;
        return true;
      case 5:
        e.count = n.value;
        return true;
      default:
        return true;
    }
  });
}

}  // namespace

TraceReader::TraceReader(std::string_view bytes) : in_(bytes), header_(read_header(bytes, pos_)) {}

Result<std::optional<Entry>> TraceReader::next() {
  if (!header_) return header_.problem();
  if (pos_ >= in_.size()) return std::optional<Entry>{};
  const std::size_t at = pos_;
  Reader r(in_.substr(pos_));
  Field f;
  if (!r.next(f) || f.wire_type != 2)
    return invalid(at, "an entry is cut short or malformed (was the trace copied whole?)");
  pos_ += r.position();
  if (f.number < static_cast<std::uint32_t>(Kind::Connected) ||
      f.number > static_cast<std::uint32_t>(Kind::Taken))
    return invalid(at, "entry kind " + std::to_string(f.number) +
                           " is not one this sandboxio knows; replay with the version that "
                           "recorded it");
  Entry e;
  e.kind = static_cast<Kind>(f.number);
  const bool ok = e.kind == Kind::Submit ? read_submit(f.bytes, e) : read_plain(f.bytes, e);
  if (!ok) return invalid(at, "an entry of kind " + std::to_string(f.number) + " is malformed");
  return std::optional<Entry>{std::move(e)};
}

// ---- replay ----

namespace {

Problem diverged(std::uint64_t step, const std::string& kind, std::string what) {
  return Problem{errc::ReplayDiverged,
                 "at entry " + std::to_string(step) + " (" + kind + "): " + std::move(what),
                 {}};
}
Problem diverged(std::uint64_t step, Kind kind, std::string what) {
  return diverged(step, "kind " + std::to_string(static_cast<int>(kind)), std::move(what));
}
Problem diverged(std::uint64_t step, const Entry& e, std::string what) {
  if (e.kind == Kind::Submit)
    return diverged(step, std::string(to_string(e.call)), std::move(what));
  return diverged(step, e.kind, std::move(what));
}

/// Gives the machine a recorded submit; the op it returned (Cancel: the op cancelled).
std::optional<OpId> resubmit(Machine& m, const Entry& e) {
  switch (e.call) {
    case Call::Create:
      return m.submit_create(e.options, e.now);
    case Call::Connect:
      return m.submit_connect(e.text, e.options, e.now);
    case Call::Info:
      return m.submit_info(e.now);
    case Call::Run:
      return m.submit_run(e.command, e.now);
    case Call::Stream:
      return m.submit_stream(e.command, e.now);
    case Call::RunCode:
      return m.submit_run_code(e.code, e.now);
    case Call::CreateContext:
      return m.submit_create_context(e.text, e.now);
    case Call::WriteFile:
      return m.submit_write_file(e.text, e.file, e.now);
    case Call::ReadFile:
      return m.submit_read_file(e.text, e.now);
    case Call::ListFiles:
      return m.submit_list_files(e.text, e.now);
    case Call::RemoveFile:
      return m.submit_remove_file(e.text, e.now);
    case Call::Kill:
      return m.submit_kill(e.now);
    case Call::ListManaged:
      return m.submit_list_managed(e.labels, e.now);
    case Call::RemoveManaged:
      return m.submit_remove_managed(e.text, e.now);
    case Call::Cancel:
      m.submit_cancel(e.op, e.now);
      return e.op;
    case Call::Release:
      return m.submit_release(e.now);
  }
  return std::nullopt;
}

}  // namespace

namespace {

/// What the replay holds the trace to, beyond the recording's answers: the driver contract
/// (sandboxio/machine.hpp), which a hand-made or damaged trace could otherwise break.
struct Contract {
  std::set<ConnId> pending{};  // opened by the machine, not yet answered
  std::set<ConnId> open{};
  std::set<OpId> submitted{};                       // the operations the machine opened
  std::unordered_map<ConnId, std::string> tails{};  // what each connection's last offer left
  std::optional<Instant> now{};

  void saw(const Request& r) {
    if (const auto* o = std::get_if<request::Open>(&r)) pending.insert(o->conn);
    if (const auto* c = std::get_if<request::Close>(&r)) forget(c->conn);
    if (const auto* p = std::get_if<request::Pass>(&r)) forget(p->conn);
  }
  void forget(ConnId c) {
    pending.erase(c);
    open.erase(c);
    tails.erase(c);
  }
  /// Why giving `e` to the machine would break the contract; empty when it would not.
  [[nodiscard]] std::string breach(const Entry& e) const {
    if (e.kind != Kind::DriverFeatures && now && e.now < *now) return "time runs backwards";
    switch (e.kind) {
      case Kind::Connected:
      case Kind::Reused:
        if (pending.count(e.conn) == 0)
          return "connection " + std::to_string(e.conn) + " was not being opened";
        break;
      case Kind::ConnectFailed:
        if (pending.count(e.conn) == 0 && open.count(e.conn) == 0)
          return "connection " + std::to_string(e.conn) + " is not the machine's";
        break;
      case Kind::Bytes:
      case Kind::Eof:
        if (open.count(e.conn) == 0) return "connection " + std::to_string(e.conn) + " is not open";
        break;
      case Kind::Consumed:
        // Any amount: the machine harnesses fuzz consumers that take more than they were given.
        if (submitted.count(e.op) == 0)
          return "it consumes output of operation " + std::to_string(e.op) +
                 ", which was never submitted";
        break;
      default:
        break;
    }
    return {};
  }
};

Problem refused(std::uint64_t step, const Entry& e, const std::string& why) {
  return Problem{errc::TraceInvalid,
                 "entry " + std::to_string(step) + " (kind " +
                     std::to_string(static_cast<int>(e.kind)) +
                     ") breaks the driver contract: " + why,
                 {}};
}

}  // namespace

Result<ReplaySummary> replay(Machine& m, TraceReader& trace, ReplayObserver* observer) {
  if (!trace.header()) return trace.header().problem();
  ReplaySummary summary;
  Contract contract;
  std::string offer;
  Instant last{};
  std::optional<std::pair<Instant, std::chrono::system_clock::time_point>> anchor;
  // After a Bytes entry: how many the machine took of how many, checked against the entry
  // that follows (Taken when the recording took fewer than all).
  struct Take {
    std::uint64_t step;
    ConnId conn;
    std::size_t used, offered;
  };
  std::optional<Take> take;
  std::uint64_t step = 1;  // the header is entry 1
  while (true) {
    auto next = trace.next();
    if (!next) return next.problem();
    if (!next.value()) break;
    const Entry& e = *next.value();
    ++step;
    if (take) {
      const std::uint64_t recorded = e.kind == Kind::Taken ? e.count : take->offered;
      if (take->used != recorded)
        return diverged(take->step, Kind::Bytes,
                        "the machine took " + std::to_string(take->used) + " of " +
                            std::to_string(take->offered) + " bytes on connection " +
                            std::to_string(take->conn) + "; the recording took " +
                            std::to_string(recorded));
      const ConnId conn = take->conn;
      if (take->used >= take->offered)
        contract.tails.erase(conn);
      else
        contract.tails[conn].assign(offer, take->used);
      take.reset();
      if (e.kind == Kind::Taken) continue;
    }
    switch (e.kind) {
      case Kind::Taken:
        return invalid(0, "entry " + std::to_string(step) + " (Taken) follows no Bytes entry");
      case Kind::Requests:
        for (std::uint64_t i = 0; i < e.count; ++i) {
          auto r = m.poll_request();
          if (!r)
            return diverged(step, e,
                            "the machine asked for " + std::to_string(i) +
                                " requests; the recording " + std::to_string(e.count));
          contract.saw(*r);
          ++summary.requests;
        }
        continue;
      case Kind::Events: {
        Digest d;
        for (std::uint64_t i = 0; i < e.count; ++i) {
          auto ev = m.poll_event();
          if (!ev)
            return diverged(step, e,
                            "the machine gave " + std::to_string(i) + " events; the recording " +
                                std::to_string(e.count));
          d.u64(digest(*ev));
          ++summary.events;
          if (observer) observer->event(*ev, last);
          if (const auto* rec = std::get_if<event::Record>(&*ev)) {
            ++summary.records;
            if (observer) {
              OperationRecord stamped = rec->record;
              if (anchor)
                stamped.started = anchor->second +
                                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                      rec->started - anchor->first);
              observer->record(stamped);
            }
          }
        }
        if (d.value() != e.digest)
          return diverged(step, e, "the machine's events differ from the recording's");
        continue;
      }
      case Kind::Truncated:
        summary.truncated = true;
        continue;
      case Kind::End:
        summary.complete = true;
        summary.recorded = e.stats;
        continue;
      case Kind::Extension:
        summary.extension = true;
        continue;
      default:
        break;
    }
    if (std::string why = contract.breach(e); !why.empty()) return refused(step, e, why);
    ++summary.inputs;
    if (e.kind != Kind::DriverFeatures) {
      last = e.now;
      contract.now = e.now;
    }
    if (observer) observer->input(e);
    switch (e.kind) {
      case Kind::Connected:
        contract.pending.erase(e.conn);
        contract.open.insert(e.conn);
        m.handle_connected(e.conn, e.now);
        break;
      case Kind::Reused:
        contract.pending.erase(e.conn);
        contract.open.insert(e.conn);
        m.handle_reused(e.conn, e.now);
        break;
      case Kind::ConnectFailed:
        contract.forget(e.conn);
        m.handle_connect_failed(e.conn, e.problem, e.now);
        break;
      case Kind::Bytes: {
        const std::string& tail = contract.tails[e.conn];
        if (e.kept > tail.size())
          return refused(
              step, e,
              "it repeats " + std::to_string(e.kept) + " bytes the last offer did not leave");
        offer.assign(tail, 0, static_cast<std::size_t>(e.kept));
        offer.append(e.data);
        const std::size_t used = m.handle_bytes(e.conn, offer, e.now);
        take = Take{step, e.conn, used, offer.size()};
        break;
      }
      case Kind::Eof:
        contract.forget(e.conn);
        m.handle_eof(e.conn, e.now);
        break;
      case Kind::Timeout:
        m.handle_timeout(e.now);
        break;
      case Kind::Consumed:
        m.handle_consumed(e.op, static_cast<std::size_t>(e.count), e.now);
        break;
      case Kind::WallClock:
        anchor.emplace(e.now, e.wall);
        m.handle_wall_clock(e.now, e.wall);
        break;
      case Kind::OwnersGone:
        m.handle_owners_gone(e.names, e.now);
        break;
      case Kind::DriverFeatures:
        m.handle_driver_features(e.features);
        break;
      case Kind::Submit: {
        const std::optional<OpId> op = resubmit(m, e);
        if (op) contract.submitted.insert(*op);
        if (observer) observer->submitted(e, op);
        break;
      }
      default:
        break;
    }
  }
  return summary;
}

}  // namespace sandboxio::flight
