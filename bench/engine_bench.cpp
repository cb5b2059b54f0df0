// Engine benchmarks, no I/O: the codecs on the hot paths in bytes per second, next to memcpy
// of the same bytes (the physical limit), and the per-operation overhead of run() on fake://.
//   sandboxio_bench_engine [--benchmark_filter=Demux] [--benchmark_min_time=0.01]
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "sandboxio/docker_stream.hpp"
#include "sandboxio/http.hpp"
#include "sandboxio/json.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/tar.hpp"

namespace {

constexpr std::size_t kMiB = 1 << 20;

std::string docker_frames(std::size_t total, std::size_t frame) {
  std::string out;
  for (std::size_t done = 0; done < total; done += frame) {
    const auto n = static_cast<std::uint32_t>(std::min(frame, total - done));
    out.push_back(done % (2 * frame) == 0 ? 1 : 2);
    out.append(3, '\0');
    for (int s = 24; s >= 0; s -= 8)
      out.push_back(static_cast<char>((n >> s) & 0xff));
    out.append(n, 'x');
  }
  return out;
}

void BM_Memcpy(benchmark::State& state) {
  const std::string src(kMiB, 'x');
  std::string dst(kMiB, '\0');
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_Memcpy);

// Demultiplexing 1 MiB of 32 KiB frames, handing each payload piece over (copied out, as the
// machine does into an OutputChunk).
void BM_DockerDemux(benchmark::State& state) {
  const std::string wire = docker_frames(kMiB, static_cast<std::size_t>(state.range(0)));
  std::string out(kMiB, '\0');
  for (auto _ : state) {
    sandboxio::docker::StreamDemux demux;
    std::size_t at = 0;
    demux.feed(wire, [&](sandboxio::docker::FrameType, std::string_view piece) {
      std::memcpy(out.data() + at, piece.data(), piece.size());
      at += piece.size();
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_DockerDemux)->Arg(4096)->Arg(32768);

// A 1 MiB chunked response body through the HTTP parser, taken as it comes.
void BM_HttpChunkedBody(benchmark::State& state) {
  std::string wire =
      "HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (std::size_t i = 0; i < kMiB; i += 32768)
    wire += "8000\r\n" + std::string(32768, 'y') + "\r\n";
  wire += "0\r\n\r\n";
  for (auto _ : state) {
    sandboxio::http::ResponseParser p;
    std::string_view rest = wire;
    std::size_t got = 0;
    while (!rest.empty() && !p.complete()) {
      rest.remove_prefix(p.feed(rest.substr(0, 65536)));
      got += p.take_body().size();
    }
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_HttpChunkedBody);

// The 101 upgrade head of an exec start: the per-exec cost of the HTTP layer.
void BM_HttpUpgradeHead(benchmark::State& state) {
  const std::string head =
      "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
      "Connection: Upgrade\r\nUpgrade: tcp\r\nApi-Version: 1.41\r\n\r\n";
  for (auto _ : state) {
    sandboxio::http::ResponseParser p;
    benchmark::DoNotOptimize(p.feed(head));
    if (!p.upgraded()) state.SkipWithError("not upgraded");
  }
}
BENCHMARK(BM_HttpUpgradeHead);

void BM_NdjsonLines(benchmark::State& state) {
  std::string wire;
  while (wire.size() < kMiB)
    wire += R"({"status":"Downloading","progressDetail":{"current":1,"total":2},"id":"a1"})"
            "\n";
  for (auto _ : state) {
    sandboxio::http::LineSplitter lines;
    std::size_t n = 0;
    for (std::size_t i = 0; i < wire.size(); i += 16384) {
      lines.feed(std::string_view(wire).substr(i, 16384));
      while (lines.next_line())
        ++n;
    }
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * wire.size()));
}
BENCHMARK(BM_NdjsonLines);

void BM_TarRead(benchmark::State& state) {
  sandboxio::tar::Entry e;
  e.name = "tmp/big.bin";
  e.size = kMiB;
  const std::string archive = sandboxio::tar::header(e).value() + std::string(kMiB, 'z') +
                              sandboxio::tar::padding(kMiB) + sandboxio::tar::end();
  std::string out;
  out.reserve(kMiB);
  for (auto _ : state) {
    out.clear();
    sandboxio::tar::Reader r;
    r.feed(archive, {}, [&](std::string_view d) { out.append(d); });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_TarRead);

void BM_JsonExecInspect(benchmark::State& state) {
  const std::string text =
      R"({"CanRemove":false,"ContainerID":"b1f0c","DetachKeys":"","ExitCode":3,"ID":"e1",)"
      R"("OpenStderr":true,"OpenStdin":false,"OpenStdout":true,"ProcessConfig":{"arguments":)"
      R"(["-c","exit 3"],"entrypoint":"sh","privileged":false,"tty":false},"Running":false,"Pid":4242})";
  for (auto _ : state) {
    auto v = sandboxio::json::parse(text);
    benchmark::DoNotOptimize(v.value().int_at("ExitCode"));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_JsonExecInspect);

// The whole per-operation overhead of the sync API on fake:// (no wire): nanoseconds per run.
void BM_FakeRunOverhead(benchmark::State& state) {
  auto sb = sandboxio::sync::Sandbox::create("fake://");
  for (auto _ : state) {
    auto r = sb.run({"true"});
    benchmark::DoNotOptimize(r.exit_code);
  }
}
BENCHMARK(BM_FakeRunOverhead);

}  // namespace

BENCHMARK_MAIN();
