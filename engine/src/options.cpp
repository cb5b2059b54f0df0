// Validation of the value types: CreateOptions, Env, NetworkPolicy, Resources.
#include <algorithm>
#include <cmath>

#include "sandboxio/codec/proxy.hpp"
#include "sandboxio/create_options.hpp"
#include "sandboxio/dsn.hpp"
#include "text.hpp"

namespace sandboxio {
namespace {

Problem invalid(std::string detail, std::string hint = {}) {
  return Problem{errc::InvalidCreateOptions, std::move(detail), std::move(hint)};
}

bool is_host_label_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/// An entry's host and port: "pypi.org" (any port) or "pypi.org:443".
std::pair<std::string_view, std::optional<std::string_view>> split_entry(std::string_view entry) {
  const auto colon = entry.rfind(':');
  if (colon == std::string_view::npos) return {entry, std::nullopt};
  return {entry.substr(0, colon), entry.substr(colon + 1)};
}

bool valid_port(std::string_view port) {
  if (port.empty() || port.size() > 5 || port[0] == '0') return false;
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value <= 65535;
}

bool host_matches(std::string_view pattern, std::string_view host) {
  if (pattern.rfind("*.", 0) == 0) {
    // A wildcard names sub-domains; an address is never one.
    if (proxy::is_ip_literal(host)) return false;
    const std::string_view suffix = pattern.substr(1);  // ".example.com"
    return host.size() > suffix.size() &&
           detail::iequals(host.substr(host.size() - suffix.size()), suffix);
  }
  return detail::iequals(host, pattern);
}

bool valid_host_pattern(std::string_view entry) {
  auto [host, port] = split_entry(entry);
  if (port && !valid_port(*port)) return false;
  if (host.rfind("*.", 0) == 0) host.remove_prefix(2);
  if (host.empty() || host.size() > 253) return false;
  std::size_t label = 0;
  for (char c : host) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!is_host_label_char(c) || ++label > 63) return false;
  }
  return label != 0;
}

}  // namespace

bool NetworkPolicy::allows(std::string_view host) const noexcept {
  for (const std::string& entry : allow) {
    if (host_matches(split_entry(entry).first, host)) return true;
  }
  return false;
}

bool NetworkPolicy::allows(std::string_view host, std::uint16_t port) const noexcept {
  for (const std::string& entry : allow) {
    const auto [pattern, entry_port] = split_entry(entry);
    if (entry_port && *entry_port != std::to_string(port)) continue;
    if (host_matches(pattern, host)) return true;
  }
  return false;
}

std::string NetworkPolicy::describe() const {
  if (learn) return "learn";
  if (allow.empty()) return "deny-all";
  std::string out = "allow: ";
  for (std::size_t i = 0; i < allow.size(); ++i) {
    if (i != 0) out += ", ";
    out += allow[i];
  }
  return out;
}

Result<void> NetworkPolicy::validate() const {
  if (learn && !allow.empty()) {
    return invalid("learning mode denies everything: it takes no allow list",
                   "Learn first (NetworkPolicy::learning(), sandboxio run --learn), then create "
                   "with the allow list it printed.");
  }
  for (const auto& [name, address] : pinned) {
    if (!valid_host_pattern(name) || name.find('*') != std::string::npos ||
        name.find(':') != std::string::npos) {
      return invalid("\"" + name + "\" in the pinned names is not a host name",
                     "Pin exact host names, without a port: {\"canary.test\", \"127.0.0.1\"}.");
    }
    if (address.empty() || address.size() > 64 ||
        address.find_first_not_of("0123456789abcdefABCDEF.:") != std::string::npos) {
      return invalid("\"" + address + "\", pinned for " + name + ", is not an IP address",
                     "Pin a name to an IPv4 or IPv6 address (127.0.0.1, ::1).");
    }
  }
  for (const std::string& host : allow) {
    if (!valid_host_pattern(host)) {
      return invalid("\"" + host + "\" in the network allow list is not a host name",
                     "Allow exact host names (pypi.org), one leading wildcard (*.example.com) or "
                     "IPv4 addresses, each with an optional port (pypi.org:443).");
    }
  }
  return {};
}

Result<void> Resources::validate() const {
  if (cpus && (!std::isfinite(*cpus) || *cpus <= 0.0 || *cpus > 1024.0)) {
    return invalid("cpus must be a positive number of CPUs (at most 1024)");
  }
  if (memory_bytes && *memory_bytes < (6ULL << 20)) {
    return invalid("memory below 6 MiB cannot start a process", "Ask for at least 6 MiB.");
  }
  if (pids && *pids < 8)
    return invalid("a pids limit below 8 cannot run a shell", "Ask for at least 8.");
  if (disk_bytes && *disk_bytes == 0) return invalid("a disk limit of 0 bytes");
  return {};
}

void Env::put(std::string name, std::string value, bool secret) {
  auto it = std::find_if(vars_.begin(), vars_.end(), [&](const Var& v) { return v.name == name; });
  if (it != vars_.end()) {
    it->value = std::move(value);
    it->secret = it->secret || secret;  // once secret, always secret
  } else {
    vars_.push_back(Var{std::move(name), std::move(value), secret});
  }
}

const Env::Var* Env::find(std::string_view name) const noexcept {
  for (const Var& v : vars_) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::vector<std::string> Env::secret_values() const {
  std::vector<std::string> out;
  for (const Var& v : vars_) {
    if (v.secret && !v.value.empty()) out.push_back(v.value);
  }
  return out;
}

Result<void> Env::validate() const {
  for (const Var& v : vars_) {
    bool ok = !v.name.empty() && v.name.size() <= 256 && !(v.name[0] >= '0' && v.name[0] <= '9');
    for (char c : v.name) {
      ok = ok &&
           ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!ok) {
      return invalid("environment variable name \"" + v.name + "\" is not valid",
                     "Use names of letters, digits and '_', not starting with a digit.");
    }
    if (v.value.find('\0') != std::string::npos) {
      return invalid("environment variable " + v.name + " holds a NUL byte",
                     "Environment values cannot hold NUL bytes; pass binary data as a file.");
    }
  }
  return {};
}

Result<void> CreateOptions::validate() const {
  if (lifetime < std::chrono::seconds(1) || lifetime > kMaxLifetime) {
    return invalid("lifetime " + std::to_string(lifetime.count()) + " s is outside 1 s .. 24 h");
  }
  if (create_timeout <= std::chrono::milliseconds(0)) {
    return invalid("create_timeout must be positive");
  }
  if (!workdir.empty() && (workdir[0] != '/' || workdir.find('\0') != std::string::npos)) {
    return invalid("workdir \"" + workdir + "\" is not an absolute path");
  }
  for (const auto& [key, value] : labels) {
    if (key.rfind("io.sandboxio.", 0) == 0) {
      return invalid("label \"" + key + "\" uses the reserved prefix io.sandboxio.",
                     "Choose another prefix; sandboxio sets io.sandboxio.* itself.");
    }
    if (key.empty() || !is_valid_utf8(key) || !is_valid_utf8(value) ||
        key.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      return invalid("labels must be non-empty UTF-8 text without NUL bytes");
    }
  }
  if (auto r = env.validate(); !r) return r;
  if (auto r = network.validate(); !r) return r;
  if (auto r = resources.validate(); !r) return r;
  if (trace) {
    // The ids as a traceparent carries them (trace id may be left for the driver to draw).
    const std::string probe_trace =
        trace->trace_id.empty() ? std::string(31, '0') + "1" : trace->trace_id;
    const std::string probe_parent =
        trace->parent_span_id.empty() ? std::string(15, '0') + "1" : trace->parent_span_id;
    if (auto r = TraceContext::from_traceparent("00-" + probe_trace + "-" + probe_parent + "-01");
        !r)
      return r.problem();
  }
  if (audit.sink_timeout <= std::chrono::milliseconds(0)) {
    return invalid("audit.sink_timeout must be positive");
  }
  if (limits.stream_buffer < 4096 || limits.max_pending_operations == 0 ||
      limits.operation_timeout <= std::chrono::milliseconds(0)) {
    return invalid(
        "limits: stream_buffer must be at least 4096 bytes, max_pending_operations "
        "at least 1 and operation_timeout positive");
  }
  return {};
}

}  // namespace sandboxio
