#include "session_log.hpp"

#include <fstream>
#include <sstream>
#include <variant>

#include "sandboxio/errors.hpp"

namespace sandboxio::replay {
namespace {

std::int64_t ns(Instant t) {
  return t.time_since_epoch().count();
}

std::string describe(const Endpoint& e) {
  return (e.kind == Endpoint::Kind::Unix ? "unix:" : "tcp:") + e.address + ":" +
         std::to_string(e.port) + (e.tls ? ":tls" : "");
}

Entry request_entry(const Request& r) {
  Entry e;
  std::visit(
      [&](const auto& q) {
        using R = std::decay_t<decltype(q)>;
        if constexpr (std::is_same_v<R, request::Open>) {
          e = {'O', q.conn, 0, describe(q.endpoint)};
        } else if constexpr (std::is_same_v<R, request::Send>) {
          e = {'S', q.conn, 0, q.data};
        } else if constexpr (std::is_same_v<R, request::HalfClose>) {
          e = {'H', q.conn, 0, {}};
        } else if constexpr (std::is_same_v<R, request::Close>) {
          e = {'C', q.conn, 0, {}};
        } else if constexpr (std::is_same_v<R, request::ProbeOwners>) {
          for (const auto& o : q.owners)
            e.data += o + "\n";
          e.tag = 'Q';
        }
      },
      r);
  return e;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v)
    s += x + "\n";
  return s;
}

// Writes down every input the link gives the machine, then hands it on.
class Recorder final : public ForwardingMachine {
 public:
  Recorder(Machine& m, Log& log) : ForwardingMachine(m), log_(log) {}
  void handle_connected(ConnId c, Instant now) override {
    log_.entries.push_back({'c', c, ns(now), {}});
    ForwardingMachine::handle_connected(c, now);
  }
  // The session logs have no entry of their own for a pooled connection: one is logged, and
  // replayed, as connected (what Machine's default made of it before ForwardingMachine
  // forwarded it as it is).
  void handle_reused(ConnId c, Instant now) override { handle_connected(c, now); }
  void handle_connect_failed(ConnId c, Problem p, Instant now) override {
    log_.entries.push_back(
        {'f', c, ns(now), std::to_string(static_cast<int>(p.code)) + "\n" + p.detail});
    ForwardingMachine::handle_connect_failed(c, std::move(p), now);
  }
  std::size_t handle_bytes(ConnId c, std::string_view d, Instant now) override {
    const std::size_t used = ForwardingMachine::handle_bytes(c, d, now);
    if (used > 0) log_.entries.push_back({'b', c, ns(now), std::string(d.substr(0, used))});
    return used;
  }
  void handle_eof(ConnId c, Instant now) override {
    log_.entries.push_back({'e', c, ns(now), {}});
    ForwardingMachine::handle_eof(c, now);
  }
  void handle_owners_gone(std::vector<std::string> gone, Instant now) override {
    log_.entries.push_back({'g', 0, ns(now), joined(gone)});
    ForwardingMachine::handle_owners_gone(std::move(gone), now);
  }

 private:
  Log& log_;
};

class RecordingLink final : public Link {
 public:
  RecordingLink(std::unique_ptr<Link> inner, std::shared_ptr<Log> log)
      : inner_(std::move(inner)), log_(std::move(log)) {
    log_->wall_epoch_ns = inner_->wall(Instant{}).time_since_epoch().count();
  }
  Instant now() const override {
    const Instant t = inner_->now();
    log_->entries.push_back({'N', 0, ns(t), {}});
    return t;
  }
  std::chrono::system_clock::time_point wall(Instant at) const override { return inner_->wall(at); }
  void perform(Machine& machine, Request request) override {
    log_->entries.push_back(request_entry(request));
    Recorder r(machine, *log_);
    inner_->perform(r, std::move(request));
  }
  void wait(Machine& machine, std::optional<Instant> wake) override {
    Recorder r(machine, *log_);
    inner_->wait(r, wake);
    log_->entries.push_back({'W', 0, ns(inner_->now()), {}});
  }

 private:
  std::unique_ptr<Link> inner_;
  std::shared_ptr<Log> log_;
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

class ReplayLink final : public Link {
 public:
  ReplayLink(std::shared_ptr<const Log> log, std::size_t split)
      : log_(std::move(log)), split_(split) {}

  Instant now() const override {
    if (pos_ < log_->entries.size() && log_->entries[pos_].tag == 'N') {
      clock_ = Instant(std::chrono::nanoseconds(log_->entries[pos_++].t));
    }
    return clock_;
  }
  std::chrono::system_clock::time_point wall(Instant at) const override {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(log_->wall_epoch_ns) + at.time_since_epoch()));
  }
  void perform(Machine& machine, Request request) override {
    const Entry want = request_entry(request);
    skip_clock_reads();
    if (pos_ >= log_->entries.size()) diverged("the recording ended, the machine asked for more");
    const Entry& got = log_->entries[pos_];
    if (got.tag != want.tag || got.conn != want.conn || got.data != want.data) {
      diverged(std::string("the machine made request '") + want.tag + "' on connection " +
               std::to_string(want.conn) + ", the recording has '" + got.tag + "' on " +
               std::to_string(got.conn) + first_difference(want.data, got.data));
    }
    ++pos_;
    deliver_inputs(machine);
  }
  void wait(Machine& machine, std::optional<Instant>) override {
    deliver_inputs(machine);
    skip_clock_reads();
    if (pos_ >= log_->entries.size() || log_->entries[pos_].tag != 'W')
      diverged("the machine waited where the recording does not");
    clock_ = Instant(std::chrono::nanoseconds(log_->entries[pos_++].t));
  }

 private:
  /// Where two requests' bytes part, with a little of each around it.
  static std::string first_difference(const std::string& made, const std::string& recorded) {
    std::size_t at = 0;
    while (at < made.size() && at < recorded.size() && made[at] == recorded[at])
      ++at;
    const std::size_t from = at < 40 ? 0 : at - 40;
    return "; they part at byte " + std::to_string(at) + ": made [" + made.substr(from, 100) +
           "], recorded [" + recorded.substr(from, 100) + "]";
  }
  [[noreturn]] void diverged(const std::string& why) const {
    throw Error(errc::ProtocolError,
                "replay diverged at entry " + std::to_string(pos_) + ": " + why);
  }
  void skip_clock_reads() const {
    // A clock read the recording has but the replay did not make (never expected: a read
    // that happens in one run happens in the other).
    while (pos_ < log_->entries.size() && log_->entries[pos_].tag == 'N')
      now();
  }
  static bool is_input(char tag) {
    return tag == 'c' || tag == 'b' || tag == 'e' || tag == 'f' || tag == 'g';
  }

  void deliver_inputs(Machine& machine) {
    while (pos_ < log_->entries.size() && is_input(log_->entries[pos_].tag)) {
      const Entry& e = log_->entries[pos_++];
      clock_ = Instant(std::chrono::nanoseconds(e.t));
      switch (e.tag) {
        case 'c':
          machine.handle_connected(e.conn, clock_);
          break;
        case 'e':
          machine.handle_eof(e.conn, clock_);
          break;
        case 'f': {
          const std::size_t nl = e.data.find('\n');
          machine.handle_connect_failed(
              e.conn,
              Problem{
                  static_cast<errc>(std::stoi(e.data.substr(0, nl))), e.data.substr(nl + 1), {}},
              clock_);
          break;
        }
        case 'g':
          machine.handle_owners_gone(lines(e.data), clock_);
          break;
        case 'b':
          feed(machine, e.conn, e.data);
          break;
      }
    }
  }

  // The recorded bytes in pieces of split_; what the machine leaves is offered first next time.
  void feed(Machine& machine, ConnId conn, const std::string& data) {
    std::string all = std::move(held_[conn]) + data;
    held_.erase(conn);
    std::size_t at = 0;
    while (at < all.size()) {
      const std::size_t n = split_ == 0 ? all.size() - at : std::min(split_, all.size() - at);
      const std::size_t used =
          machine.handle_bytes(conn, std::string_view(all).substr(at, n), clock_);
      at += used;
      if (used < n) {
        held_[conn] = all.substr(at);
        return;
      }
    }
  }

  std::shared_ptr<const Log> log_;
  std::size_t split_;
  mutable std::size_t pos_ = 0;
  mutable Instant clock_{};
  std::map<ConnId, std::string> held_{};
};

}  // namespace

std::unique_ptr<Link> recording_link(std::unique_ptr<Link> inner, std::shared_ptr<Log> log) {
  return std::make_unique<RecordingLink>(std::move(inner), std::move(log));
}

std::unique_ptr<Link> replay_link(std::shared_ptr<const Log> log, std::size_t split) {
  return std::make_unique<ReplayLink>(std::move(log), split);
}

// The file: a header line "sandboxio-replay 1", then "KEY LENGTH\n<bytes>\n" records for the
// session, owner, wall epoch and transcript, then one "TAG CONN TIME LENGTH\n<bytes>\n" per
// entry. Binary-safe: every value is length-prefixed.
void Log::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << "sandboxio-replay 1\n";
  auto field = [&](const char* key, const std::string& v) {
    out << key << ' ' << v.size() << '\n' << v << '\n';
  };
  field("session", session);
  field("owner", owner);
  field("wall", std::to_string(wall_epoch_ns));
  field("transcript", transcript);
  out << "entries " << entries.size() << '\n';
  for (const Entry& e : entries) {
    out << e.tag << ' ' << e.conn << ' ' << e.t << ' ' << e.data.size() << '\n' << e.data << '\n';
  }
  if (!out) throw Error(errc::ConfigurationError, "cannot write " + path);
}

std::shared_ptr<Log> Log::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(errc::ConfigurationError, "cannot read " + path);
  auto log = std::make_shared<Log>();
  std::string magic;
  std::getline(in, magic);
  if (magic != "sandboxio-replay 1")
    throw Error(errc::ConfigurationError, path + " is not a replay log");
  auto bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    in.read(s.data(), static_cast<std::streamsize>(n));
    in.get();  // the newline after the bytes
    return s;
  };
  auto field = [&](const char* key) {
    std::string k;
    std::size_t n = 0;
    in >> k >> n;
    in.get();
    if (k != key) throw Error(errc::ConfigurationError, path + ": expected " + key);
    return bytes(n);
  };
  log->session = field("session");
  log->owner = field("owner");
  log->wall_epoch_ns = std::stoll(field("wall"));
  log->transcript = field("transcript");
  std::string k;
  std::size_t count = 0;
  in >> k >> count;
  in.get();
  for (std::size_t i = 0; i < count && in; ++i) {
    Entry e;
    std::size_t n = 0;
    in >> e.tag >> e.conn >> e.t >> n;
    in.get();
    e.data = bytes(n);
    log->entries.push_back(std::move(e));
  }
  if (!in) throw Error(errc::ConfigurationError, path + " is cut short");
  return log;
}

std::size_t Log::input_bytes() const {
  std::size_t n = 0;
  for (const Entry& e : entries) {
    if (e.tag == 'b' || e.tag == 'S') n += e.data.size();
  }
  return n;
}

}  // namespace sandboxio::replay
