// A recorded session and its replay, for the flight recorder's tests on every backend: the
// session makes each kind of call (create, run, stream, a file round trip, a timeout, code,
// kill) with recording and an audit log on; the replay runs the trace offline and reports the
// results and records it gave, to compare with what the session's caller and sink saw.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sandboxio/flight_recorder.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::testing {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("sbx-flight-" + std::to_string(::getpid()) + "-" + std::to_string(++n));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The one trace a recording directory holds.
inline fs::path the_trace(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    found.push_back(e.path());
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? fs::path{} : found.front();
}

/// What a replay gave: the results of completed operations and the records as the audit sink
/// would have written them.
struct Seen final : flight::ReplayObserver {
  std::vector<ExecResult> results;
  std::vector<Bytes> reads;
  std::string records;
  void event(const Event& ev, Instant) override {
    if (const auto* done = std::get_if<event::Done>(&ev)) {
      if (const auto* r = std::get_if<ExecResult>(&done->value)) results.push_back(*r);
      if (const auto* b = std::get_if<Bytes>(&done->value)) reads.push_back(*b);
    }
  }
  void record(const OperationRecord& r) override { records += to_json_line(r); }
};

/// Replays trace bytes offline on the machine their header describes.
inline Result<flight::ReplaySummary> replay_bytes(const std::string& bytes, Seen* seen = nullptr) {
  flight::TraceReader trace(bytes);
  if (!trace.header()) return trace.header().problem();
  auto machine = machine_for_replay(trace.header().value());
  if (!machine) return machine.problem();
  return flight::replay(*machine.value(), trace, seen);
}

struct LiveSession {
  std::vector<ExecResult> results;
  std::vector<Bytes> reads;
};

/// The session, recorded into `dir` and audited into `audit`: what its caller saw.
inline LiveSession recorded_session(const std::string& dsn, const fs::path& dir,
                                    const fs::path& audit, bool with_code = true,
                                    std::size_t file_bytes = 11) {
  using namespace std::chrono_literals;
  CreateOptions o;
  o.record = dir.string();
  o.audit.sink = std::make_shared<JsonLinesFileSink>(audit.string());
  o.audit.capture_commands = true;
  // Each record reaches the file before its operation returns, unless the sink takes longer
  // than this: generous, so that a machine loaded by a parallel build does not drop one.
  o.audit.sink_timeout = std::chrono::seconds(30);
  o.env.set("GREETING", "hello");
  LiveSession live;
  auto sb = sync::Sandbox::create(dsn, o);
  live.results.push_back(sb.run({"sh", "-c", "echo $GREETING; echo oops >&2; exit 3"}));
  EXPECT_EQ(live.results.back().exit_code, 3);
  auto p = sb.stream({"sh", "-c", "echo one; echo two >&2; echo three"});
  std::string streamed;
  while (auto chunk = p.next())
    streamed += chunk->data;
  live.results.push_back(p.wait());
  EXPECT_NE(streamed.find("three"), std::string::npos);
  std::string data(file_bytes, '\0');
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>((i * 131) ^ (i >> 9));
  sb.write_file("/tmp/data.bin", data);
  live.reads.push_back(sb.read_file("/tmp/data.bin"));
  EXPECT_EQ(live.reads.back(), data);
  Command slow;
  slow.argv = {"sleep", "5"};
  slow.timeout = 300ms;
  live.results.push_back(sb.run(slow));
  EXPECT_EQ(live.results.back().termination, Termination::Timeout);
  if (with_code) live.results.push_back(sb.run_code("print(6 * 7)"));
  sb.kill();
  return live;
}

/// Records the session on `dsn`, replays its trace offline and checks that the replay gave
/// the same results, reads and records, byte for byte; returns the replay's summary.
inline flight::ReplaySummary expect_identical_replay(const std::string& dsn, bool with_code,
                                                     std::size_t file_bytes) {
  TempDir dir;
  const fs::path audit = dir.path / "audit.jsonl";
  const fs::path traces = dir.path / "traces";
  const LiveSession live = recorded_session(dsn, traces, audit, with_code, file_bytes);
  const fs::path trace = the_trace(traces);
  struct stat st {};
  EXPECT_EQ(::stat(trace.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a trace holds what the sandbox printed: owner only";
  Seen seen;
  auto summary = replay_bytes(slurp(trace), &seen);
  EXPECT_TRUE(summary) << summary.problem().describe();
  if (!summary) return {};
  EXPECT_TRUE(summary.value().complete);
  EXPECT_FALSE(summary.value().truncated);
  EXPECT_EQ(seen.results, live.results);
  EXPECT_EQ(seen.reads, live.reads);
  EXPECT_EQ(seen.records, slurp(audit)) << "the records, byte for byte as the audit sink got them";
  auto s = summary.value();
  s.recorded.trace_bytes = fs::file_size(trace);
  return s;
}

}  // namespace sandboxio::testing
