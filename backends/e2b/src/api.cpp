// e2b:// pure helpers: reply parsers and small codecs the operation families share.
#include <cstdio>

#include "machine.hpp"

namespace sandboxio::e2b::detail {
namespace {

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

}  // namespace

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

std::string connect_code(const Reply& r) {
  if (auto doc = json::parse(r.body); doc) {
    if (auto e = connect::error_of(doc.value())) return e->code;
  }
  return {};
}

// The message envd sends most, {"event":{"data":{"stdout":"<base64>"}}}, in its compact form:
// the base64 text without a JSON parse. Any other spelling (spaces, more fields) returns
// nothing and takes the full parse.
std::optional<std::pair<std::string_view, std::string_view>> compact_data(std::string_view m) {
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

FileInfo file_info(const json::Value& e) {
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

Result<CodeContext> context_of(const Reply& r) {
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

ManagedSandbox managed_of(const json::Value& s) {
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
  return m;
}

bool version_at_least(const std::string& v, int major, int minor) {
  int a = 0, b = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

}  // namespace sandboxio::e2b::detail
