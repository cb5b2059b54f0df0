// docker:// configuration: the DSN's options and Docker's own environment variables
// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH). This is the driver side of the backend:
// it reads the environment and the process identity once, and hands values to the machine.
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/identity.hpp"
#include "sandboxio/docker.hpp"

namespace sandboxio::docker {
namespace {

using backend::env_or;

const OptionSpec kOptions[] = {
    {"host", OptionType::String, "engine address: unix:///path or tcp://HOST:PORT"},
    {"user", OptionType::String, "user to run as inside the container (UID[:GID] or name)"},
    {"read_only", OptionType::Bool, "read-only root filesystem"},
    {"tmpfs", OptionType::String, "comma-separated tmpfs mount points, e.g. /tmp,/work"},
    {"pull", OptionType::String, "missing (default): pull an absent image; never: refuse"},
    {"runtime", OptionType::String,
     "the engine's OCI runtime for the container: runsc (gVisor: tier gvisor), runc or crun "
     "(tier container); default: the engine's default (container)"},
    {"agent", OptionType::String,
     "auto (default): on where sandboxio-agent is installed, else off; on: run sandboxio-agent "
     "as the container's init (reached over a direct socket where the client may, else the "
     "attach stream); attach: the same, always over the attach stream; off: the daemon's exec "
     "for every command"},
};

// The agent binary, read once per path (it is a few MB and never changes under a process).
Result<std::shared_ptr<const std::string>> load_agent() {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const std::string>> cache;
  const std::vector<std::string> paths = agent_search_path();
  for (const std::string& path : paths) {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(path); it != cache.end()) return it->second;
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    std::ostringstream bytes;
    bytes << in.rdbuf();
    auto binary = std::make_shared<const std::string>(std::move(bytes).str());
    if (binary->size() < 4 || binary->compare(0, 4,
                                              "\x7f"
                                              "ELF") != 0)
      continue;
    cache.emplace(path, binary);
    return binary;
  }
  std::string tried;
  for (const auto& p : paths)
    tried += (tried.empty() ? "" : ", ") + p;
  return Problem{errc::BackendNotInstalled,
                 "sandboxio-agent is not installed (looked in " + tried + ")",
                 "Install sandboxio (cmake --install puts it in LIBEXECDIR/sandboxio), set "
                 "SBX_AGENT to the binary, or use docker://IMAGE?agent=off."};
}

}  // namespace

Result<Endpoint> parse_host(std::string_view host, bool tls, const std::string& cert_dir) {
  Endpoint e;
  auto bad = [&](const std::string& why) {
    return Problem{errc::InvalidOption, "Docker host \"" + std::string(host) + "\": " + why,
                   "Write unix:///var/run/docker.sock or tcp://HOST:2376."};
  };
  if (host.starts_with("unix://")) {
    e.kind = Endpoint::Kind::Unix;
    e.address = std::string(host.substr(7));
    if (e.address.empty() || e.address[0] != '/') return bad("the socket path must be absolute");
    return e;
  }
  if (host.starts_with("tcp://") || host.starts_with("https://") || host.starts_with("http://")) {
    const bool https = host.starts_with("https://");
    std::string_view rest = host.substr(host.find("://") + 3);
    while (!rest.empty() && rest.back() == '/')
      rest.remove_suffix(1);
    e.kind = Endpoint::Kind::Tcp;
    e.tls = tls || https;
    auto hp = backend::parse_host_port(rest, e.tls ? 2376 : 2375);
    if (!hp) return bad(hp.problem().detail);
    e.address = std::move(hp.value().host);
    e.port = hp.value().port;
    if (e.tls) {
      e.server_name = e.address;
      e.ca_file = cert_dir + "/ca.pem";
      e.cert_file = cert_dir + "/cert.pem";
      e.key_file = cert_dir + "/key.pem";
    }
    return e;
  }
  if (host.starts_with("ssh://"))
    return bad("ssh:// is not supported yet; forward the socket with ssh -L instead");
  return bad("unknown scheme");
}

Result<Config> config_for(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  const TypedOptions& o = typed.value();
  Config c;
  c.image = dsn.target;  // may be empty for listing and reaping; create() refuses that
  const bool tls = !env_or("DOCKER_TLS_VERIFY").empty() && env_or("DOCKER_TLS_VERIFY") != "0";
  const std::string cert_dir = env_or("DOCKER_CERT_PATH", env_or("HOME", "/root") + "/.docker");
  const std::string host =
      o.has("host") ? o.string("host") : env_or("DOCKER_HOST", "unix:///var/run/docker.sock");
  auto endpoint = parse_host(host, tls, cert_dir);
  if (!endpoint) return endpoint.problem();
  c.endpoint = std::move(endpoint).value();
  c.user = o.string("user");
  c.read_only = o.boolean("read_only");
  const std::string tmpfs = o.string("tmpfs");
  std::size_t pos = 0;
  while (pos < tmpfs.size()) {
    std::size_t comma = tmpfs.find(',', pos);
    if (comma == std::string::npos) comma = tmpfs.size();
    std::string m = tmpfs.substr(pos, comma - pos);
    while (m.size() > 1 && m.back() == '/')
      m.pop_back();
    if (!m.empty()) {
      if (m[0] != '/' || m.find_first_of(":,") != std::string::npos) {
        return Problem{
            errc::InvalidOption, "tmpfs mount \"" + m + "\" is not an absolute path", {}};
      }
      c.tmpfs.push_back(m);
    }
    pos = comma + 1;
  }
  const std::string pull = o.string("pull", "missing");
  if (pull != "missing" && pull != "never") {
    return Problem{errc::InvalidOption, "pull=" + pull + " is not missing or never", {}};
  }
  c.pull_missing = pull == "missing";
  c.runtime = o.string("runtime");
  if (!c.runtime.empty() && c.runtime != "runsc" && c.runtime != "runc" && c.runtime != "crun") {
    return Problem{errc::InvalidOption,
                   "runtime=" + c.runtime + " is not one whose isolation sandboxio knows",
                   "runtime=runsc (gVisor), runc or crun; docs/reference/backends/docker.md."};
  }
  const std::string agent = o.string("agent", "auto");
  if (agent != "auto" && agent != "on" && agent != "off" && agent != "attach") {
    return Problem{errc::InvalidOption, "agent=" + agent + " is not auto, on, attach or off", {}};
  }
  c.bridge = agent != "off";
  c.direct = agent != "attach";
  if (agent != "off") {
    // Asked for by name, a missing agent is an error; by default, the exec path serves (and
    // info().agent, empty, says so).
    auto binary = load_agent();
    if (!binary && agent != "auto") return binary.problem();
    if (binary) c.agent_binary = std::move(binary).value();
    c.agent = c.agent_binary != nullptr;
  }
  c.owner = backend::process_owner();
  c.session = backend::process_session();
  return c;
}

std::vector<std::string> agent_search_path() {
  std::vector<std::string> paths;
  if (auto env = env_or("SBX_AGENT"); !env.empty()) paths.push_back(env);
  paths.emplace_back(SANDBOXIO_AGENT_INSTALLED);
  paths.emplace_back(SANDBOXIO_AGENT_BUILT);
  return paths;
}

BackendEntry backend_entry() {
  return backend::entry("docker", "Docker Engine containers (local socket, or tcp:// with TLS)",
                        kOptions, config_for, make_machine);
}

}  // namespace sandboxio::docker
