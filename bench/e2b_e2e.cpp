// End-to-end e2b:// benchmarks against the local E2B-compatible server (tests/e2b/server): the
// same work done side by side by sandboxio and by E2B's official JS SDK (a warm, long-lived
// Node process, bench/node/e2b_peer.mjs), taking turns round by round.
//
//   latency       run({"true"}) on a running sandbox (the SDK: commands.run('true'))
//   first_output  create a sandbox, run `echo ready`, first output
//   file          an M MiB file written, then read back
//   concurrent    K sandboxes each created, running `echo ready` and killed, all at once:
//                 sandboxio's Asio API from one thread, next to the SDK with Promise.all;
//                 each in a process of its own, for its wall time and peak memory
//
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (NODE_EXTRA_CA_CERTS for TLS) name the server
// for both; scripts/bench-report starts one and sets them.
//
//   sandboxio_bench_e2b [--short] [--rounds N] [--runs N] [--file-mib N] [--dsn DSN]
//                       [--template T] [--json FILE] [--rtt-ms N] [--concurrent K]
//                       [--near-dsn-options ?K=V]
//   sandboxio_bench_e2b --concurrent-child K DSN   (one measured process)
//
// --rtt-ms only labels the results: the round-trip time comes from the URLs, when they lead
// through bench/node/delay_proxy.mjs (bench/run.sh does that for its second e2b:// pass).
// --near-dsn-options names the same server without the proxy (its own api_url and
// sandbox_url): each latency round then also times a run on a second sandbox reached directly,
// so that (far - near) / RTT counts the round trips a run spends, the server's own time (which
// drifts with the machine's load) cancelled within the same minute.
#include <iostream>
#include <optional>
#include <string>

#include "bench_support.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace sandboxio::bench;

struct Options {
  int rounds = 30;
  int runs = 5;
  std::uint64_t file_mib = 256;
  std::string tmpl = "base";
  std::string dsn_options;  // appended to e2b://TEMPLATE (for example ?ca=/path/ca.pem)
  std::string json;
  int rtt_ms = 0;  // the round-trip time a delaying proxy adds (bench/node/delay_proxy.mjs)
  int concurrent = 100;
  std::string near_dsn_options;  // the same server reached without the delaying proxy
};

// K sandboxes at once from one thread (Asio), each created, running `echo ready` and killed
// when its handle goes; prints the wall time and this process's peak memory.
int concurrent_child(int n, const std::string& dsn) {
  const auto t = Clock::now();
  const int ok = concurrent_asio(n, dsn, {"echo", "ready"});
  std::printf("{\"wall_ms\":%.1f,\"peak_rss_kib\":%ld,\"ok\":%d}\n", ms_since(t), peak_rss_kib(),
              ok);
  return ok == n ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc == 4 && std::string(argv[1]) == "--concurrent-child")
    return concurrent_child(std::stoi(argv[2]), argv[3]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--short") {
      o.rounds = 5;
      o.runs = 1;
      o.file_mib = 8;
      o.concurrent = 4;
    } else if (a == "--concurrent") {
      o.concurrent = std::stoi(next());
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--runs") {
      o.runs = std::stoi(next());
    } else if (a == "--file-mib") {
      o.file_mib = std::stoull(next());
    } else if (a == "--template") {
      o.tmpl = next();
    } else if (a == "--dsn-options") {
      o.dsn_options = next();
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--rtt-ms") {
      o.rtt_ms = std::stoi(next());
    } else if (a == "--near-dsn-options") {
      o.near_dsn_options = next();
    } else {
      std::cerr << "usage: sandboxio_bench_e2b [--short] [--rounds N] [--runs N] [--file-mib N] "
                   "[--template T] [--dsn-options ?K=V] [--json FILE] [--rtt-ms N] "
                   "[--concurrent K] [--near-dsn-options ?K=V]\n";
      return 2;
    }
  }
  if (!std::getenv("E2B_API_URL") || !std::getenv("E2B_SANDBOX_URL")) {
    std::cerr << "set E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (scripts/bench-report starts "
                 "the local server and sets them)\n";
    return 2;
  }
  const std::string dsn = "e2b://" + o.tmpl + o.dsn_options;
  const std::string sdk = std::string(SBX_SOURCE_DIR) + "/tests/e2b/node_modules/e2b/package.json";
  std::unique_ptr<NodePeer> node;
  std::map<std::string, std::string> versions;
  if (::access(sdk.c_str(), R_OK) == 0) {
    node = NodePeer::start({"node", std::string(SBX_SOURCE_DIR) + "/bench/node/e2b_peer.mjs"});
    versions["e2b JS SDK"] = shell_output("node -p \"require('" + sdk + "').version\"");
    versions["node"] = shell_output("node --version");
  } else {
    std::cerr
        << "*** the E2B SDK is not installed (npm ci in tests/e2b): its column is empty ***\n";
  }
  auto node_number = [&](const std::string& cmd, const char* key) -> std::optional<double> {
    if (!node) return std::nullopt;
    return number_in(node->call(cmd), key);
  };
  Samples samples;

  auto sb = sandboxio::sync::Sandbox::create(dsn);
  (void)node_number(R"({"op":"open","template":")" + o.tmpl + "\"}", "ms");
  (void)sb.run({"true"});
  (void)node_number(R"({"op":"run_true"})", "ms");

  std::optional<sandboxio::sync::Sandbox> near;
  if (!o.near_dsn_options.empty()) {
    near.emplace(sandboxio::sync::Sandbox::create("e2b://" + o.tmpl + o.near_dsn_options));
    (void)near->run({"true"});
  }

  std::cerr << "latency: " << o.rounds << " rounds\n";
  for (int r = 0; r < o.rounds; ++r) {
    const auto t = Clock::now();
    if (!sb.run({"true"}).ok()) std::cerr << "sandboxio: run failed\n";
    samples["latency_ms"]["sandboxio"].push_back(ms_since(t));
    if (near) {
      const auto n = Clock::now();
      if (!near->run({"true"}).ok()) std::cerr << "sandboxio: near run failed\n";
      samples["latency_near_ms"]["sandboxio"].push_back(ms_since(n));
    }
    if (auto ms = node_number(R"({"op":"run_true"})", "ms"))
      samples["latency_ms"]["E2B JS SDK"].push_back(*ms);
  }

  std::cerr << "first output: " << o.runs << " runs\n";
  for (int r = 0; r < o.runs; ++r) {
    samples["first_output_ms"]["sandboxio"].push_back(sandboxio_first_output(dsn));
    if (auto ms = node_number(R"({"op":"first_output","template":")" + o.tmpl + "\"}", "ms"))
      samples["first_output_ms"]["E2B JS SDK"].push_back(*ms);
  }

  std::cerr << "file: " << o.runs << " runs of " << o.file_mib << " MiB\n";
  const std::string content(o.file_mib << 20, 'f');
  const double mib = static_cast<double>(o.file_mib);
  for (int r = 0; r < o.runs; ++r) {
    const auto [w, rd] = sandboxio_file(sb, content);
    add_file_sample(samples, "sandboxio", mib, w, rd);
    if (!node) continue;
    if (auto times = file_times_in(
            node->call(R"({"op":"file","bytes":)" + std::to_string(content.size()) + "}")))
      add_file_sample(samples, "E2B JS SDK", mib, times->first, times->second);
  }
  (void)node_number(R"({"op":"close"})", "x");

  std::cerr << "concurrent: " << o.runs << " runs of " << o.concurrent << " sandboxes\n";
  const std::string self = shell_output("readlink -f /proc/" + std::to_string(::getpid()) + "/exe");
  const std::string k = std::to_string(o.concurrent);
  for (int r = 0; r < o.runs; ++r) {
    const std::vector<std::pair<std::string, std::string>> modes = {
        {"sandboxio asio, 1 thread", self + " --concurrent-child " + k + " '" + dsn + "'"},
        {"E2B JS SDK, Promise.all", node ? "node " + std::string(SBX_SOURCE_DIR) +
                                               "/bench/node/e2b_peer.mjs --concurrent " + k + " " +
                                               o.tmpl
                                         : ""},
    };
    for (const auto& [name, cmd] : modes) {
      if (cmd.empty()) continue;
      if (auto m = measure_child(cmd)) {
        samples["concurrent_wall_ms"][name].push_back(m->wall_ms);
        samples["concurrent_peak_mib"][name].push_back(m->peak_mib);
      }
    }
  }

  print_medians("e2b:// end to end against the local server, template " + o.tmpl +
                    (o.rtt_ms ? ", " + std::to_string(o.rtt_ms) + " ms RTT added" : ""),
                samples);
  if (!o.json.empty()) {
    write_json(o.json,
               {{"template", "\"" + o.tmpl + "\""},
                {"rounds", std::to_string(o.rounds)},
                {"runs", std::to_string(o.runs)},
                {"file_mib", std::to_string(o.file_mib)},
                {"rtt_ms", std::to_string(o.rtt_ms)},
                {"concurrent", std::to_string(o.concurrent)}},
               versions, samples);
  }
  return 0;
}
