// The shared state of a fake World. Private to backends/fake.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/fake.hpp"
#include "shell.hpp"

namespace sandboxio::fake {

struct FakeSandbox {
  std::string id;
  detail::Vfs fs;
  std::map<std::string, std::string> env;  // from CreateOptions
  std::string workdir = "/home/user";
  NetworkPolicy network;
  std::chrono::seconds lifetime{0};
  Instant expires_at{};
  bool gone = false;
  int next_pid = 100;
  /// Every process ever started: execs (until they end) and their background children (until
  /// their virtual end time, or until the exec that started them is killed).
  struct Process {
    int pid = 0;
    std::string cmdline;
    std::optional<Instant> ends_at;  // nullopt: runs until its exec ends
    OpId owner = 0;                  // the exec that started it
    bool ended = false;
    [[nodiscard]] bool alive_at(Instant t) const { return !ended && (!ends_at || *ends_at > t); }
  };
  std::vector<Process> processes;
  Instant observed{};  // the latest `now` a machine showed this sandbox
  std::map<std::string, std::map<std::string, std::string>> contexts;  // code contexts
  int next_context = 1;
  std::vector<std::string> secrets;
  std::map<std::string, std::string> labels;  // CreateOptions::labels
};

struct World::Impl {
  mutable std::mutex mu;
  Profile profile;
  struct Rule {
    std::function<bool(const std::vector<std::string>&)> match;
    Response response;
  };
  std::vector<Rule> rules;
  std::vector<std::pair<std::string, Response>> code_rules;
  std::deque<Call> calls;                                         // the newest kMaxCalls
  std::map<std::string, std::shared_ptr<FakeSandbox>> sandboxes;  // those not gone
  std::deque<std::string> gone;  // ids of the newest kMaxGone gone ones (connect: SandboxGone)
  std::uint64_t next_sandbox = 1;

  // A world lives as long as the process that made it (the default one always does): what it
  // keeps is bounded, whatever that process creates and kills.
  static constexpr std::size_t kMaxCalls = 100000;
  static constexpr std::size_t kMaxGone = 4096;

  /// Forgets a sandbox that is gone (its machines keep their own reference); call under mu.
  void retire(const std::string& id) {
    if (sandboxes.erase(id) == 0) return;
    gone.push_back(id);
    if (gone.size() > kMaxGone) gone.pop_front();
  }
  [[nodiscard]] bool was_gone(const std::string& id) const {
    return std::find(gone.begin(), gone.end(), id) != gone.end();
  }
  /// Runs `f` with the world locked. Defined in world.cpp, so that the machine's own objects
  /// take no lock (the purity gate checks them): the world is fake://'s "service", shared by
  /// the machines of every thread, and this is the only way in.
  void locked(const std::function<void(Impl&)>& f);
  void record(Call call) {
    calls.push_back(std::move(call));
    if (calls.size() > kMaxCalls) calls.pop_front();
  }
};

}  // namespace sandboxio::fake
