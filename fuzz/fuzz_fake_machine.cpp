// libFuzzer harness: the fake:// machine's shell and mini-Python fed fuzzer-written scripts,
// with fuzzer-chosen operations, cancellations and timer expiries. Properties: no crash, no
// livelock, and every operation ends at most once.
//
// Input: [ops byte][script...]: the script is split on NUL into pieces; each piece becomes one
// operation chosen by the ops byte's bits: a shell run, a stream, run_code, or a file write.
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "machine_driver.hpp"
#include "sandboxio/fake.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  if (size < 1) return 0;
  // A world of its own per input: the default world lives as long as the process and keeps
  // the sandboxes nobody killed (they may be reattached), as a long-lived program's would.
  const auto world = fake::World::create();
  auto made = fake::make_machine(parse_dsn(world->dsn()).value());
  if (!made) return 0;
  Machine& m = *made.value();
  Instant now{};
  std::set<OpId> ended;
  std::vector<OpId> submitted;
  auto drain = [&] {
    for (int guard = 0; guard < 100000; ++guard) {
      bool progressed = false;
      while (m.poll_request())
        progressed = true;
      while (auto e = m.poll_event()) {
        progressed = true;
        const OpId op = fuzz::ended_op(*e);
        if (op != 0 && !ended.insert(op).second) std::abort();
        if (auto* out = std::get_if<event::Output>(&*e))
          m.handle_consumed(out->op, out->chunk.data.size(), now);
      }
      if (!progressed) return;
    }
    std::abort();
  };
  submitted.push_back(m.submit_create({}, now));
  drain();
  unsigned ops = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::size_t pos = 0;
  for (int n = 0; n < 16 && pos <= text.size(); ++n) {
    std::size_t end = text.find('\0', pos);
    if (end == std::string::npos) end = text.size();
    const std::string piece = text.substr(pos, end - pos);
    pos = end + 1;
    Command c;
    c.argv = {"sh", "-c", piece};
    c.timeout = std::chrono::milliseconds(500);
    c.output_limit = 1 << 16;
    switch (ops & 3) {
      case 0:
        submitted.push_back(m.submit_run(c, now));
        break;
      case 1:
        submitted.push_back(m.submit_stream(c, now));
        break;
      case 2: {
        CodeRequest r;
        r.code = piece;
        r.timeout = std::chrono::milliseconds(500);
        submitted.push_back(m.submit_run_code(r, now));
        break;
      }
      default:
        submitted.push_back(m.submit_write_file("/tmp/" + std::to_string(n), piece, now));
        break;
    }
    if (ops & 4) m.submit_cancel(submitted[submitted.size() / 2], now);
    ops = (ops >> 3) | (ops << 5);
    drain();
    for (int step = 0; step < 64; ++step) {  // let virtual time run out every deadline
      const auto deadline = m.poll_deadline();
      if (!deadline) break;
      now = std::max(now, *deadline);
      m.handle_timeout(now);
      drain();
    }
  }
  (void)m.submit_kill(now);
  drain();
  return 0;
}
