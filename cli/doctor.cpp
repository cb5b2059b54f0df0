// sandboxio doctor: a verdict per backend and per check, each failing check with a fix hint.
// Credentials are named, never printed; no check costs money.
#include <cstdlib>
#include <iostream>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/local.hpp"
#include "sandboxio/modal.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/telemetry.hpp"

namespace sandboxio::cli {
namespace {

struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
  std::string hint;
};

struct Verdict {
  std::string backend;
  bool installed = true;  // built into this sandboxio
  std::vector<Check> checks;
  bool ok() const {
    for (const auto& c : checks)
      if (!c.ok) return false;
    return true;
  }
};

std::string docker_socket() {
  const char* host = std::getenv("DOCKER_HOST");
  if (host && std::string_view(host).starts_with("unix://")) return std::string(host + 7);
  return "/var/run/docker.sock";
}

Verdict check_docker(const std::string& image) {
  Verdict v{"docker", true, {}};
  const char* host = std::getenv("DOCKER_HOST");
  const bool remote = host && *host && !std::string_view(host).starts_with("unix://");
  std::string dsn = "docker://" + image;
  if (!remote) {
    const std::string socket = docker_socket();
    const auto ping = docker_local_get("/_ping", socket);
    if (!ping) {
      v.checks.push_back({"engine reachable", false, "nothing answers on unix://" + socket,
                          "Start the engine: `sudo systemctl start docker`, or `dockerd &`; "
                          "scripts/docker-env installs and starts one."});
      return v;
    }
    v.checks.push_back({"engine reachable", true, "unix://" + socket, {}});
    std::string version;
    const std::size_t at = ping->headers.find("Api-Version: ");
    if (at != std::string::npos)
      version = ping->headers.substr(at + 13, ping->headers.find('\r', at) - at - 13);
    const bool new_enough = !version.empty() && std::stod(version) >= 1.41 - 1e-9;
    v.checks.push_back({"API version", new_enough, version.empty() ? "unknown" : version,
                        new_enough ? ""
                                   : "sandboxio speaks API 1.41: upgrade to Docker 20.10 "
                                     "or newer."});
    const bool present = local_image_present(image);
    v.checks.push_back({"image " + image, present, present ? "present" : "absent",
                        present ? ""
                                : "Pull or build it first (docker pull " + image +
                                      "), or name another with --image."});
    if (!present) return v;
  } else {
    v.checks.push_back({"engine address", true, std::string("DOCKER_HOST=") + host, {}});
  }
  try {
    CreateOptions o;
    o.lifetime = std::chrono::seconds(60);
    auto sb = sync::Sandbox::create(dsn, o);
    const auto r = sb.run({"true"});
    const auto info = sb.info();
    v.checks.push_back({"create with network none", r.ok() && info.network.denies_all(),
                        "made " + sb.id().substr(0, 12) + " with network " +
                            info.network.describe() + ", ran `true`: exit " +
                            std::to_string(r.exit_code.value_or(-1)),
                        r.ok() ? "" : "Read the engine's log; the image must have /bin/true."});
    // The agent is the default where it is installed; without it commands take the daemon's
    // exec (slower, and a timed-out tree that clears its environment escapes the kill).
    v.checks.push_back(
        {"sandboxio-agent", !info.agent.empty(),
         info.agent.empty() ? "not installed: commands go through the daemon's exec" : info.agent,
         info.agent.empty() ? "Install sandboxio (cmake --install puts the agent in "
                              "LIBEXECDIR/sandboxio), or set SBX_AGENT to it."
                            : ""});
  } catch (const Error& e) {
    v.checks.push_back(
        {"create with network none", false, e.what(), std::string(error_info(e.sbx_code()).hint)});
  }
  return v;
}

// E2B: the key by name only, then one free call: listing the sandboxes sandboxio manages (it
// proves the control plane answers and accepts the key; it creates nothing).
Verdict check_e2b() {
  Verdict v{"e2b", true, {}};
  const bool key = std::getenv("E2B_API_KEY") && *std::getenv("E2B_API_KEY");
  v.checks.push_back({"E2B_API_KEY", key, key ? "set (value not shown)" : "not set",
                      key ? "" : "Set E2B_API_KEY to use e2b:// (the value is never printed)."});
  if (!key) {
    v.installed = false;  // not configured: not a failure of this machine
    return v;
  }
  const char* api = std::getenv("E2B_API_URL");
  const char* domain = std::getenv("E2B_DOMAIN");
  const std::string where =
      api && *api ? api : "https://api." + std::string(domain && *domain ? domain : "e2b.app");
  try {
    const auto managed = sync::list_managed("e2b://");
    v.checks.push_back({"control plane",
                        true,
                        where + " accepts the key; " + std::to_string(managed.size()) +
                            " sandbox(es) managed by sandboxio",
                        {}});
  } catch (const Error& e) {
    v.checks.push_back({"control plane", false, e.what(), e.hint()});
  }
  return v;
}

// Modal: the credentials by where they came from (never their values), then one free call:
// looking up a sandbox id that does not exist. AuthTokenGet before it proves the control plane
// accepts the credentials; "not found" proves it answers. Nothing is created.
Verdict check_modal() {
  Verdict v{"modal", true, {}};
  auto dsn = parse_dsn("modal://");
  auto config = modal::config_for(dsn.value());
  if (!config) {
    v.checks.push_back({"configuration", false, config.problem().detail, config.problem().hint});
    return v;
  }
  const modal::Config& c = config.value();
  const bool found = !c.token_id.empty() && !c.token_secret.empty();
  v.checks.push_back({"credentials", found,
                      found ? "from " + c.credentials_source + " (values not shown)"
                            : "none: no MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, no profile in "
                              "~/.modal.toml",
                      found ? ""
                            : "Run `modal token new`, or set MODAL_TOKEN_ID and "
                              "MODAL_TOKEN_SECRET (the values are never printed)."});
  if (!found) {
    v.installed = false;  // not configured: not a failure of this machine
    return v;
  }
  const std::string where = (c.server.endpoint.tls ? "https://" : "http://") + c.server.authority;
  try {
    (void)sync::Sandbox::connect("modal://", "sb-sandboxio-doctor-probe", {});
    v.checks.push_back({"control plane", true, where + " answers", {}});
  } catch (const Error& e) {
    const bool answered = e.sbx_code() == errc::SandboxNotFound;
    v.checks.push_back({"control plane", answered,
                        answered ? where + " accepts the credentials and answers" : e.what(),
                        answered ? "" : e.hint()});
  }
  return v;
}

Verdict check_local() {
  Verdict v{"local", true, {}};
  auto dsn = parse_dsn("local://");
  auto config = local::config_for(dsn.value());
  if (!config) {
    v.installed = config.problem().code != errc::BackendNotInstalled;
    v.checks.push_back(
        {"bubblewrap and the agent", false, config.problem().detail, config.problem().hint});
    return v;
  }
  v.checks.push_back({"bubblewrap and the agent",
                      true,
                      config.value().bwrap + ", " + config.value().agent +
                          (config.value().setpriv.empty()
                               ? ""
                               : " (as root: runs as uid " + std::to_string(config.value().uid) +
                                     " through setpriv)"),
                      {}});
  try {
    auto sb = sync::Sandbox::create("local://");
    v.checks.push_back(
        {"user namespaces", true, "a sandbox started (" + sb.info().agent + ")", {}});
    const auto r = sb.run({"cat", "/proc/self/status"});
    const std::string& st = r.stdout_bytes;
    const bool seccomp = st.find("Seccomp:\t2") != std::string::npos;
    const bool nocaps = st.find("CapEff:\t0000000000000000") != std::string::npos &&
                        st.find("CapBnd:\t0000000000000000") != std::string::npos;
    const bool nnp = st.find("NoNewPrivs:\t1") != std::string::npos;
    v.checks.push_back({"seccomp, no capabilities, no_new_privs", seccomp && nocaps && nnp,
                        std::string("seccomp ") + (seccomp ? "on" : "OFF") + ", capabilities " +
                            (nocaps ? "none" : "PRESENT") + ", no_new_privs " +
                            (nnp ? "on" : "OFF"),
                        seccomp && nocaps && nnp ? ""
                                                 : "Report this: local:// should never start "
                                                   "without these."});
    v.checks.push_back({"isolation tier",
                        sb.tier() == IsolationTier::Container,
                        std::string(sb.tier().name()) +
                            " (namespaces on the shared kernel; not GVISOR or MICROVM)",
                        {}});
    const int cgroups = config.value().cgroup_version;
    v.checks.push_back({"resource limits",
                        true,
                        cgroups != 0 ? "memory, cpu and pids limits through cgroup v" +
                                           std::to_string(cgroups) + " (" +
                                           config.value().cgroup_memory + ")"
                                     : "memory, cpu and pids limits are refused (SBX_E1404), "
                                       "never ignored: they need root here",
                        {}});
  } catch (const Error& e) {
    v.checks.push_back({"user namespaces", false, e.what(),
                        "bubblewrap needs unprivileged user namespaces: sysctl "
                        "kernel.unprivileged_userns_clone=1 (Debian), or an AppArmor profile for "
                        "bwrap (Ubuntu 24.04)."});
  }
  return v;
}

Verdict check_fake() {
  Verdict v{"fake", true, {}};
  try {
    auto sb = sync::Sandbox::create("fake://");
    v.checks.push_back(
        {"create and run", sb.run({"true"}).ok(), "deterministic, no real code", {}});
  } catch (const Error& e) {
    v.checks.push_back({"create and run", false, e.what(), {}});
  }
  return v;
}

}  // namespace

// OpenTelemetry export, as the OTEL_* variables configure it: off, unusable, or a collector
// that does (or does not) accept an empty export.
Verdict check_telemetry() {
  auto settings = telemetry::settings_from_env();
  if (!settings)
    return Verdict{"opentelemetry",
                   true,
                   {{"settings", false, settings.problem().detail, settings.problem().hint}}};
  if (!settings.value())
    return Verdict{
        "opentelemetry", true, {{"export", true, "off (no OTEL_EXPORTER_OTLP_ENDPOINT)", {}}}};
  const auto& s = *settings.value();
  auto reached = telemetry::probe(s);
  return Verdict{"opentelemetry",
                 true,
                 {{"collector at " + s.endpoint, static_cast<bool>(reached),
                   reached ? "accepts OTLP/HTTP protobuf" : reached.problem().detail,
                   reached ? "" : reached.problem().hint}}};
}

int doctor(bool json, const std::string& image) {
  std::vector<Verdict> verdicts{check_docker(image), check_e2b(),  check_modal(),
                                check_local(),       check_fake(), check_telemetry()};
  bool failed = false;
  for (const auto& v : verdicts)
    failed = failed || (v.installed && !v.ok());
  if (json) {
    JsonWriter w;
    w.begin_object().key("ok").value(!failed).key("backends").begin_array();
    for (const auto& v : verdicts) {
      w.begin_object().key("backend").value(v.backend).key("installed").value(v.installed);
      w.key("ok").value(v.ok()).key("checks").begin_array();
      for (const auto& c : v.checks) {
        w.begin_object().key("check").value(c.name).key("ok").value(c.ok);
        w.key("detail").value(c.detail);
        if (!c.hint.empty()) w.key("hint").value(c.hint);
        w.end_object();
      }
      w.end_array().end_object();
    }
    w.end_array().end_object();
    std::cout << w.str() << "\n";
    return failed ? 1 : 0;
  }
  const Style out = style_for(stdout);
  for (const auto& v : verdicts) {
    const std::string verdict = v.ok()        ? out.ok("ok")
                                : v.installed ? out.bad("FAILING")
                                              : out.dim("not available");
    std::cout << v.backend << ": " << verdict << "\n";
    for (const auto& c : v.checks) {
      std::cout << "  " << (c.ok ? out.ok("ok  ") : out.bad("FAIL")) << " " << c.name << ": "
                << c.detail << "\n";
      if (!c.ok && !c.hint.empty()) std::cout << "       fix: " << c.hint << "\n";
    }
  }
  return failed ? 1 : 0;
}

}  // namespace sandboxio::cli
