// local:// configuration: the DSN, where bubblewrap, setpriv and the agent are, and what this
// machine's root looks like. The driver side of the backend: it reads the file system and the
// process identity once, and hands values to the machine.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string_view>
#include <vector>

#include "sandboxio/backend/identity.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/local.hpp"

namespace sandboxio::local {
namespace {

const OptionSpec kOptions[] = {
    {"bwrap", OptionType::String,
     "the bubblewrap binary to run, an absolute path (default: bwrap in /usr/bin or /bin)"},
    {"runtime", OptionType::String,
     "bwrap (the default: namespaces, tier CONTAINER) or runsc (gVisor, daemonless and rootless: "
     "tier GVISOR)"},
    {"home", OptionType::String,
     "the sandbox's private, writable home and default working directory (default "
     "/home/sandbox; a tmpfs, like /tmp)"},
};

std::string find_program(const char* name) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
    const std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool writable_dir(const std::string& path) {
  return is_dir(path) && ::access(path.c_str(), W_OK) == 0;
}

bool file_has_words(const std::string& path, std::initializer_list<const char*> words) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string text = " " + std::string(buf, n) + " ";
  for (const char* w : words) {
    if (text.find(std::string(" ") + w + " ") == std::string::npos &&
        text.find(std::string(" ") + w + "\n") == std::string::npos)
      return false;
  }
  return true;
}

// Where sandboxes' cgroups can be made: only as root (a normal user on a systemd machine gets a
// delegated subtree through systemd, which is not wired in yet: limits are refused there).
void find_cgroups(Config& c) {
  if (::geteuid() != 0) return;
  const std::string root = "/sys/fs/cgroup";
  if (file_has_words(root + "/cgroup.subtree_control", {"cpu", "memory", "pids"}) &&
      writable_dir(root)) {
    c.cgroup_version = 2;
    c.cgroup_memory = root;
    return;
  }
  const std::string cpu = is_dir(root + "/cpu") ? root + "/cpu" : root + "/cpu,cpuacct";
  if (writable_dir(root + "/memory") && writable_dir(root + "/pids") && writable_dir(cpu)) {
    c.cgroup_version = 1;
    c.cgroup_memory = root + "/memory";
    c.cgroup_pids = root + "/pids";
    c.cgroup_cpu = cpu;
  }
}

/// Whether a process with none of this file's owner or group can read and execute it: every
/// directory above it searchable by others, the file readable and executable by them.
bool others_may_run(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & S_IROTH) == 0 || (st.st_mode & S_IXOTH) == 0)
    return false;
  for (std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0;
       slash = path.rfind('/', slash - 1)) {
    if (::stat(path.substr(0, slash).c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0)
      return false;
  }
  return true;
}

/// /run is memory: of the agents copied there (one per build of the agent), the newest
/// kKeptCopies stay, and older ones go once they are ten minutes old (a sandbox that started
/// from one keeps its bind mount; a later create copies its agent again).
void prune_copies(const std::string& dir, const std::string& keep) {
  constexpr std::size_t kKeptCopies = 8;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::pair<std::time_t, std::string>> copies;
  while (const dirent* e = ::readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    struct stat st {};
    if (std::string_view(e->d_name).rfind("agent-", 0) == 0 && path != keep &&
        ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      copies.emplace_back(st.st_mtime, path);
  }
  ::closedir(d);
  std::sort(copies.begin(), copies.end(), std::greater<>());
  const std::time_t old = std::time(nullptr) - 600;
  for (std::size_t i = kKeptCopies - 1; i < copies.size(); ++i) {
    if (copies[i].first < old) ::unlink(copies[i].second.c_str());
  }
}

/// As root, the agent is bound into the sandbox by a uid of the sandbox's own (bubblewrap and
/// runsc run as it), which cannot reach a build tree under /root. Such an agent is copied once
/// into /run/sandboxio (root's, 0755), under a name made of its size, modification time and
/// inode, read-only for everyone; an agent others may run already is used where it is.
Result<std::string> agent_for_others(const std::string& agent) {
  if (others_may_run(agent)) return agent;
  struct stat st {};
  if (::stat(agent.c_str(), &st) != 0)
    return Problem{errc::BackendNotInstalled, "cannot read the agent " + agent, {}};
  const std::string dir = "/run/sandboxio";
  const std::string copy = dir + "/agent-" + std::to_string(st.st_size) + "-" +
                           std::to_string(st.st_mtime) + "-" + std::to_string(st.st_ino);
  auto refuse = [&](const std::string& why) {
    return Problem{errc::BackendNotInstalled,
                   "the agent " + agent +
                       " is out of reach of the sandbox's unprivileged uid, and copying it to " +
                       dir + " failed: " + why,
                   "Install sandboxio (cmake --install), or set SBX_AGENT to a copy every user "
                   "may read and run."};
  };
  ::mkdir(dir.c_str(), 0755);
  struct stat d {};
  if (::lstat(dir.c_str(), &d) != 0 || !S_ISDIR(d.st_mode) || d.st_uid != 0 ||
      (d.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return refuse(dir + " is not a directory only root may write");
  ::chmod(dir.c_str(), 0755);
  // A copy made before (by root: nobody else may write here) is used as it is.
  struct stat made {};
  if (::lstat(copy.c_str(), &made) == 0 && S_ISREG(made.st_mode) && made.st_uid == 0 &&
      others_may_run(copy))
    return copy;
  const std::string partial = copy + ".partial-" + std::to_string(::getpid());
  FILE* in = std::fopen(agent.c_str(), "rb");
  if (in == nullptr) return refuse("cannot read it");
  FILE* out = std::fopen(partial.c_str(), "wb");
  if (out == nullptr) {
    std::fclose(in);
    return refuse("cannot write " + partial);
  }
  char buf[64 * 1024];
  bool ok = true;
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;)
    ok = ok && std::fwrite(buf, 1, n, out) == n;
  ok = ok && std::ferror(in) == 0;
  std::fclose(in);
  ok = std::fclose(out) == 0 && ok;
  if (!ok || ::chmod(partial.c_str(), 0555) != 0 || ::rename(partial.c_str(), copy.c_str()) != 0) {
    ::unlink(partial.c_str());
    return refuse("writing " + copy + " failed");
  }
  prune_copies(dir, copy);
  return copy;
}

}  // namespace

Result<Config> config_for(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  Config c;
  c.home = typed.value().string("home", c.home);
  if (c.home.empty() || c.home[0] != '/' || c.home == "/" ||
      c.home.find("/..") != std::string::npos) {
    return Problem{errc::InvalidOption, "local://?home=" + c.home + ": not an absolute directory",
                   "home=/home/sandbox, for example."};
  }
  c.bwrap = typed.value().string("bwrap", find_program("bwrap"));
  if (typed.value().has("bwrap") &&
      (c.bwrap.empty() || c.bwrap[0] != '/' || ::access(c.bwrap.c_str(), X_OK) != 0)) {
    return Problem{errc::InvalidOption,
                   "local://?bwrap=" + c.bwrap + ": not an executable given by its absolute path",
                   "bwrap=/usr/bin/bwrap, for example."};
  }
  const std::string runtime = typed.value().string("runtime", "bwrap");
  if (runtime == "runsc") {
    c.runsc = find_program("runsc");
    if (c.runsc.empty()) {
      return Problem{errc::BackendNotInstalled,
                     "local://?runtime=runsc needs gVisor's runsc, which is missing",
                     "apt-get install runsc (Debian 12 and later)."};
    }
    if (!dsn.target.empty()) {
      return Problem{errc::InvalidOption,
                     "local://" + dsn.target +
                         "?runtime=runsc: under gVisor the root is this machine's /usr; a root "
                         "directory is not supported yet",
                     "local://?runtime=runsc, or local://" + dsn.target +
                         " (bubblewrap) for an unpacked image."};
    }
  } else if (runtime != "bwrap") {
    return Problem{errc::InvalidOption,
                   "local://?runtime=" + runtime + ": not a runtime local:// knows",
                   "runtime=bwrap (the default) or runtime=runsc (gVisor)."};
  } else if (c.bwrap.empty()) {
    return Problem{errc::BackendNotInstalled, "local:// needs bubblewrap (bwrap), which is missing",
                   "apt-get install bubblewrap (Debian, Ubuntu), dnf install bubblewrap (Fedora)."};
  }
  if (::geteuid() == 0) {
    c.setpriv = find_program("setpriv");
    if (c.setpriv.empty()) {
      return Problem{errc::BackendNotInstalled,
                     "local:// as root needs setpriv (util-linux) to drop to an unprivileged uid",
                     "apt-get install util-linux."};
    }
    // A uid of its own per sandbox, from the range systemd leaves to containers (0x60000000
    // on), that no account on this machine has: nothing here shares it.
    static std::atomic<std::uint32_t> next{0};
    c.uid = static_cast<std::uint32_t>(std::strtoul(
        backend::ambient("local.uid",
                         [] {
                           return std::to_string(
                               0x60000000u |
                               ((static_cast<std::uint32_t>(::getpid()) & 0xFFFFu) << 8) |
                               (next++ & 0xFFu));
                         })
            .c_str(),
        nullptr, 10));
  }
  std::string tried;
  for (const std::string& path : docker::agent_search_path()) {
    if (::access(path.c_str(), R_OK) == 0 && path[0] == '/') {
      c.agent = path;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (c.agent.empty()) {
    return Problem{errc::BackendNotInstalled,
                   "sandboxio-agent is not installed (looked in " + tried + ")",
                   "Install sandboxio (cmake --install puts it in LIBEXECDIR/sandboxio), or set "
                   "SBX_AGENT to the binary."};
  }
  if (!c.setpriv.empty()) {
    auto shared = agent_for_others(c.agent);
    if (!shared) return shared.problem();
    c.agent = std::move(shared).value();
  }
  if (!dsn.target.empty()) {
    if (dsn.target[0] != '/' || !is_dir(dsn.target)) {
      return Problem{errc::InvalidDsn,
                     "local://" + dsn.target + ": the root must be an existing directory",
                     "local:///path/to/rootfs (an unpacked image), or local:// for this "
                     "machine's /usr."};
    }
    c.root = dsn.target;
  } else {
    for (const char* top : {"bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
      const std::string path = std::string("/") + top;
      char target[256];
      const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
      if (n > 0) {
        c.root_links.emplace_back(top, std::string(target, static_cast<std::size_t>(n)));
      } else if (is_dir(path)) {
        c.root_dirs.emplace_back(top);
      }
    }
    for (const char* file :
         {"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
          "/etc/localtime", "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types"}) {
      if (::access(file, R_OK) == 0) c.etc.emplace_back(file);
    }
  }
  find_cgroups(c);
  static std::atomic<std::uint64_t> count{0};
  c.id = backend::ambient("local.id", [] {
    return "local-" + backend::process_session() + "-" + std::to_string(++count);
  });
  return c;
}

BackendEntry backend_entry() {
  return backend::entry("local",
                        "this machine: sandboxio-agent in bubblewrap namespaces, no daemon",
                        kOptions, config_for, make_machine);
}

}  // namespace sandboxio::local
