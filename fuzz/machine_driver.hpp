// The driver the machine harnesses share: a machine fed fuzzer-chosen peer bytes, split points,
// connection outcomes, timer expiries and user operations. Properties checked: no crash, no
// livelock (a machine producing without input), and every operation ends (Done, Failed or
// Cancelled) at most once.
//
// Input: a sequence of commands, op = byte % 8:
//   0 feed: [conn index][len lo][len hi][bytes...] to an open connection
//   1 eof on [conn index]          2 the oldest pending connect succeeds
//   3 the oldest pending connect fails       4 time passes: [byte] x 10 ms, timers fire
//   5 submit the operation [byte] (the backend's table; the last entry cancels one)
//   6 the consumer takes [byte] KiB of the last stream          7 nothing (a drain)
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/backend/identity.hpp"
#include "sandboxio/flight.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::fuzz {

/// A trace file written through: every entry reaches the file at once, so a crash in the
/// machine leaves the trace of what led to it.
class TraceFile final : public flight::TraceSink {
 public:
  explicit TraceFile(const char* path)
      : fd_(::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) {}
  ~TraceFile() override { close(); }
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  bool write(std::string_view bytes) override {
    while (fd_ >= 0 && !bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return fd_ >= 0;
  }
  void close() override {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// The harness's machine, made from `dsn` as every driver makes one (its registry entry, behind
/// the admission guard), with what its configuration reads from the process (environment,
/// owner, session) fixed to `ambient`, so that a run depends on nothing outside its input.
/// With SBX_FUZZ_TRACE=FILE it is recorded into FILE as it runs: `sandboxio replay FILE` then
/// runs a crashing input again outside the fuzzer (in a debugger if need be).
inline std::unique_ptr<Machine> make_machine(const BackendEntry& entry, const std::string& dsn,
                                             std::map<std::string, std::string> ambient) {
  std::unique_ptr<Machine> m;
  {
    backend::AmbientScope scope(backend::AmbientScope::Mode::Replay, ambient);
    m = entry.make(parse_dsn(dsn).value()).value();
  }
  const char* path = std::getenv("SBX_FUZZ_TRACE");
  if (path == nullptr || *path == '\0') return m;
  flight::Header header;
  header.dsn = dsn;
  header.ambient = std::move(ambient);
  header.version = "fuzz";
  return std::make_unique<flight::Recorder>(std::move(m), header,
                                            std::make_shared<TraceFile>(path));
}

/// The operation an event ends (Done, Failed or Cancelled), or 0 for any other event. Every
/// harness aborts when one operation ends twice.
inline OpId ended_op(const Event& e) {
  if (auto* d = std::get_if<event::Done>(&e)) return d->op;
  if (auto* f = std::get_if<event::Failed>(&e)) return f->op;
  if (auto* c = std::get_if<event::Cancelled>(&e)) return c->op;
  return 0;
}

/// Submits operation `which` (taken modulo the table's size by the driver); returns its id,
/// or 0 when it submitted none. `stream` is set when the operation is a stream.
using Submit = std::function<OpId(Machine&, unsigned which, Instant now, bool& stream)>;

struct Driver {
  Machine& m;
  Instant now{};
  std::deque<ConnId> pending{};
  std::set<ConnId> reusable{};  // pending Opens a driver may answer with a kept connection
  std::vector<ConnId> open{};
  std::set<OpId> ended{};
  std::vector<OpId> submitted{};
  OpId last_stream = 0;

  void drain() {
    for (int guard = 0; guard < 100000; ++guard) {
      bool progressed = false;
      while (auto r = m.poll_request()) {
        progressed = true;
        if (auto* o = std::get_if<request::Open>(&*r)) {
          pending.push_back(o->conn);
          if (o->may_reuse) reusable.insert(o->conn);
        }
        if (auto* c = std::get_if<request::Close>(&*r)) {
          std::erase(open, c->conn);
          std::erase(pending, c->conn);
        }
        if (auto* p = std::get_if<request::ProbeOwners>(&*r))  // every owner is gone
          m.handle_owners_gone(p->owners, now);
      }
      while (auto e = m.poll_event()) {
        progressed = true;
        const OpId op = ended_op(*e);
        if (op != 0 && !ended.insert(op).second) std::abort();  // an operation ended twice
        if (auto* out = std::get_if<event::Output>(&*e))
          m.handle_consumed(out->op, out->chunk.data.size() / 2, now);
      }
      if (!progressed) return;
    }
    std::abort();  // the machine keeps producing without input: a livelock
  }
};

/// Runs one fuzz input against `m`, after `first` (the create) was submitted.
inline void run(Machine& m, OpId first, unsigned operations, const Submit& submit,
                const unsigned char* data, std::size_t size) {
  Driver d{m};
  d.submitted.push_back(first);
  d.drain();
  std::size_t i = 0;
  auto next = [&]() -> unsigned { return i < size ? data[i++] : 0u; };
  while (i < size) {
    switch (next() % 8) {
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
          const std::size_t used = m.handle_bytes(conn, bytes, d.now);
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
          m.handle_eof(conn, d.now);
        }
        break;
      case 2:
        if (!d.pending.empty()) {
          const ConnId conn = d.pending.front();
          d.pending.pop_front();
          d.open.push_back(conn);
          // Where the machine allows it, sometimes a connection kept from another machine.
          if (d.reusable.erase(conn) != 0 && next() % 2 == 1) {
            m.handle_reused(conn, d.now);
          } else {
            m.handle_connected(conn, d.now);
          }
        }
        break;
      case 3:
        if (!d.pending.empty()) {
          const ConnId conn = d.pending.front();
          d.pending.pop_front();
          m.handle_connect_failed(conn, Problem{errc::ConnectionFailed, "refused", {}}, d.now);
        }
        break;
      case 4: {
        d.now += std::chrono::milliseconds(10 * next());
        const auto deadline = m.poll_deadline();
        if (deadline && d.now >= *deadline) m.handle_timeout(d.now);
        break;
      }
      case 5: {
        const unsigned which = next() % (operations + 1);
        if (which == operations) {  // cancel one
          if (!d.submitted.empty())
            m.submit_cancel(d.submitted[next() % d.submitted.size()], d.now);
          break;
        }
        bool stream = false;
        const OpId id = submit(m, which, d.now, stream);
        if (stream) d.last_stream = id;
        if (id != 0) d.submitted.push_back(id);
        break;
      }
      case 6:
        if (d.last_stream) m.handle_consumed(d.last_stream, std::size_t{next()} << 10, d.now);
        break;
      default:
        break;
    }
    d.drain();
  }
  // Tear down: everything fails or ends once the connections go and time runs out.
  for (ConnId conn : std::vector<ConnId>(d.open))
    m.handle_eof(conn, d.now);
  for (ConnId conn : std::vector<ConnId>(d.pending.begin(), d.pending.end()))
    m.handle_connect_failed(conn, Problem{errc::ConnectionFailed, "gone", {}}, d.now);
  d.drain();
}

}  // namespace sandboxio::fuzz
