// sandboxio bench: the latencies and the stream throughput of one backend, measured the way a
// user's program meets them (the sync API, one sandbox at a time), so that setups can be
// compared on the user's own machine: create, run({"true"}), nothing to first output, a stdout
// stream, kill. Minimum, median and maximum of each.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Spread {
  double min = 0, median = 0, max = 0;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return {};
  const std::size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {v.front(), median, v.back()};
}

/// The measures in the order they are printed: JSON key, label, unit ("ms" or "MiB/s").
struct Measure {
  const char* key;
  const char* label;
  bool throughput;
};
constexpr Measure kMeasures[] = {
    {"create_ms", "create", false},
    {"run_ms", "run({\"true\"})", false},
    {"first_output_ms", "nothing to first output", false},
    {"stream_mib_s", "stdout stream", true},
    {"kill_ms", "kill", false},
};

std::string shown(double value, bool throughput) {
  if (throughput) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f MiB/s", value);
    return buf;
  }
  // Milliseconds in, three significant digits out: a run on fake:// takes microseconds.
  char buf[32];
  if (value < 1)
    std::snprintf(buf, sizeof buf, "%.0f us", value * 1000);
  else if (value < 1000)
    std::snprintf(buf, sizeof buf,
                  value < 10    ? "%.2f ms"
                  : value < 100 ? "%.1f ms"
                                : "%.0f ms",
                  value);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", value / 1000);
  return buf;
}

}  // namespace

int bench(const BenchArgs& a) {
  const auto chosen = choose_backend(a.backend);
  const std::string& dsn = chosen.first;
  const bool progress = is_terminal(stderr) && !a.json;
  auto say = [&](const std::string& what) {
    if (progress) std::cerr << "\r\033[K" << what << std::flush;
  };
  std::map<std::string, std::vector<double>> samples;
  CreateOptions options;
  options.lifetime = std::chrono::minutes(10);
  const std::uint64_t bytes = a.mib << 20;
  const std::vector<std::string> stream_argv = {"head", "-c", std::to_string(bytes), "/dev/zero"};
  std::vector<Problem> warnings;
  for (int i = 0; i < a.runs && g_interrupted == 0; ++i) {
    say("create " + std::to_string(i + 1) + "/" + std::to_string(a.runs));
    auto t = Clock::now();
    auto sb = sync::Sandbox::create(dsn, options);
    samples["create_ms"].push_back(ms_since(t));
    if (i == 0) warnings = sb.warnings();
    if (i == 0) {
      // One sandbox serves the per-command measures: `rounds` runs (after one that warms up
      // whatever the backend caches), then `runs` first outputs and streams.
      (void)sb.run({"true"});
      for (int r = 0; r < a.rounds && g_interrupted == 0; ++r) {
        say("run " + std::to_string(r + 1) + "/" + std::to_string(a.rounds));
        t = Clock::now();
        const auto res = sb.run({"true"});
        samples["run_ms"].push_back(ms_since(t));
        if (!res.ok()) throw Error(errc::ProtocolError, "bench: `true` did not exit 0 on " + dsn);
      }
      for (int r = 0; r < a.runs && g_interrupted == 0; ++r) {
        say("first output and stream " + std::to_string(r + 1) + "/" + std::to_string(a.runs));
        t = Clock::now();
        auto first = sb.stream({"echo", "first"});
        if (!first.next())
          throw Error(errc::ProtocolError, "bench: `echo first` printed nothing on " + dsn);
        samples["first_output_ms"].push_back(ms_since(t));
        while (first.next()) {
        }
        (void)first.wait();
        t = Clock::now();
        auto stream = sb.stream(stream_argv);
        std::uint64_t got = 0;
        while (auto chunk = stream.next())
          got += chunk->data.size();
        const double ms = ms_since(t);
        const auto end = stream.wait();
        if (!end.ok() || got != bytes) {
          throw Error(errc::ProtocolError, "bench: the stream of " + std::to_string(bytes) +
                                               " bytes brought " + std::to_string(got) + " on " +
                                               dsn);
        }
        samples["stream_mib_s"].push_back(static_cast<double>(a.mib) / (ms / 1000.0));
      }
    }
    t = Clock::now();
    sb.kill();
    samples["kill_ms"].push_back(ms_since(t));
  }
  say("");
  if (g_interrupted != 0) return 130;
  print_warnings(warnings);

  if (a.json) {
    JsonWriter w;
    w.begin_object().key("backend").value(dsn).key("runs").value(a.runs);
    w.key("rounds").value(a.rounds).key("stream_mib").value(a.mib);
    for (const auto& m : kMeasures) {
      const Spread s = spread(samples[m.key]);
      w.key(m.key).begin_object().key("min").value(s.min).key("median").value(s.median);
      w.key("max").value(s.max).end_object();
    }
    w.end_object();
    std::cout << w.str() << "\n";
    return 0;
  }
  const Style out = style_for(stdout);
  std::cout << "sandboxio bench on " << dsn << " " << out.dim("(" + chosen.second + ")") << "\n"
            << out.dim("  " + std::to_string(a.runs) + " sandboxes, " + std::to_string(a.rounds) +
                       " rounds of run, " + std::to_string(a.mib) + " MiB per stream")
            << "\n";
  std::printf("  %-26s %12s %12s %12s\n", "", "min", "median", "max");
  for (const auto& m : kMeasures) {
    const Spread s = spread(samples[m.key]);
    std::printf("  %-26s %12s %12s %12s\n", m.label, shown(s.min, m.throughput).c_str(),
                shown(s.median, m.throughput).c_str(), shown(s.max, m.throughput).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace sandboxio::cli
