// Engine benchmarks, no I/O: the codecs on the hot paths in bytes per second, next to memcpy
// of the same bytes (the physical limit), and the per-operation overhead of run() on fake://.
//   sandboxio_bench_engine [--benchmark_filter=Demux] [--benchmark_min_time=0.01]
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "../tests/support/free_port.hpp"
#include "sandboxio/codec/base64.hpp"
#include "sandboxio/codec/connect.hpp"
#include "sandboxio/codec/docker_stream.hpp"
#include "sandboxio/codec/http.hpp"
#include "sandboxio/codec/http2.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/tar.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/flight.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/telemetry.hpp"
#include "sandboxio/tls.hpp"

#include <openssl/ssl.h>

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

// envd's Start stream as the e2b:// machine reads it: Connect envelopes of JSON data events
// carrying base64 stdout, decoded back to the bytes (1 MiB of output per iteration).
std::string envd_stream(std::size_t total, std::size_t piece) {
  std::string wire;
  const std::string data(piece, 'x');
  const std::string b64 = sandboxio::base64_encode(data);
  for (std::size_t done = 0; done < total; done += piece)
    wire += sandboxio::connect::envelope(R"({"event":{"data":{"stdout":")" + b64 + R"("}}})");
  return wire;
}

void BM_ConnectEnvelopes(benchmark::State& state) {
  const std::string wire = envd_stream(kMiB, 32768);
  for (auto _ : state) {
    sandboxio::connect::EnvelopeReader r;
    r.feed(wire);
    std::size_t out = 0;
    while (auto e = r.next()) {
      auto doc = sandboxio::json::parse(e->message);
      const auto* data = doc.value().find("event")->find("data");
      out += sandboxio::base64_decode(data->string_at("stdout").value())->size();
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_ConnectEnvelopes);

// The whole e2b:// machine path, bytes in to output events out: a stream() whose envd reply
// (HTTP head, then 1 MiB of stdout in envelopes, then the end) is fed in 64 KiB reads, every
// OutputChunk taken and consumed.
void BM_E2bMachineStream(benchmark::State& state) {
  using namespace sandboxio;
  e2b::Config c;
  c.template_id = "base";
  c.api_key = "k";
  c.api.endpoint.kind = Endpoint::Kind::Tcp;
  c.api.host = "api";
  auto m = e2b::make_machine(c);
  Instant now{};
  auto drain = [&](std::vector<ConnId>& opened) {
    std::size_t out = 0;
    while (auto r = m->poll_request()) {
      if (auto* o = std::get_if<request::Open>(&*r)) opened.push_back(o->conn);
    }
    while (auto e = m->poll_event()) {
      if (auto* o = std::get_if<event::Output>(&*e)) {
        out += o->chunk.data.size();
        m->handle_consumed(o->op, o->chunk.data.size(), now);
      }
    }
    return out;
  };
  std::vector<ConnId> opened;
  (void)m->submit_create({}, now);
  drain(opened);
  const std::string created =
      R"({"sandboxID":"isbx","templateID":"base","clientID":"c","envdVersion":"0.6.13"})";
  const std::string create_reply =
      "HTTP/1.1 201 Created\r\nContent-Length: " + std::to_string(created.size()) + "\r\n\r\n" +
      created;
  m->handle_connected(opened.back(), now);
  (void)m->handle_bytes(opened.back(), create_reply, now);
  drain(opened);
  std::string body =
      connect::envelope(R"({"event":{"start":{"pid":7}}})") + envd_stream(kMiB, 32768) +
      connect::envelope(R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})") +
      connect::envelope("{}", connect::kEndStream);
  const std::string reply =
      "HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (auto _ : state) {
    opened.clear();
    (void)m->submit_stream(Command{.argv = {"cat"}}, now);
    drain(opened);
    const ConnId conn = opened.back();
    m->handle_connected(conn, now);
    std::size_t out = drain(opened);
    std::string_view rest = reply;
    while (!rest.empty()) {
      const std::size_t used = m->handle_bytes(conn, rest.substr(0, 65536), now);
      rest.remove_prefix(used);
      out += drain(opened);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_E2bMachineStream);

// The whole docker:// machine path, bytes in to output events out: a stream() (exec create,
// exec start answered by the 101 upgrade and 1 MiB of stdout in 32 KiB frames fed in 64 KiB
// reads, the end, exec inspect) against a scripted daemon, every OutputChunk taken and consumed.
class ScriptedDaemon {
 public:
  explicit ScriptedDaemon(sandboxio::Machine& m) : m_(m) {}
  std::string exec_output;  // the frames an exec start streams after its upgrade

  std::size_t output = 0;  // output bytes taken so far

  /// Serves every request the machine made until it waits for nothing.
  void serve(sandboxio::Instant now) {
    using namespace sandboxio;
    for (bool progressed = true; progressed;) {
      progressed = false;
      while (auto r = m_.poll_request()) {
        progressed = true;
        if (auto* o = std::get_if<request::Open>(&*r)) {
          m_.handle_connected(o->conn, now);
        } else if (auto* snd = std::get_if<request::Send>(&*r)) {
          std::string& got = sent_[snd->conn];
          got += snd->data;
          if (got.find("\r\n\r\n") != std::string::npos) answer(snd->conn, got, now);
        }
      }
      while (auto e = m_.poll_event()) {
        progressed = true;
        if (auto* o = std::get_if<event::Output>(&*e)) {
          output += o->chunk.data.size();
          m_.handle_consumed(o->op, o->chunk.data.size(), now);
        }
      }
    }
  }

 private:
  static std::string reply(const std::string& status, const std::string& body) {
    return "HTTP/1.1 " + status +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  }
  void answer(sandboxio::ConnId conn, const std::string& request, sandboxio::Instant now) {
    const std::string line = request.substr(0, request.find('\r'));
    sent_.erase(conn);
    auto has = [&line](const char* s) { return line.find(s) != std::string::npos; };
    if (has("/attach?")) {
      feed(conn, "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n", now);
    } else if (has("/exec/") && has("/start")) {
      feed(conn, "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n", now);
      std::string_view rest = exec_output;
      while (!rest.empty()) {
        const std::size_t used = m_.handle_bytes(conn, rest.substr(0, 65536), now);
        rest.remove_prefix(used);
        serve(now);
      }
      m_.handle_eof(conn, now);
    } else if (has("/exec/") && has("/json")) {
      feed(conn, reply("200 OK", R"({"Running":false,"ExitCode":0,"Pid":7})"), now);
    } else if (has("/exec ")) {
      feed(conn, reply("201 Created", R"({"Id":"e0e0"})"), now);
    } else if (has("/containers/create")) {
      feed(conn, reply("201 Created", R"({"Id":"c0ffee","Warnings":[]})"), now);
    } else if (has("/start")) {
      feed(conn, "HTTP/1.1 204 No Content\r\n\r\n", now);
    } else if (has("/containers/json")) {
      feed(conn, reply("200 OK", "[]"), now);
    } else {
      feed(conn, reply("404 Not Found", R"({"message":"not scripted"})"), now);
    }
  }
  void feed(sandboxio::ConnId conn, std::string_view bytes, sandboxio::Instant now) {
    (void)m_.handle_bytes(conn, bytes, now);
  }
  sandboxio::Machine& m_;
  std::map<sandboxio::ConnId, std::string> sent_;
};

void BM_DockerMachineStream(benchmark::State& state) {
  using namespace sandboxio;
  docker::Config c;
  c.image = "img";
  auto m = docker::make_machine(c);
  ScriptedDaemon daemon(*m);
  const Instant now{};
  (void)m->submit_create({}, now);
  daemon.serve(now);
  daemon.exec_output = docker_frames(kMiB, 32768);
  for (auto _ : state) {
    daemon.output = 0;
    (void)m->submit_stream(Command{.argv = {"cat"}}, now);
    daemon.serve(now);
    if (daemon.output != kMiB) state.SkipWithError("the scripted stream did not come out whole");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_DockerMachineStream);

// The flight recorder's cost on the same stream (docs/how-to/observability.md): every byte in is
// written to the trace once, and every output event digested; the trace goes to a sink that only
// counts it. Against BM_DockerMachineStream, the per-byte overhead of recording.
class CountingTraceSink final : public sandboxio::flight::TraceSink {
 public:
  bool write(std::string_view bytes) override {
    written += bytes.size();
    return true;
  }
  std::uint64_t written = 0;
};

void BM_DockerMachineStreamRecorded(benchmark::State& state) {
  using namespace sandboxio;
  docker::Config c;
  c.image = "img";
  auto sink = std::make_shared<CountingTraceSink>();
  flight::Recorder m(docker::make_machine(c), flight::Header{.dsn = "docker://img"}, sink,
                     std::uint64_t{1} << 62);
  ScriptedDaemon daemon(m);
  const Instant now{};
  (void)m.submit_create({}, now);
  daemon.serve(now);
  daemon.exec_output = docker_frames(kMiB, 32768);
  for (auto _ : state) {
    daemon.output = 0;
    (void)m.submit_stream(Command{.argv = {"cat"}}, now);
    daemon.serve(now);
    if (daemon.output != kMiB) state.SkipWithError("the scripted stream did not come out whole");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
  state.counters["trace_per_byte"] =
      static_cast<double>(sink->written) / static_cast<double>(state.iterations() * kMiB + 1);
}
BENCHMARK(BM_DockerMachineStreamRecorded);

// The whole per-operation overhead of the sync API on fake:// (no wire): nanoseconds per run.
void BM_FakeRunOverhead(benchmark::State& state) {
  auto sb = sandboxio::sync::Sandbox::create("fake://");
  for (auto _ : state) {
    auto r = sb.run({"true"});
    benchmark::DoNotOptimize(r.exit_code);
  }
}
BENCHMARK(BM_FakeRunOverhead);

// The same run recorded (SBX_RECORD's path: a trace file in a temporary directory): the
// recorder's cost per operation, against BM_FakeRunOverhead.
void BM_FakeRunRecorded(benchmark::State& state) {
  sandboxio::CreateOptions o;
  o.record = "/tmp/sandboxio-bench-record-" + std::to_string(::getpid());
  {
    auto sb = sandboxio::sync::Sandbox::create("fake://", o);
    for (auto _ : state) {
      auto r = sb.run({"true"});
      benchmark::DoNotOptimize(r.exit_code);
    }
  }
  std::filesystem::remove_all(o.record);
}
BENCHMARK(BM_FakeRunRecorded);

// The same in a traced sandbox (a caller's traceparent): each record carries its span ids and
// each command gets TRACEPARENT, one more environment variable (fake:// keeps a copy of every
// call's environment for inspection, so here that variable is most of the cost).
sandboxio::CreateOptions traced_options() {
  sandboxio::CreateOptions o;
  o.trace = sandboxio::TraceContext::from_traceparent(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .value();
  return o;
}

void BM_FakeRunTraced(benchmark::State& state) {
  auto sb = sandboxio::sync::Sandbox::create("fake://", traced_options());
  for (auto _ : state) {
    auto r = sb.run({"true"});
    benchmark::DoNotOptimize(r.exit_code);
  }
}
BENCHMARK(BM_FakeRunTraced);

// And with OpenTelemetry export on, pointed at a port nobody listens on: a span per run is
// queued, then dropped and counted (the exporter backs off after a refused export), and the
// operation must not slow down against BM_FakeRunTraced (docs/how-to/observability.md).
// `dropped` is the exporter's drop counter.
void BM_FakeRunTracedDeadEndpoint(benchmark::State& state) {
  sandboxio::telemetry::OtlpSettings settings;
  settings.endpoint =
      "http://127.0.0.1:" + std::to_string(sandboxio::testing::free_loopback_port()) + "/v1/traces";
  settings.schedule_delay = std::chrono::milliseconds(100);
  auto exporter = std::make_shared<sandboxio::telemetry::OtlpExporter>(settings);
  sandboxio::telemetry::install_process_exporter(exporter);
  {
    auto sb = sandboxio::sync::Sandbox::create("fake://", traced_options());
    for (auto _ : state) {
      auto r = sb.run({"true"});
      benchmark::DoNotOptimize(r.exit_code);
    }
  }
  sandboxio::telemetry::install_process_exporter(nullptr);
  (void)exporter->flush(std::chrono::seconds(5));
  state.counters["dropped"] = static_cast<double>(exporter->stats().dropped);
  state.counters["exported"] = static_cast<double>(exporter->stats().exported);
}
BENCHMARK(BM_FakeRunTracedDeadEndpoint);

// An HTTP/2 download through the codec: a server's 1 MiB body in 16 KiB DATA frames, read
// and consumed (window updates included), next to memcpy of the same bytes.
void BM_Http2Download(benchmark::State& state) {
  auto frame = [](std::uint8_t type, std::uint8_t flags, std::uint32_t stream, std::string_view p) {
    const auto n = static_cast<std::uint32_t>(p.size());
    std::string f{static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8),
                  static_cast<char>(n),
                  static_cast<char>(type),
                  static_cast<char>(flags),
                  static_cast<char>(stream >> 24),
                  static_cast<char>(stream >> 16),
                  static_cast<char>(stream >> 8),
                  static_cast<char>(stream)};
    return f + std::string(p);
  };
  const std::string settings = frame(4, 0, 0, "") + frame(4, 1, 0, "");
  std::string body_frames;
  for (std::size_t done = 0; done < kMiB; done += 16384)
    body_frames += frame(0, done + 16384 >= kMiB ? 1 : 0, 1, std::string(16384, 'x'));
  const std::string wire = settings + frame(1, 4, 1, "\x88") + body_frames;
  for (auto _ : state) {
    sandboxio::http2::Client c;
    if (!c.submit_request({"GET", "https", "envd", "/files", {}}, true))
      state.SkipWithError("submit");
    benchmark::DoNotOptimize(c.take_output());
    std::size_t got = 0;
    for (std::size_t at = 0; at < wire.size(); at += 65536) {
      c.handle_bytes(std::string_view(wire).substr(at, 65536));
      while (auto e = c.poll_event())
        if (auto* d = std::get_if<sandboxio::http2::Data>(&*e)) {
          got += d->bytes.size();
          c.consume(d->stream, d->bytes.size());
        }
      benchmark::DoNotOptimize(c.take_output());
    }
    if (got != kMiB) state.SkipWithError("short body");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMiB));
}
BENCHMARK(BM_Http2Download);

// A TLS client ready to send its ClientHello, trusting the system's CA store: a context per
// connection (what sandboxio did before 2026-12-07, and what a client without a shared context
// pays), next to sandboxio's TlsChannel, which loads the store once per process.
void BM_TlsContextPerConnection(benchmark::State& state) {
  for (auto _ : state) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_default_verify_paths(ctx);
    SSL* ssl = SSL_new(ctx);
    SSL_set_bio(ssl, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    SSL_set_connect_state(ssl);
    SSL_set_tlsext_host_name(ssl, "api.e2b.app");
    benchmark::DoNotOptimize(SSL_do_handshake(ssl));  // writes the ClientHello
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
}
BENCHMARK(BM_TlsContextPerConnection)->Unit(benchmark::kMicrosecond);

void BM_TlsChannelClient(benchmark::State& state) {
  sandboxio::Endpoint e;
  e.kind = sandboxio::Endpoint::Kind::Tcp;
  e.address = "api.e2b.app";
  e.port = 443;
  e.tls = true;
  for (auto _ : state) {
    auto channel = sandboxio::TlsChannel::client(e);
    if (!channel) state.SkipWithError("no TLS channel");
    benchmark::DoNotOptimize(channel.value()->take_cipher());  // the ClientHello
  }
}
BENCHMARK(BM_TlsChannelClient)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
