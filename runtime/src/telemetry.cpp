// The OTLP exporter (sandboxio/telemetry.hpp): its settings from the OTEL_* variables, the
// bounded batching queue and its thread, one HTTP(S) POST per batch, the process's exporter,
// and the trace a sandbox gets. Records become spans in otlp_spans.cpp.
#include "sandboxio/telemetry.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "sandboxio/codec/http.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/tls.hpp"
#include "span_attributes.hpp"

namespace sandboxio::telemetry {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kExitFlush{3000};  // the most a flush at exit waits

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

Problem bad_env(const std::string& name, const std::string& value, const std::string& why,
                std::string hint) {
  return Problem{errc::InvalidEnvironment, name + " is \"" + value.substr(0, 80) + "\": " + why,
                 std::move(hint)};
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return std::string(s);
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
    i += 2;
  }
  return out;
}

// A whole number from the environment, `fallback` when unset; InvalidEnvironment (saying `what`
// it should be) outside [low, high].
Result<long long> number_env(const char* name, long long fallback, long long low, long long high,
                             const std::string& what, std::string hint) {
  const std::string raw = env(name);
  if (raw.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(raw.c_str(), &end, 10);
  if (errno != 0 || end == raw.c_str() || *end != '\0' || v < low || v > high)
    return bad_env(name, raw, what, std::move(hint));
  return v;
}

Result<std::chrono::milliseconds> millis_env(const char* name, std::chrono::milliseconds fallback) {
  auto v = number_env(
      name, fallback.count(), 0, 3'600'000, "not a number of milliseconds (0 to 3600000)",
      "Give a whole number of milliseconds, as the OpenTelemetry specification asks.");
  if (!v) return v.problem();
  return std::chrono::milliseconds(v.value());
}

Result<std::size_t> count_env(const char* name, std::size_t fallback) {
  auto v = number_env(name, static_cast<long long>(fallback), 1, 1'000'000,
                      "not a count from 1 to 1000000", "Give a positive whole number.");
  if (!v) return v.problem();
  return static_cast<std::size_t>(v.value());
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  if (std::all_of(out.begin(), out.end(), [](char c) { return c == '0'; })) out.back() = '1';
  return out;
}

std::uint64_t random_u64() {
  std::uint64_t v = 0;
  while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}

}  // namespace

Result<KeyValues> parse_key_values(std::string_view text, std::string_view variable,
                                   bool secret_values) {
  KeyValues out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (trim(item).empty()) continue;
    const std::size_t eq = item.find('=');
    const std::string key = trim(item.substr(0, eq));
    // Header values are credentials: a message names the key only.
    const std::string shown =
        secret_values ? (key.empty() ? std::string("(a pair)") : key + "=***") : std::string(item);
    if (eq == std::string_view::npos || key.empty())
      return bad_env(std::string(variable), shown, "a pair is not key=value",
                     "Write comma-separated key=value pairs, values percent-encoded.");
    auto value = percent_decode(trim(item.substr(eq + 1)));
    if (!value)
      return bad_env(std::string(variable), shown, "a bad percent-encoding",
                     "Encode ',', '=' and '%' in values as %2C, %3D and %25.");
    out.emplace_back(key, std::move(*value));
  }
  return out;
}

namespace {

// "http(s)://host[:port]/path": the traces URL. `append_path`: OTEL_EXPORTER_OTLP_ENDPOINT,
// to which "v1/traces" is appended.
Result<std::string> traces_url(const std::string& name, const std::string& raw, bool append_path) {
  const std::string l = lower(raw);
  if (l.rfind("http://", 0) != 0 && l.rfind("https://", 0) != 0)
    return bad_env(name, raw, "not an http:// or https:// URL",
                   "Give the collector's address, for example http://localhost:4318.");
  std::string url = raw;
  const std::size_t path = url.find('/', url.find("://") + 3);
  if (append_path) {
    if (path == std::string::npos) url += "/";
    if (url.back() != '/') url += "/";
    url += "v1/traces";
  } else if (path == std::string::npos) {
    url += "/";
  }
  return url;
}

struct Url {
  bool tls = false;
  std::string host{};
  std::uint16_t port = 0;
  std::string target{};
};

Result<Url> split_url(const std::string& url) {
  Url u;
  u.tls = lower(url).rfind("https://", 0) == 0;
  const std::size_t start = url.find("://") + 3;
  const std::size_t slash = url.find('/', start);
  std::string authority = url.substr(start, slash - start);
  u.target = slash == std::string::npos ? "/" : url.substr(slash);
  u.port = u.tls ? 443 : 80;
  if (!authority.empty() && authority[0] == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string::npos)
      return Problem{errc::InvalidEnvironment, "bad IPv6 host in " + url, {}};
    u.host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority[0] == ':')
      authority = authority.substr(1);
    else
      authority.clear();
  } else {
    const std::size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    authority = colon == std::string::npos ? std::string() : authority.substr(colon + 1);
  }
  if (!authority.empty()) {
    char* end = nullptr;
    const long p = std::strtol(authority.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535)
      return Problem{errc::InvalidEnvironment, "bad port in " + url, {}};
    u.port = static_cast<std::uint16_t>(p);
  }
  if (u.host.empty()) return Problem{errc::InvalidEnvironment, "no host in " + url, {}};
  return u;
}

std::string default_service_name() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string name = "sandboxio";
  if (n > 0) {
    name.assign(exe, static_cast<std::size_t>(n));
    name = name.substr(name.rfind('/') + 1);
  }
  return "unknown_service:" + name;
}

}  // namespace

Result<std::optional<OtlpSettings>> settings_from_env() {
  if (lower(trim(env("OTEL_SDK_DISABLED"))) == "true") return std::optional<OtlpSettings>{};
  const std::string exporter = lower(trim(env("OTEL_TRACES_EXPORTER")));
  const std::string traces_endpoint = trim(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
  const std::string endpoint = trim(env("OTEL_EXPORTER_OTLP_ENDPOINT"));
  if (exporter == "none") return std::optional<OtlpSettings>{};
  if (!exporter.empty() && exporter != "otlp")
    return bad_env("OTEL_TRACES_EXPORTER", exporter, "sandboxio exports only otlp",
                   "Set OTEL_TRACES_EXPORTER=otlp, or none to turn traces off.");
  if (exporter.empty() && traces_endpoint.empty() && endpoint.empty())
    return std::optional<OtlpSettings>{};

  std::string protocol = lower(trim(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")));
  if (protocol.empty()) protocol = lower(trim(env("OTEL_EXPORTER_OTLP_PROTOCOL")));
  if (!protocol.empty() && protocol != "http/protobuf")
    return bad_env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol, "sandboxio speaks only http/protobuf",
                   "Unset it, or point sandboxio at the collector's OTLP/HTTP port (4318).");

  OtlpSettings s;
  if (!traces_endpoint.empty()) {
    auto url = traces_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces_endpoint, false);
    if (!url) return url.problem();
    s.endpoint = url.value();
  } else if (!endpoint.empty()) {
    auto url = traces_url("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, true);
    if (!url) return url.problem();
    s.endpoint = url.value();
  }
  if (auto u = split_url(s.endpoint); !u) {
    const char* name = !traces_endpoint.empty() ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
                                                : "OTEL_EXPORTER_OTLP_ENDPOINT";
    return bad_env(name, s.endpoint, u.problem().detail,
                   "Give the collector's address, for example http://localhost:4318.");
  }

  for (const char* name : {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
    auto kv = parse_key_values(env(name), name, true);
    if (!kv) return kv.problem();
    for (auto& header : kv.value()) {
      const std::string name_lower = lower(header.first);
      std::erase_if(s.headers, [&](const auto& h) { return lower(h.first) == name_lower; });
      s.headers.push_back(std::move(header));
    }
  }
  for (const auto& [k, v] : s.headers) {
    if (k.find_first_of("\r\n:") != std::string::npos ||
        v.find_first_of("\r\n") != std::string::npos)
      return bad_env("OTEL_EXPORTER_OTLP_HEADERS", k, "a header name or value holds CR, LF or ':'",
                     "Give plain header names and single-line values.");
  }
  auto timeout = millis_env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", std::chrono::milliseconds(0));
  if (!timeout) return timeout.problem();
  if (timeout.value().count() == 0) timeout = millis_env("OTEL_EXPORTER_OTLP_TIMEOUT", s.timeout);
  if (!timeout) return timeout.problem();
  if (timeout.value().count() > 0) s.timeout = timeout.value();
  auto delay = millis_env("OTEL_BSP_SCHEDULE_DELAY", s.schedule_delay);
  if (!delay) return delay.problem();
  s.schedule_delay = delay.value();
  auto queue = count_env("OTEL_BSP_MAX_QUEUE_SIZE", s.max_queue);
  if (!queue) return queue.problem();
  s.max_queue = queue.value();
  auto batch = count_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", s.max_batch);
  if (!batch) return batch.problem();
  s.max_batch = std::min(batch.value(), s.max_queue);
  s.ca_file = trim(env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"));
  if (s.ca_file.empty()) s.ca_file = trim(env("OTEL_EXPORTER_OTLP_CERTIFICATE"));

  // Resource: ours, then OTEL_RESOURCE_ATTRIBUTES over them, then OTEL_SERVICE_NAME over all.
  KeyValues resource = {{std::string(attr::kServiceName), default_service_name()},
                        {std::string(attr::kSdkName), "sandboxio"},
                        {std::string(attr::kSdkLanguage), "cpp"},
                        {std::string(attr::kSdkVersion), std::string(kSdkVersion)}};
  auto extra = parse_key_values(env("OTEL_RESOURCE_ATTRIBUTES"), "OTEL_RESOURCE_ATTRIBUTES");
  if (!extra) return extra.problem();
  const std::string service = trim(env("OTEL_SERVICE_NAME"));
  if (!service.empty()) extra.value().emplace_back(std::string(attr::kServiceName), service);
  for (auto& attribute : extra.value()) {
    std::erase_if(resource, [&](const auto& kv) { return kv.first == attribute.first; });
    resource.push_back(std::move(attribute));
  }
  s.resource = std::move(resource);
  return std::optional<OtlpSettings>(std::move(s));
}

// ---- the exporter ----

namespace {

// One POST of `body` to `url`, within `deadline`. The reply's status decides.
Result<void> post(const OtlpSettings& settings, const Url& url, const std::string& body,
                  Clock::time_point deadline) {
  auto fail = [&](const std::string& why) {
    return Problem{errc::ConnectionFailed, "exporting spans to " + settings.endpoint + ": " + why,
                   "Check that the collector listens there (OTEL_EXPORTER_OTLP_ENDPOINT)."};
  };
  auto left_ms = [&] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<std::int64_t>(0, left.count()));
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  if (const int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(std::string("cannot resolve ") + url.host + ": " + ::gai_strerror(rc));
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, left_ms()) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0) {
      why = err != 0 ? std::strerror(err) : "connect timed out";
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return fail(why);

  http::Request req{"POST", url.target, {{"Content-Type", "application/x-protobuf"}}, {}};
  for (const auto& [k, v] : settings.headers)
    req.headers.push_back({k, v});
  auto head = http::write_request_head(req, url.host + ":" + port, body.size());
  if (!head) {
    ::close(fd);
    return head.problem();
  }
  std::unique_ptr<TlsChannel> tls;
  if (url.tls) {
    Endpoint ep;
    ep.kind = Endpoint::Kind::Tcp;
    ep.address = url.host;
    ep.port = url.port;
    ep.tls = true;
    ep.ca_file = settings.ca_file;
    auto channel = TlsChannel::client(ep);
    if (!channel) {
      ::close(fd);
      return channel.problem();
    }
    tls = std::move(channel).value();
    tls->write(head.value() + body);
  }
  std::string out = tls ? tls->take_cipher() : head.value() + body;
  http::ResponseParser parser;
  std::string result_error;
  char buf[16384];
  while (!parser.complete() && result_error.empty()) {
    if (tls && out.empty()) out = tls->take_cipher();
    pollfd p{fd, static_cast<short>(POLLIN | (out.empty() ? 0 : POLLOUT)), 0};
    const int ms = left_ms();
    if (ms == 0 || ::poll(&p, 1, ms) <= 0) {
      result_error = "no reply within " + format_duration(settings.timeout);
      break;
    }
    if ((p.revents & POLLOUT) != 0 && !out.empty()) {
      const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) result_error = std::strerror(errno);
      if (n > 0) out.erase(0, static_cast<std::size_t>(n));
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) {
        parser.feed_eof();
        if (!parser.complete()) result_error = "the collector closed the connection";
        break;
      }
      if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) result_error = std::strerror(errno);
        continue;
      }
      std::string plain(buf, static_cast<std::size_t>(n));
      if (tls) {
        if (auto r = tls->feed(plain); !r) {
          ::close(fd);
          return r.problem();
        }
        plain = tls->take_plain();
      }
      std::string_view rest(plain);
      while (!rest.empty() && !parser.complete() && !parser.error()) {
        const std::size_t used = parser.feed(rest);
        (void)parser.take_body();
        rest.remove_prefix(used);
        if (used == 0) break;
      }
      if (parser.error()) result_error = parser.error()->detail;
    }
  }
  ::close(fd);
  if (!result_error.empty()) return fail(result_error);
  if (parser.status() < 200 || parser.status() > 299)
    return fail("the collector answered HTTP " + std::to_string(parser.status()));
  return {};
}

}  // namespace

Result<void> probe(const OtlpSettings& settings) {
  auto url = split_url(settings.endpoint);
  if (!url) return url.problem();
  return post(settings, url.value(), encode_export({}, settings.resource),
              Clock::now() + settings.timeout);
}

struct OtlpExporter::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<OperationRecord> queue;
  bool stop = false;
  bool exited = false;
  std::uint64_t flush_wanted = 0;  // raised by flush(); the worker exports at once
  std::uint64_t in_flight = 0;     // spans being exported now
  ExporterStats stats;
};

OtlpExporter::OtlpExporter(OtlpSettings settings)
    : shared_(std::make_shared<Shared>()), settings_(std::move(settings)) {
  tls_global_init();  // OpenSSL's exit handler then runs after the export thread is idle
  if (settings_.schedule_delay < std::chrono::milliseconds(10))
    settings_.schedule_delay = std::chrono::milliseconds(10);
  std::thread([state = shared_, s = settings_] {
    auto url = split_url(s.endpoint);
    std::unique_lock lock(state->mu);
    std::uint64_t served = 0;  // the flush() calls answered so far
    // After a failed export the next waits (1 s, doubling to 30 s; a flush tries at once), so
    // a dead collector costs nothing but the queue's bound: spans past it are dropped.
    std::chrono::milliseconds backoff{0};
    Clock::time_point retry_at{};
    while (!state->stop) {
      auto asked = [&] { return state->stop || state->flush_wanted != served; };
      if (backoff.count() > 0) {
        state->cv.wait_until(lock, retry_at, asked);
      } else {
        state->cv.wait_for(lock, s.schedule_delay,
                           [&] { return asked() || state->queue.size() >= s.max_batch; });
      }
      const bool flushing = state->flush_wanted != served;
      served = state->flush_wanted;  // all queued by now goes before the next wait
      if (!flushing && backoff.count() > 0 && Clock::now() < retry_at) continue;
      std::deque<OperationRecord> taken;
      taken.swap(state->queue);  // the writers wait for a swap, never for an export
      state->in_flight = taken.size();
      lock.unlock();
      std::uint64_t sent_spans = 0, lost = 0;
      std::optional<Problem> failure;
      while (!taken.empty()) {
        const std::size_t n = std::min(taken.size(), s.max_batch);
        if (failure) {  // the collector failed this round: the rest waits for no one
          lost += n;
        } else {
          std::vector<OperationRecord> batch(
              std::make_move_iterator(taken.begin()),
              std::make_move_iterator(taken.begin() + static_cast<std::ptrdiff_t>(n)));
          Result<void> sent =
              url ? post(s, url.value(), encode_export(batch, s.resource), Clock::now() + s.timeout)
                  : Result<void>(url.problem());
          if (sent) {
            sent_spans += n;
          } else {
            lost += n;
            failure = sent.problem();
          }
        }
        taken.erase(taken.begin(), taken.begin() + static_cast<std::ptrdiff_t>(n));
      }
      lock.lock();
      state->in_flight = 0;
      state->stats.exported += sent_spans;
      state->stats.dropped += lost;
      if (failure) {
        ++state->stats.failed_exports;
        state->stats.last_error = failure->detail;
        backoff = std::clamp(backoff * 2, std::chrono::milliseconds(1000),
                             std::chrono::milliseconds(30'000));
        retry_at = Clock::now() + backoff;
      } else if (sent_spans > 0) {
        backoff = std::chrono::milliseconds(0);
      }
      state->cv.notify_all();
    }
    state->exited = true;
    state->cv.notify_all();
  }).detach();
}

OtlpExporter::~OtlpExporter() {
  (void)flush(std::min(settings_.timeout, kExitFlush));
  std::lock_guard lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
}

Result<void> OtlpExporter::write(const OperationRecord& record) {
  // The caller's traceparent said not to record this trace (W3C sampled flag 0): no span.
  if (record.trace.traced() && !record.trace.sampled) return {};
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->queue.size() >= settings_.max_queue) {
      ++shared_->stats.dropped;
      return {};  // never an audit failure: telemetry must not fail an operation
    }
    shared_->queue.push_back(record);
    if (!shared_->queue.back().trace.traced()) {
      // A sandbox nobody traced (this exporter given as its sink): a root span of its own.
      shared_->queue.back().trace.assign(random_hex(16), random_hex(8), {});
    }
    if (shared_->queue.size() < settings_.max_batch) return {};
  }
  shared_->cv.notify_all();
  return {};
}

bool OtlpExporter::flush(std::chrono::milliseconds within) {
  std::unique_lock lock(shared_->mu);
  ++shared_->flush_wanted;
  shared_->cv.notify_all();
  return shared_->cv.wait_for(lock, within, [&] {
    return (shared_->queue.empty() && shared_->in_flight == 0) || shared_->exited;
  });
}

ExporterStats OtlpExporter::stats() const {
  std::lock_guard lock(shared_->mu);
  return shared_->stats;
}

namespace {
struct ProcessExporter {
  std::mutex mu;
  std::shared_ptr<OtlpExporter> exporter;
  std::optional<Problem> problem;
};
// Process-lifetime: never destroyed, so that sandboxes ending during static destruction still
// find it; what it holds is flushed at exit.
ProcessExporter& process() {
  static ProcessExporter* p = [] {
    auto* made = new ProcessExporter;
    auto settings = settings_from_env();
    if (!settings) {
      made->problem = settings.problem();
    } else if (settings.value()) {
      made->exporter = std::make_shared<OtlpExporter>(std::move(*settings.value()));
    }
    std::atexit([] {
      std::shared_ptr<OtlpExporter> e;
      {
        std::lock_guard lock(process().mu);
        e = process().exporter;
      }
      if (e) (void)e->flush(std::min(e->settings().timeout, kExitFlush));
    });
    return made;
  }();
  return *p;
}
}  // namespace

std::shared_ptr<OtlpExporter> process_exporter(std::optional<Problem>* problem) {
  ProcessExporter& p = process();
  std::lock_guard lock(p.mu);
  if (problem != nullptr) *problem = p.problem;
  return p.exporter;
}

void install_process_exporter(std::shared_ptr<OtlpExporter> exporter) {
  ProcessExporter& p = process();
  std::lock_guard lock(p.mu);
  p.exporter = std::move(exporter);
  p.problem.reset();
}

std::optional<Problem> prepare_trace(CreateOptions& options, bool exporting) {
  std::optional<Problem> warning;
  if (!options.trace) {
    const std::string header = trim(env("TRACEPARENT"));
    auto parsed =
        header.empty() ? Result<TraceContext>(Problem{}) : TraceContext::from_traceparent(header);
    if (!header.empty() && !parsed) {
      warning =
          Problem{errc::InvalidEnvironment,
                  "TRACEPARENT is ignored: " + parsed.problem().detail + " (a new trace starts)",
                  parsed.problem().hint};
    }
    if (!header.empty() && parsed) {
      options.trace = parsed.value();
    } else if (exporting) {
      options.trace = TraceContext{};
    } else {
      return warning;
    }
  }
  if (options.trace->trace_id.empty()) options.trace->trace_id = random_hex(16);
  if (options.trace->span_seed == 0) options.trace->span_seed = random_u64();
  return warning;
}

std::shared_ptr<OtlpExporter> attach(CreateOptions& options,
                                     const std::function<void(const Problem&)>& warn) {
  std::optional<Problem> problem;
  auto exporter = process_exporter(&problem);
  if (problem) {
    Problem p = *problem;
    p.detail = "OpenTelemetry export is off: " + p.detail;
    warn(p);
  }
  const bool exporting =
      exporter != nullptr || dynamic_cast<OtlpExporter*>(options.audit.sink.get()) != nullptr;
  if (auto w = prepare_trace(options, exporting)) warn(*w);
  return exporter;
}

}  // namespace sandboxio::telemetry
