// The subcommands of the sandboxio command line.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace sandboxio::cli {

struct RunArgs {
  std::string backend;
  double timeout_seconds = 60;
  std::vector<std::string> allow;
  bool learn = false;  // egress learning mode: refuse everything, print what was tried
  std::vector<std::string> env;
  std::vector<std::string> files;
  std::string routing, tool = "run", tenant = "*";
  bool json = false;
  std::vector<std::string> command;
};

int run(const RunArgs& args);
int routing_check(const std::string& file, bool json);
int doctor(bool json, const std::string& image);

struct ReapArgs {
  std::vector<std::string> backends;  // DSNs; default docker://
  std::vector<std::string> labels;    // KEY=VALUE
  std::string older_than;             // a duration
  bool kill = false;
  bool json = false;
  bool check = false;  // exit 3 when any is found (a leak check)
};
int reap(const ReapArgs& args);
int mcp(const std::string& backend, const std::string& http, const std::string& routing,
        const std::string& tenant);
struct BenchArgs {
  std::string backend;     // DSN; default as `demo` picks
  int runs = 5;            // sandboxes created and killed; first outputs and streams
  int rounds = 30;         // run({"true"}) rounds
  std::uint64_t mib = 64;  // bytes per stdout stream, in MiB
  bool json = false;
};
int bench(const BenchArgs& args);
struct ReplayArgs {
  std::string trace;     // a .sbxtrace file
  std::string html;      // write one static page here
  bool records = false;  // print only the records, as JSON lines
  bool inputs = false;   // show the connection-level inputs in the timeline
  bool quiet = false;    // only the verdict
};
int replay(const ReplayArgs& args);
/// Prints the completion script for `shell` (bash, zsh or fish), generated from `app`.
int completion(const CLI::App& app, const std::string& shell, std::ostream& out);

}  // namespace sandboxio::cli
