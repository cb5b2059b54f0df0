// libFuzzer harness: the docker:// machine driven by fuzzer-chosen daemon bytes, split points,
// connection outcomes, timer expiries and user operations. Properties: never crashes, never
// loops without end, and every operation submitted ends (Done, Failed or Cancelled) at most
// once.
//
// Input: a sequence of commands, op = byte % 8:
//   0 feed: [conn index][len lo][len hi][bytes...] to an open connection
//   1 eof on [conn index]          2 the oldest pending connect succeeds
//   3 the oldest pending connect fails       4 time passes: [byte] x 10 ms, timers fire
//   5 submit the operation [byte]  6 the consumer takes [byte] KiB of the last stream
//   7 nothing (a drain)
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "sandboxio/docker.hpp"

namespace {

using namespace sandboxio;

struct Driver {
  std::unique_ptr<Machine> m;
  Instant now{0};
  std::deque<ConnId> pending;
  std::vector<ConnId> open;
  std::set<OpId> ended;
  std::vector<OpId> submitted;
  OpId last_stream = 0;

  void drain() {
    for (int guard = 0; guard < 100000; ++guard) {
      bool progressed = false;
      while (auto r = m->poll_request()) {
        progressed = true;
        if (auto* o = std::get_if<request::Open>(&*r)) pending.push_back(o->conn);
        if (auto* c = std::get_if<request::Close>(&*r)) {
          std::erase(open, c->conn);
          std::erase(pending, c->conn);
        }
      }
      while (auto e = m->poll_event()) {
        progressed = true;
        OpId op = 0;
        if (auto* d = std::get_if<event::Done>(&*e)) op = d->op;
        if (auto* f = std::get_if<event::Failed>(&*e)) op = f->op;
        if (auto* c = std::get_if<event::Cancelled>(&*e)) op = c->op;
        if (op != 0 && !ended.insert(op).second) std::abort();  // an operation ended twice
        if (auto* out = std::get_if<event::Output>(&*e))
          m->handle_consumed(out->op, out->chunk.data.size() / 2, now);
      }
      if (!progressed) return;
    }
    std::abort();  // the machine keeps producing without input: a livelock
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  docker::Config c;
  c.image = "img";
  c.owner = "host:1";
  c.session = "fuzz";
  c.tmpfs = {"/work"};
  c.owner_gone = [](std::string_view) { return true; };
  Driver d;
  d.m = docker::make_machine(c);
  CreateOptions o;
  o.create_timeout = std::chrono::seconds(5);
  d.submitted.push_back(d.m->submit_create(o, d.now));
  d.drain();
  std::size_t i = 0;
  auto next = [&]() -> unsigned { return i < size ? data[i++] : 0u; };
  while (i < size) {
    const unsigned op = next() % 8;
    switch (op) {
      case 0: {
        if (d.open.empty()) break;
        const ConnId conn = d.open[next() % d.open.size()];
        std::size_t len = next();
        len |= static_cast<std::size_t>(next()) << 8;
        len = std::min(len, size - i);
        std::string_view bytes(reinterpret_cast<const char*>(data) + i, len);
        i += len;
        // Offer the bytes like a transport: what is not consumed is offered again later.
        for (int tries = 0; tries < 64 && !bytes.empty(); ++tries) {
          const std::size_t used = d.m->handle_bytes(conn, bytes, d.now);
          if (used > bytes.size()) std::abort();
          bytes.remove_prefix(used);
          d.drain();
          if (std::find(d.open.begin(), d.open.end(), conn) == d.open.end()) break;
        }
        break;
      }
      case 1:
        if (!d.open.empty()) {
          const ConnId conn = d.open[next() % d.open.size()];
          std::erase(d.open, conn);
          d.m->handle_eof(conn, d.now);
        }
        break;
      case 2:
        if (!d.pending.empty()) {
          const ConnId conn = d.pending.front();
          d.pending.pop_front();
          d.open.push_back(conn);
          d.m->handle_connected(conn, d.now);
        }
        break;
      case 3:
        if (!d.pending.empty()) {
          const ConnId conn = d.pending.front();
          d.pending.pop_front();
          d.m->handle_connect_failed(conn, Problem{errc::ConnectionFailed, "refused", {}}, d.now);
        }
        break;
      case 4: {
        d.now += std::chrono::milliseconds(10 * next());
        const auto deadline = d.m->poll_deadline();
        if (deadline && d.now >= *deadline) d.m->handle_timeout(d.now);
        break;
      }
      case 5: {
        Command cmd;
        cmd.argv = {"sh", "-c", "echo hi"};
        cmd.timeout = std::chrono::milliseconds(200);
        const unsigned which = next() % 12;
        OpId id = 0;
        switch (which) {
          case 0:
            id = d.m->submit_run(cmd, d.now);
            break;
          case 1:
            id = d.last_stream = d.m->submit_stream(cmd, d.now);
            break;
          case 2:
            id = d.m->submit_write_file("/tmp/a/b.txt", "data", d.now);
            break;
          case 3:
            id = d.m->submit_read_file("/tmp/a/b.txt", d.now);
            break;
          case 4:
            id = d.m->submit_list_files("/tmp", d.now);
            break;
          case 5:
            id = d.m->submit_remove_file("/work/x", d.now);
            break;
          case 6:
            id = d.m->submit_info(d.now);
            break;
          case 7:
            id = d.m->submit_kill(d.now);
            break;
          case 8:
            id = d.m->submit_list_managed({{"k", "v"}}, d.now);
            break;
          case 9:
            id = d.m->submit_remove_managed("abc", d.now);
            break;
          case 10:
            id = d.m->submit_read_file("/work/f", d.now);
            break;
          default:
            if (!d.submitted.empty())
              d.m->submit_cancel(d.submitted[next() % d.submitted.size()], d.now);
            break;
        }
        if (id != 0) d.submitted.push_back(id);
        break;
      }
      case 6:
        if (d.last_stream) d.m->handle_consumed(d.last_stream, std::size_t{next()} << 10, d.now);
        break;
      default:
        break;
    }
    d.drain();
  }
  // Tear down: everything fails or ends once the connections go and time runs out.
  for (ConnId conn : std::vector<ConnId>(d.open))
    d.m->handle_eof(conn, d.now);
  for (ConnId conn : std::vector<ConnId>(d.pending.begin(), d.pending.end()))
    d.m->handle_connect_failed(conn, Problem{errc::ConnectionFailed, "gone", {}}, d.now);
  d.drain();
  return 0;
}
