// local://'s launcher: the command line that starts a sandbox, built purely from the machine's
// Config and the create options (the transport runs it: Endpoint::Kind::Process).
//   bubblewrap:      [setpriv ... --] bwrap --unshare-all ... agent --lifetime N --seccomp --quiet
//   with limits:     /bin/sh -c SCRIPT (cgroups made, the launcher started in them, removed after)
//   runtime=runsc:   /bin/sh -c SCRIPT SPEC (an OCI bundle written, runsc run on it, removed after)
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/local.hpp"

namespace sandboxio::local {
namespace {

constexpr const char* kPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The uid and gid of the sandbox's processes under runsc, as gVisor's kernel sees them: nobody.
constexpr int kSandboxUid = 65534;

std::vector<std::string> agent_argv(const CreateOptions& options) {
  return {std::string(kAgentPath), "--lifetime", std::to_string(options.lifetime.count()),
          "--seccomp", "--quiet"};
}

/// As root: the same unprivileged path a normal user takes (an unprivileged user namespace,
/// no capabilities over anything outside it), as a uid nothing else has.
std::vector<std::string> drop_privileges(const Config& config) {
  if (config.setpriv.empty()) return {};
  const std::string id = std::to_string(config.uid);
  return {config.setpriv,
          "--reuid=" + id,
          "--regid=" + id,
          "--clear-groups",
          "--inh-caps=-all",
          "--no-new-privs",
          "--"};
}

/// A launcher that needs a shell around it (cgroups, gVisor's bundle) gets one shell script:
/// `setup` runs first (set -e: a failure ends it, and what failed reaches the host), then
/// `command` starts with the socket as its stdio, the shell lets go of the socket, `started`
/// runs, and the shell waits for the command and runs `ended`. One shell, whatever it does:
/// the transport's close kills the shell's children and grandchildren, then gives the shell
/// time to finish, so the shell always cleans up.
struct Script {
  std::string setup, started, ended;
  /// The launcher, as shell words; "$@" is the argv after the script's own arguments.
  std::string command = "\"$@\"";
  /// runsc's stderr is a file, `$d/said`, passed on to the host when runsc fails (gVisor
  /// shuts a stdio socket down when the agent closes its copy of stderr); bubblewrap takes
  /// the socket as stdin, stdout and stderr.
  bool stderr_to_said = false;
};

std::vector<std::string> scripted(const Script& script, std::vector<std::string> args) {
  std::string s = "set -e\n" + script.setup + "set +e\ntrap '' PIPE\n";
  // The socket through fd 3: a shell gives an asynchronous command /dev/null as its stdin
  // before any redirection of its own.
  if (script.stderr_to_said) {
    // The shell keeps the socket only to pass on what runsc said.
    s += "exec 3<&0 </dev/null\n" + script.command +
         " <&3 >&3 2>\"$d/said\" &\nchild=$!\nexec >/dev/null 2>&1\n";
  } else {
    // The shell lets go of the socket: the launcher has its own copies, and nothing the shell
    // might say (a job's end) may reach the host.
    s += "exec 3<&0\n" + script.command +
         " <&3 3<&- &\nchild=$!\nexec 3<&- </dev/null >/dev/null 2>&1\n";
  }
  s += script.started + "wait $child\n" + script.ended;
  if (script.stderr_to_said) s += "[ -s \"$d/said\" ] && cat \"$d/said\" >&3\nexec 3>&-\n";
  std::vector<std::string> argv = {"/bin/sh", "-c", std::move(s), "sandboxio-launcher"};
  argv.insert(argv.end(), std::make_move_iterator(args.begin()),
              std::make_move_iterator(args.end()));
  return argv;
}

/// The sandbox's cgroups: made and limited before the launcher starts (it starts in them); the
/// shell leaves them once it has, and removes them once the sandbox has ended.
void add_cgroups(Script& script, const Config& config, const Resources& r) {
  const std::string group = "sandboxio/" + config.id;
  std::string& s = script.setup;
  std::vector<std::string> roots;
  // Where the shell goes once the launcher has started: v1's sandboxio group; on v2 a group
  // with controllers enabled may hold no process, so the root.
  std::string leave = "sandboxio/";
  if (config.cgroup_version == 2) {
    leave.clear();
    roots = {config.cgroup_memory};
    const std::string g = config.cgroup_memory + "/" + group;
    s += "mkdir -p '" + config.cgroup_memory + "/sandboxio'\n";
    s += "echo +memory +pids +cpu > '" + config.cgroup_memory +
         "/sandboxio/cgroup.subtree_control'\n";
    s += "mkdir '" + g + "'\n";
    if (r.memory_bytes) {
      s += "echo " + std::to_string(*r.memory_bytes) + " > '" + g + "/memory.max'\n";
      s += "echo 0 > '" + g + "/memory.swap.max' 2>/dev/null || true\n";
    }
    if (r.pids) s += "echo " + std::to_string(*r.pids) + " > '" + g + "/pids.max'\n";
    if (r.cpus) {
      s += "echo " + std::to_string(static_cast<long long>(*r.cpus * 100000)) + " 100000 > '" + g +
           "/cpu.max'\n";
    }
  } else {
    roots = {config.cgroup_memory, config.cgroup_pids, config.cgroup_cpu};
    for (const auto& root : roots)
      s += "mkdir -p '" + root + "/" + group + "'\n";
    const std::string m = config.cgroup_memory + "/" + group;
    if (r.memory_bytes) {
      const std::string bytes = std::to_string(*r.memory_bytes);
      s += "echo " + bytes + " > '" + m + "/memory.limit_in_bytes'\n";
      s += "if [ -e '" + m + "/memory.memsw.limit_in_bytes' ]; then echo " + bytes + " > '" + m +
           "/memory.memsw.limit_in_bytes'; fi\n";
    }
    if (r.pids) {
      s += "echo " + std::to_string(*r.pids) + " > '" + config.cgroup_pids + "/" + group +
           "/pids.max'\n";
    }
    if (r.cpus) {
      const std::string c = config.cgroup_cpu + "/" + group;
      s += "echo 100000 > '" + c + "/cpu.cfs_period_us'\n";
      s += "echo " + std::to_string(static_cast<long long>(*r.cpus * 100000)) + " > '" + c +
           "/cpu.cfs_quota_us'\n";
    }
  }
  for (const auto& root : roots)
    s += "echo $$ > '" + root + "/" + group + "/cgroup.procs'\n";
  for (const auto& root : roots)
    script.started += "echo $$ > '" + root + "/" + leave + "cgroup.procs'\n";
  for (const auto& root : roots) {
    script.ended += "n=0; until rmdir '" + root + "/" + group +
                    "' 2>/dev/null || [ $n -ge 100 ]; do n=$((n+1)); sleep 0.02; done\n";
  }
}

/// runtime=runsc: a bundle directory of the sandbox's own (0700 under /tmp, owned by the uid
/// runsc runs as) holding the spec ($1) and a skeleton root of mount points, removed however
/// the shell ends; runsc runs rootless on it, so its sandbox and gofer processes have the
/// unprivileged uid too.
void add_runsc(Script& script, const Config& config) {
  std::string& s = script.setup;
  s += "d=$(mktemp -d /tmp/sandboxio-gvisor.XXXXXXXX)\n"
       // A process of runsc's that is still ending may write into the bundle while it goes.
       "trap 'n=0; until rm -rf \"$d\" 2>/dev/null || [ $n -ge 100 ]; do n=$((n+1)); "
       "sleep 0.02; done' EXIT\n"
       "r=$d/rootfs\n"
       "mkdir -p \"$d/state\" \"$r/usr\" \"$r/proc\" \"$r/tmp\" \"$r/etc\" \"$r/dev/.sandboxio\" "
       "\"$r\"" +
       shell_quote(config.home) + "\n: > \"$r/dev/.sandboxio/agent\"\n";
  for (const auto& [name, target] : config.root_links)
    s += "ln -s " + shell_quote(target) + " \"$r/\"" + shell_quote(name) + "\n";
  for (const auto& dir : config.root_dirs)
    s += "mkdir -p \"$r/\"" + shell_quote(dir) + "\n";
  for (const auto& file : config.etc) {
    const std::string q = shell_quote(file);
    s += "if [ -d " + q + " ]; then mkdir -p \"$r\"" + q + "; else : > \"$r\"" + q + "; fi\n";
  }
  s += "printf '%s' \"$1\" > \"$d/config.json\"\n";
  if (!config.setpriv.empty()) {
    const std::string id = std::to_string(config.uid);
    s += "chown -R " + id + ":" + id + " \"$d\"\n";
  }
  std::string command;
  std::vector<std::string> words = drop_privileges(config);
  words.push_back(config.runsc);
  for (const char* flag : {"--rootless", "--network=none", "--ignore-cgroups"})
    words.emplace_back(flag);
  for (const auto& word : words)
    command += shell_quote(word) + " ";
  script.command = command + "--root \"$d/state\" run --bundle \"$d\" " + shell_quote(config.id);
  script.stderr_to_said = true;
}

}  // namespace

std::string runsc_spec(const Config& config, const CreateOptions& options) {
  JsonWriter w;
  const std::string workdir = options.workdir.empty() ? config.home : options.workdir;
  w.begin_object().key("ociVersion").value("1.0.2");
  w.key("process").begin_object().key("terminal").value(false);
  w.key("user").begin_object().key("uid").value(kSandboxUid).key("gid").value(kSandboxUid);
  w.end_object();
  w.key("args").begin_array();
  for (const auto& word : agent_argv(options))
    w.value(word);
  w.end_array();
  w.key("env").begin_array();
  w.value(std::string("PATH=") + kPath).value("HOME=" + config.home);
  w.value("LANG=C.UTF-8").value("TMPDIR=/tmp").end_array();
  w.key("cwd").value(workdir);
  // No capabilities in any set, and no way to gain one.
  w.key("capabilities").begin_object().end_object();
  w.key("noNewPrivileges").value(true).end_object();
  w.key("root").begin_object().key("path").value("rootfs").key("readonly").value(true);
  w.end_object();
  w.key("hostname").value(config.id);
  w.key("mounts").begin_array();
  auto mount = [&](std::string_view destination, std::string_view type, std::string_view source,
                   bool read_only) {
    w.begin_object().key("destination").value(destination).key("type").value(type);
    w.key("source").value(source).key("options").begin_array();
    if (type == "bind") w.value("rbind");
    w.value(read_only ? "ro" : "rw").value("nosuid").value("nodev").end_array().end_object();
  };
  mount("/proc", "proc", "proc", false);
  mount("/usr", "bind", "/usr", true);
  for (const auto& dir : config.root_dirs)
    mount("/" + dir, "bind", "/" + dir, true);
  for (const auto& file : config.etc)
    mount(file, "bind", file, true);
  mount("/tmp", "tmpfs", "tmpfs", false);
  mount(config.home, "tmpfs", "tmpfs", false);
  mount(kAgentPath, "bind", config.agent, true);
  w.end_array();
  w.key("linux").begin_object().key("namespaces").begin_array();
  for (const char* ns : {"pid", "network", "ipc", "uts", "mount"})
    w.begin_object().key("type").value(ns).end_object();
  w.end_array().end_object();
  w.end_object();
  return std::move(w).str();
}

std::vector<std::string> launch_argv(const Config& config, const CreateOptions& options) {
  const Resources& r = options.resources;
  Script script;
  if (config.cgroup_version != 0 && (r.memory_bytes || r.pids || r.cpus))
    add_cgroups(script, config, r);
  if (!config.runsc.empty()) {
    add_runsc(script, config);
    return scripted(script, {runsc_spec(config, options)});
  }
  std::vector<std::string> argv = drop_privileges(config);
  auto add = [&](std::initializer_list<std::string> items) {
    argv.insert(argv.end(), items.begin(), items.end());
  };
  add({config.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
       "--new-session", "--cap-drop", "ALL", "--clearenv", "--hostname", config.id});
  if (!config.root.empty()) {
    add({"--ro-bind", config.root, "/"});
  } else {
    add({"--ro-bind", "/usr", "/usr"});
    for (const auto& [name, target] : config.root_links)
      add({"--symlink", target, "/" + name});
    for (const auto& dir : config.root_dirs)
      add({"--ro-bind", "/" + dir, "/" + dir});
    for (const auto& file : config.etc)
      add({"--ro-bind", file, file});
  }
  add({"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", config.home});
  add({"--ro-bind", config.agent, std::string(kAgentPath)});
  if (!script.setup.empty() && r.memory_bytes) {
    // The cgroup's count of OOM kills, which the machine reads through the agent to tell an
    // out-of-memory kill from another SIGKILL.
    const std::string group = config.cgroup_memory + "/sandboxio/" + config.id;
    add({"--ro-bind",
         group + (config.cgroup_version == 2 ? "/memory.events" : "/memory.oom_control"),
         std::string(kOomEventsPath)});
  }
  const std::string workdir = options.workdir.empty() ? config.home : options.workdir;
  add({"--chdir", workdir, "--setenv", "PATH", kPath, "--setenv", "HOME", config.home, "--setenv",
       "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"});
  const auto agent = agent_argv(options);
  argv.insert(argv.end(), agent.begin(), agent.end());
  if (script.setup.empty()) return argv;
  return scripted(script, std::move(argv));
}

}  // namespace sandboxio::local
