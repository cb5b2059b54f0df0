// Process endpoints: posix_spawn from one long-lived thread (see spawn.hpp).
#include "sandboxio/spawn.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sandboxio {
namespace {

// The parent of every spawned process: a thread that never ends before the process does.
// PR_SET_PDEATHSIG fires when the *thread* that forked ends, so spawning from a caller's
// thread (an io_context's, a worker's) would tie the sandbox to that thread.
class Spawner {
 public:
  Spawner() {
    std::thread([this] { loop(); }).detach();
  }

  Result<SpawnedProcess> run(const Endpoint& endpoint) {
    std::packaged_task<Result<SpawnedProcess>()> task([&endpoint] { return spawn(endpoint); });
    auto result = task.get_future();
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back([&task] { task(); });
    }
    ready_.notify_one();
    return result.get();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  static Result<SpawnedProcess> spawn(const Endpoint& endpoint) {
    auto failed = [&](const std::string& what, int error) {
      return Problem{errc::ConnectionFailed,
                     "cannot start " +
                         (endpoint.argv.empty() ? std::string("a process") : endpoint.argv[0]) +
                         ": " + what + ": " + std::strerror(error),
                     {}};
    };
    if (endpoint.argv.empty() || endpoint.argv[0].empty() || endpoint.argv[0][0] != '/')
      return failed("the program must be an absolute path", EINVAL);
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return failed("socketpair", errno);
    // Room for large frames each way (a tunnel's window, a file's chunks): fewer wake-ups
    // of either end. The kernel caps it at net.core.wmem_max; that is fine too.
    for (int fd : pair) {
      const int size = 4 << 20;
      (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    for (int target : {0, 1, 2})
      posix_spawn_file_actions_adddup2(&actions, pair[1], target);
    // Nothing else of this process reaches the launcher (and through it a sandbox): every
    // descriptor from 3 on is closed, close-on-exec or not.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    // A session of its own: no terminal's signals; and default signal dispositions and mask.
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> argv;
    for (const auto& a : endpoint.argv)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    char path[] = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    char* envp[] = {path, nullptr};
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(pair[1]);
    if (rc != 0) {
      ::close(pair[0]);
      return failed("posix_spawn", rc);
    }
    ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    SpawnedProcess spawned;
    spawned.fd = pair[0];
    spawned.process = ChildProcess(pid);
    return spawned;
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
};

// The pids listed in one of Linux's /proc/PID/task/TID/children files.
void read_children(const std::string& path, std::vector<pid_t>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const char* p = text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    if (v > 0) into.push_back(static_cast<pid_t>(v));
    p = end;
  }
}

// The children of `pid`, forked by any of its threads: a Go program (runsc) forks from
// whichever thread runs, and each thread lists only its own children.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return children;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    read_children(tasks + "/" + entry->d_name + "/children", children);
  }
  ::closedir(dir);
  return children;
}

// Every descendant of `pid`, parents before their children. Bounded: a tree that forks faster
// than it can be read is cut off, and what was found is still killed.
std::vector<pid_t> descendants_of(pid_t pid) {
  constexpr std::size_t kMost = 4096;
  std::vector<pid_t> found = children_of(pid);
  for (std::size_t i = 0; i < found.size() && found.size() < kMost; ++i) {
    for (pid_t child : children_of(found[i]))
      found.push_back(child);
  }
  return found;
}

}  // namespace

void ChildProcess::end() noexcept {
  if (pid_ <= 0) return;
  // A launcher whose descendants are the sandbox: bubblewrap, the init of a PID namespace
  // (killing it ends every process in the namespace), or runsc with its re-executed self, its
  // gofer and its Sentry. Every descendant is killed and waited for (pidfds, bounded), then the
  // launcher gets the rest of the time to finish on its own (a shell removes the cgroups and
  // the bundle it made), and is killed and reaped. When end() returns, nothing of the sandbox
  // is left.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto wait_for = [&](int fd) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return false;
    }
  };
  const std::vector<pid_t> doomed = descendants_of(pid_);
  std::vector<int> exits;
  for (pid_t p : doomed) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, p, 0));
    ::kill(p, SIGKILL);
    if (fd >= 0) exits.push_back(fd);
  }
  for (int fd : exits) {
    (void)wait_for(fd);
    ::close(fd);
  }
  if (const int self = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)); self >= 0) {
    (void)wait_for(self);
    ::close(self);
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = 0;
}

Result<SpawnedProcess> spawn_connected(const Endpoint& endpoint) {
  static Spawner* spawner = new Spawner;  // never destroyed: its thread lives to the end
  return spawner->run(endpoint);
}

}  // namespace sandboxio
