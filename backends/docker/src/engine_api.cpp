// docker:// request builders and reply parsers: pure functions of their arguments, used by
// the machine's operation families (Engine API v1.41).
#include <algorithm>

#include "machine.hpp"
#include "sandboxio/codec/base64.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/codec/shell.hpp"

namespace sandboxio::docker::detail {

const std::string_view kListScript =
    R"sh(cd -- "$1" || exit 2; for f in * .[!.]* ..?*; do )sh"
    R"sh([ -e "$f" ] || [ -L "$f" ] || continue; )sh"
    R"sh(if [ -L "$f" ]; then t=l; elif [ -d "$f" ]; then t=d; else t=f; fi; )sh"
    R"sh(printf '%s/%s/' "$t" "$(wc -c < "$f" 2>/dev/null || echo 0)"; )sh"
    R"sh(printf '%s\0' "$f"; done)sh";

std::string agent_user(const Config& config) {
  // With the agent and a user that is not root, the agent stays root (no capabilities but
  // the three it needs to start and signal the user's processes) and runs every command as
  // the user: the user's processes cannot signal, trace or read it.
  const std::string& user = config.user;
  const bool root_user =
      user == "0" || user == "root" || user.starts_with("0:") || user.starts_with("root:");
  return config.agent && !user.empty() && !root_user ? user : std::string();
}

std::string create_body(const Config& config_, const CreateOptions& o, std::int64_t created_unix) {
  const bool lease = !o.outlive_owner;
  // With the agent, the attach stream is the owner's session; with outlive_owner the agent
  // outlives it, and later owners reach the agent through bridge sessions.
  const bool agent = config_.agent;
  const bool attach = lease || agent;
  const auto secs = std::max<std::int64_t>(1, o.lifetime.count());
  const std::string user = agent_user(config_);
  const bool agent_as_root = !user.empty();
  JsonWriter w;
  w.begin_object();
  w.key("Image").value(config_.image);
  if (agent) {
    // sandboxio-agent is the container's init: it serves its protocol on the attach stream,
    // ends the container when that stream closes (the owner lease; not with --outlive) and
    // at the lifetime.
    w.key("Cmd").begin_array().value("--lifetime").value(std::to_string(secs));
    if (agent_as_root) w.value("--user").value(user);
    if (!lease) w.value("--outlive");
    w.end_array();
    w.key("Entrypoint").begin_array().value(kAgentPath).end_array();
  } else {
    // The lifetime backstop lives inside the container: its main process ends at the
    // lifetime. With the owner lease, it also ends when the attached stdin closes.
    w.key("Cmd").begin_array().value("sh").value("-c");
    if (lease) {
      w.value("(sleep " + std::to_string(secs) + "; kill -TERM $$) & exec cat >/dev/null");
    } else {
      w.value("exec sleep " + std::to_string(secs));
    }
    w.end_array();
    w.key("Entrypoint").begin_array().end_array();
  }
  w.key("Env").begin_array();
  for (const auto& v : o.env.vars())
    w.value(v.name + "=" + v.value);
  w.end_array();
  if (!o.workdir.empty()) w.key("WorkingDir").value(o.workdir);
  if (!config_.user.empty() && !agent_as_root) w.key("User").value(config_.user);
  w.key("Tty").value(false);
  w.key("OpenStdin").value(attach);
  w.key("StdinOnce").value(attach);
  w.key("AttachStdin").value(attach);
  w.key("AttachStdout").value(agent);
  w.key("AttachStderr").value(agent);
  w.key("Labels").begin_object();
  for (const auto& [k, v] : o.labels)
    w.key(k).value(v);
  w.key(labels::kManaged).value("true");
  w.key(labels::kOwner).value(config_.owner);
  w.key(labels::kSession).value(config_.session);
  w.key(labels::kCreated).value(std::to_string(created_unix));
  w.key(labels::kLifetime).value(std::to_string(secs));
  w.key("io.sandboxio.lease").value(lease ? "owner" : "none");
  if (agent) w.key(kAgentLabel).value("on");
  if (agent_as_root) w.key(kUserLabel).value(user);
  w.end_object();
  w.key("HostConfig").begin_object();
  if (!config_.runtime.empty()) w.key("Runtime").value(config_.runtime);
  w.key("NetworkMode").value("none");
  w.key("AutoRemove").value(true);
  w.key("Init").value(!agent);  // the agent is an init itself
  if (agent) {
    // The attach stream carries the agent protocol: command output and file contents. The
    // default log driver would copy every byte of it to a file on the engine's disk (and
    // cost a JSON encoding per chunk); nothing of it belongs in a log.
    w.key("LogConfig").begin_object().key("Type").value("none").end_object();
  }
  w.key("CapDrop").begin_array().value("ALL").end_array();
  if (agent_as_root) {
    w.key("CapAdd").begin_array().value("SETUID").value("SETGID").value("KILL").end_array();
  }
  w.key("SecurityOpt").begin_array().value("no-new-privileges").end_array();
  w.key("ReadonlyRootfs").value(config_.read_only);
  if (agent && config_.read_only) {
    // The agent's directory: an anonymous volume, removed with the container (DELETE ?v=1,
    // AutoRemove); the archive API writes into a volume where the root is read-only.
    w.key("Mounts").begin_array().begin_object();
    w.key("Type").value("volume").key("Target").value(kAgentDir);
    w.end_object().end_array();
  }
  if (const auto& m = o.resources.memory_bytes) {
    w.key("Memory").value(static_cast<std::uint64_t>(*m));
    w.key("MemorySwap").value(static_cast<std::uint64_t>(*m));  // equal: no swap
  }
  if (const auto& c = o.resources.cpus)
    w.key("NanoCpus").value(static_cast<std::int64_t>(*c * 1e9));
  if (const auto& p = o.resources.pids) w.key("PidsLimit").value(static_cast<std::int64_t>(*p));
  if (!config_.tmpfs.empty() || agent) {
    w.key("Tmpfs").begin_object();
    for (const auto& m : config_.tmpfs)
      w.key(m).value("rw,nosuid,nodev,mode=1777");
    // The agent's socket for bridge sessions: a directory only root may enter, writable even
    // on a read-only root filesystem.
    if (agent) w.key(std::string(kAgentRunDir)).value("rw,noexec,nosuid,nodev,mode=0700,size=64k");
    w.end_object();
  }
  w.end_object();
  w.end_object();
  return std::move(w).str();
}

std::string exec_body(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      const std::string& workdir, bool attach_stdin, const std::string& token,
                      const std::string& user) {
  JsonWriter w;
  w.begin_object();
  w.key("AttachStdin").value(attach_stdin);
  w.key("AttachStdout").value(true);
  w.key("AttachStderr").value(true);
  w.key("Tty").value(false);
  w.key("Cmd").begin_array();
  for (const auto& a : argv)
    w.value(a);
  w.end_array();
  w.key("Env").begin_array();
  for (const auto& v : env)
    w.value(v);
  if (!token.empty()) w.value(std::string(kExecTokenVar) + "=" + token);
  w.end_array();
  if (!workdir.empty()) w.key("WorkingDir").value(workdir);
  if (!user.empty()) w.key("User").value(user);
  w.end_object();
  return std::move(w).str();
}

std::string api_time(std::chrono::system_clock::time_point t) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  std::string frac = std::to_string(ns % 1'000'000'000);
  frac.insert(0, 9 - frac.size(), '0');
  return std::to_string(ns / 1'000'000'000) + "." + frac;
}

std::optional<FileInfo> path_stat(const http::ResponseParser& p) {
  auto h = p.header("X-Docker-Container-Path-Stat");
  if (!h) return std::nullopt;
  auto raw = base64_decode(*h);
  if (!raw) return std::nullopt;
  auto doc = json::parse(*raw);
  if (!doc) return std::nullopt;
  FileInfo f;
  f.name = std::string(doc.value().string_at("name").value_or(""));
  f.size =
      static_cast<std::uint64_t>(std::max<std::int64_t>(doc.value().int_at("size").value_or(0), 0));
  const std::int64_t mode = doc.value().int_at("mode").value_or(0);
  f.mode = static_cast<std::uint32_t>(mode & 07777);
  f.type = (mode & (std::int64_t{1} << 31))   ? FileType::Directory
           : (mode & (std::int64_t{1} << 27)) ? FileType::Symlink
                                              : FileType::File;
  return f;
}

std::vector<FileInfo> parse_exec_listing(const std::string& dir, const Bytes& out) {
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

// GET /containers/{id}/archive for `target`, read as a tar stream as it arrives: the stat
// header must say directory (or not, for a file) before any content is taken; entries and
// content go to the callbacks; `done` runs once the archive ended cleanly. Every failure
// fails the operation with its code.
SandboxState state_of(std::string_view status) {
  return status == "running"   ? SandboxState::Running
         : status == "created" ? SandboxState::Created
         : status == "paused"  ? SandboxState::Paused
         : status.empty()      ? SandboxState::Unknown
                               : SandboxState::Stopped;
}

ManagedSandbox managed_of(const json::Value& c) {
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
  m.state = state_of(c.string_at("State").value_or(""));
  return m;
}

Problem daemon_error(const Reply& r) {
  return Problem{errc::SandboxError,
                 "the Docker engine answered " + std::to_string(r.status) + ": " + r.message(),
                 {}};
}

Problem exec_file_problem(const std::string& file, const ExecDone& d) {
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

}  // namespace sandboxio::docker::detail
