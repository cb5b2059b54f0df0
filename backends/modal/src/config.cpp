// modal:// configuration: the DSN's options, Modal's variables and its profile file, read as
// Modal's SDKs read them (each variable first, then the active profile of ~/.modal.toml). This
// is the driver side of the backend: it reads the environment and the file once, and hands
// values to the machine.
#include <atomic>
#include <fstream>
#include <sstream>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/identity.hpp"
#include "sandboxio/modal.hpp"

namespace sandboxio::modal {
namespace {

using backend::env_or;

const OptionSpec kOptions[] = {
    {"app", OptionType::String, "the Modal app the sandboxes belong to (default sandboxio)"},
    {"environment", OptionType::String, "Modal environment (default MODAL_ENVIRONMENT)"},
    {"server_url", OptionType::String,
     "control plane URL (default MODAL_SERVER_URL, else https://api.modal.com)"},
    {"ca", OptionType::String, "PEM file of trust anchors for TLS (default: the system store)"},
};

using Profile = std::map<std::string, std::string>;

// The part of TOML a Modal profile file uses: [name] tables of key = "string" | true | false.
// Anything else on a line is skipped, as the SDKs skip what they do not read.
std::map<std::string, Profile> parse_profiles(std::istream& in) {
  std::map<std::string, Profile> profiles;
  std::string line, table;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  auto unquote = [](const std::string& v) -> std::optional<std::string> {
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) {
      const char q = v.front();
      const auto end = v.find(q, 1);
      if (end == std::string::npos) return std::nullopt;
      return v.substr(1, end - 1);
    }
    const std::string bare = v.substr(0, v.find('#'));
    return bare.find_first_of(" \t") == std::string::npos
               ? bare
               : bare.substr(0, bare.find_first_of(" \t"));
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      const auto end = line.find(']');
      table = end == std::string::npos ? std::string() : trim(line.substr(1, end - 1));
      if (table.size() >= 2 && table.front() == '"') table = table.substr(1, table.size() - 2);
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || table.empty()) continue;
    if (auto v = unquote(trim(line.substr(eq + 1)))) profiles[table][trim(line.substr(0, eq))] = *v;
  }
  return profiles;
}

// The profile the SDKs use: MODAL_PROFILE, else the one marked active = true.
std::pair<std::string, Profile> active_profile() {
  std::string path = env_or("MODAL_CONFIG_PATH");
  if (path.empty()) {
    const std::string home = env_or("HOME");
    if (home.empty()) return {};
    path = home + "/.modal.toml";
  }
  std::ifstream in(path);
  if (!in) return {};
  auto profiles = parse_profiles(in);
  std::string name = env_or("MODAL_PROFILE");
  if (name.empty())
    for (const auto& [n, p] : profiles)
      if (auto it = p.find("active"); it != p.end() && it->second == "true") name = n;
  if (auto it = profiles.find(name); it != profiles.end())
    return {path + " [" + name + "]", it->second};
  return {};
}

bool is_local(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1";
}

}  // namespace

Result<backend::GrpcTarget> parse_server_url(std::string_view url, const std::string& ca_file) {
  auto bad = [&](const std::string& why) {
    return Problem{errc::InvalidOption, "Modal server URL \"" + std::string(url) + "\": " + why,
                   "Write https://HOST[:PORT] or http://HOST:PORT, without a path."};
  };
  backend::GrpcTarget t;
  t.endpoint.kind = Endpoint::Kind::Tcp;
  std::string_view rest;
  if (url.starts_with("https://")) {
    t.endpoint.tls = true;
    t.endpoint.port = 443;
    rest = url.substr(8);
  } else if (url.starts_with("http://")) {
    t.endpoint.port = 80;
    t.scheme = "http";
    rest = url.substr(7);
  } else {
    return bad("the scheme must be http or https");
  }
  while (!rest.empty() && rest.back() == '/')
    rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos)
    return bad("only a scheme, a host and a port");
  auto hp = backend::parse_host_port(rest, t.endpoint.port);
  if (!hp) return bad(hp.problem().detail);
  t.endpoint.address = std::move(hp.value().host);
  t.endpoint.port = hp.value().port;
  const bool v6 = t.endpoint.address.find(':') != std::string::npos;
  t.authority = (v6 ? "[" + t.endpoint.address + "]" : t.endpoint.address) + ":" +
                std::to_string(t.endpoint.port);
  if (t.endpoint.tls) {
    t.endpoint.server_name = t.endpoint.address;
    t.endpoint.ca_file = ca_file;
    t.endpoint.alpn = {"h2"};
  }
  return t;
}

Result<Config> config_for(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  const TypedOptions& o = typed.value();
  // What the profile file says goes through the ambient scope as the variables do, so that a
  // flight-recorder trace replays with it; its token_secret is kept out of the trace as every
  // *_SECRET is (flight.cpp).
  // (Not structured bindings: clang 14 cannot capture them in the lambdas below.)
  const std::pair<std::string, Profile> active = active_profile();
  const std::string& file_profile = active.first;
  const Profile& profile = active.second;
  const std::string profile_name = backend::ambient("modal-profile", [&] { return file_profile; });
  auto from_profile = [&](const char* key) {
    return backend::ambient(std::string("env:modal-profile:") + key, [&] {
      auto it = profile.find(key);
      return it == profile.end() ? std::string() : it->second;
    });
  };
  Config c;
  c.image = dsn.target;
  if (o.has("app")) c.app = o.string("app");
  c.environment = o.has("environment") ? o.string("environment")
                                       : env_or("MODAL_ENVIRONMENT", from_profile("environment"));
  c.ca_file = o.has("ca") ? o.string("ca") : std::string{};
  std::string server = o.has("server_url") ? o.string("server_url")
                                           : env_or("MODAL_SERVER_URL", from_profile("server_url"));
  if (server.empty()) server = "https://api.modal.com:443";
  auto target = parse_server_url(server, c.ca_file);
  if (!target) return target.problem();
  c.server = std::move(target).value();
  c.local_server = is_local(c.server.endpoint.address);
  c.token_id = env_or("MODAL_TOKEN_ID");
  c.token_secret = env_or("MODAL_TOKEN_SECRET");
  c.credentials_source = "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET";
  if (c.token_id.empty() && c.token_secret.empty() && !profile_name.empty()) {
    c.token_id = from_profile("token_id");
    c.token_secret = from_profile("token_secret");
    c.credentials_source = profile_name;
  }
  c.host = backend::process_owner();
  c.host = c.host.substr(0, c.host.rfind(':'));
  // Exec ids are the SDKs' own choice and must not repeat within a sandbox, which two handles
  // of this process may share (connect()): each machine gets its own prefix.
  static std::atomic<std::uint64_t> machines{0};
  c.session = backend::process_session() + "-" +
              backend::ambient("modal.machine", [] { return std::to_string(++machines); });
  return c;
}

BackendEntry backend_entry() {
  return backend::entry("modal", "Modal sandboxes (gVisor), over Modal's gRPC control plane",
                        kOptions, config_for, make_machine);
}

}  // namespace sandboxio::modal
