// libFuzzer harness: the host side of egress tunnels (AgentMachine, agent_egress.cpp), in a
// local:// machine whose agent is the fuzzer. After a valid Welcome and the proxy's Done, the
// input is a sequence of commands, op = byte % 8:
//   0 an agent frame: [type][channel][len][payload...] (types that matter to tunnels)
//   1 a canned request head on a tunnel: [channel][which head]
//   2 the oldest pending upstream connects     3 it fails
//   4 upstream bytes: [conn index][len][bytes...]   5 upstream EOF: [conn index]
//   6 time passes: [byte] x 10 ms, timers fire     7 a command, or kill()
// The last byte's top bit says whether the driver passes sockets (then connected upstreams
// are handed to the agent: request::Pass, and TunnelDone ends them).
// Properties: no crash (ASan and UBSan are on), no livelock, no operation ends twice, the
// upstream bytes taken never exceed what was offered, every request the machine makes
// names a connection it opened, a Pass goes only to the agent's connection and only where
// the driver said it could, and a passed connection is never named again.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "machine_driver.hpp"
#include "sandboxio/codec/agent.hpp"
#include "sandboxio/local.hpp"

namespace {

using namespace sandboxio;

constexpr agent::Type kTypes[] = {
    agent::Type::TunnelOpen,  agent::Type::TunnelData, agent::Type::TunnelEnd,
    agent::Type::TunnelClose, agent::Type::Credit,     agent::Type::Done,
    agent::Type::Failure,     agent::Type::Exit,       agent::Type::TunnelDone};

const char* const kHeads[] = {
    "CONNECT canary.test:443 HTTP/1.1\r\nHost: canary.test:443\r\n\r\n\x16\x03\x01",
    "GET http://canary.test/x?token=1 HTTP/1.1\r\nHost: canary.test\r\n\r\n",
    "POST http://canary.test/ HTTP/1.1\r\nHost: canary.test\r\nContent-Length: 5\r\n\r\nhello",
    "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    "CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n",
    "GET / HTTP/1.1\r\n\r\n",
    "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  local::Config config;
  config.bwrap = "/usr/bin/bwrap";
  config.agent = "/usr/lib/sandboxio/agent";
  config.id = "local-fuzz-1";
  auto machine = local::make_machine(config);
  Machine& m = *machine;
  Instant now{};
  std::set<OpId> ended;
  std::set<ConnId> opened, passed;
  const bool pass_sockets = size > 0 && (data[size - 1] & 0x80) != 0;
  m.handle_driver_features(DriverFeatures{.pass_sockets = pass_sockets});
  std::deque<ConnId> pending;
  std::vector<ConnId> upstream;
  ConnId agent_conn = 0;
  auto drain = [&] {
    for (int guard = 0; guard < 100000; ++guard) {
      bool progressed = false;
      while (auto r = m.poll_request()) {
        progressed = true;
        if (auto* o = std::get_if<request::Open>(&*r)) {
          opened.insert(o->conn);
          if (o->endpoint.kind == Endpoint::Kind::Process) {
            agent_conn = o->conn;
          } else {
            pending.push_back(o->conn);
          }
        } else if (auto* s = std::get_if<request::Send>(&*r)) {
          if (!opened.contains(s->conn) || passed.contains(s->conn)) std::abort();
        } else if (auto* h = std::get_if<request::HalfClose>(&*r)) {
          if (!opened.contains(h->conn) || passed.contains(h->conn)) std::abort();
        } else if (auto* c = std::get_if<request::Close>(&*r)) {
          if (!opened.contains(c->conn) || passed.contains(c->conn)) std::abort();
          std::erase(upstream, c->conn);
          std::erase(pending, c->conn);
        } else if (auto* p = std::get_if<request::Pass>(&*r)) {
          if (!pass_sockets || p->via != agent_conn || !opened.contains(p->conn) ||
              !passed.insert(p->conn).second)
            std::abort();
          std::erase(upstream, p->conn);
        }
      }
      while (auto e = m.poll_event()) {
        progressed = true;
        const OpId op = fuzz::ended_op(*e);
        if (op != 0 && !ended.insert(op).second) std::abort();
      }
      if (!progressed) return;
    }
    std::abort();  // producing without input: a livelock
  };
  auto to_agent = [&](agent::Type type, std::uint32_t channel, std::string_view payload) {
    if (agent_conn == 0) return;
    const std::string wire = agent::frame(type, channel, payload);
    if (m.handle_bytes(agent_conn, wire, now) != wire.size()) std::abort();
    drain();
  };

  CreateOptions options;
  options.network = NetworkPolicy::allowing({"canary.test", "127.0.0.1:80"});
  options.network.pinned = {{"canary.test", "127.0.0.1"}};
  (void)m.submit_create(options, now);
  drain();
  if (agent_conn == 0) std::abort();
  m.handle_connected(agent_conn, now);
  agent::Welcome w;
  w.agent = "sandboxio-agent fuzz";
  to_agent(agent::Type::Welcome, 0, w.encode());
  to_agent(agent::Type::Done, 1, agent::Done{agent::kProxyPort}.encode());

  std::size_t i = 0;
  auto next = [&]() -> unsigned { return i < size ? data[i++] : 0u; };
  auto bytes = [&](std::size_t len) {
    len = std::min(len, size - i);
    std::string_view b(reinterpret_cast<const char*>(data) + i, len);
    i += len;
    return b;
  };
  auto tunnel = [&](unsigned b) { return agent::kAgentChannel | (b % 4); };
  while (i < size) {
    const unsigned op = next() % 8;
    switch (op) {
      case 0: {
        const agent::Type type = kTypes[next() % std::size(kTypes)];
        const unsigned c = next();
        const std::uint32_t channel = (c & 0x80) ? tunnel(c) : c % 4;
        to_agent(type, channel, bytes(next()));
        break;
      }
      case 1: {
        const std::uint32_t channel = tunnel(next());
        to_agent(agent::Type::TunnelData, channel, kHeads[next() % std::size(kHeads)]);
        break;
      }
      case 2:
      case 3:
        if (!pending.empty()) {
          const ConnId conn = pending.front();
          pending.pop_front();
          if (op == 2) {
            upstream.push_back(conn);
            m.handle_connected(conn, now);
          } else {
            m.handle_connect_failed(conn, Problem{errc::ConnectionFailed, "refused", {}}, now);
          }
          drain();
        }
        break;
      case 4: {
        if (upstream.empty()) break;
        const ConnId conn = upstream[next() % upstream.size()];
        std::string_view b = bytes(std::size_t{next()} << 4);
        for (int tries = 0; tries < 8 && !b.empty(); ++tries) {
          const std::size_t used = m.handle_bytes(conn, b, now);
          if (used > b.size()) std::abort();
          b.remove_prefix(used);
          drain();
        }
        break;
      }
      case 5:
        if (!upstream.empty()) {
          const ConnId conn = upstream[next() % upstream.size()];
          std::erase(upstream, conn);
          m.handle_eof(conn, now);
          drain();
        }
        break;
      case 6: {
        now += std::chrono::milliseconds(10 * next());
        const auto deadline = m.poll_deadline();
        if (deadline && now >= *deadline) m.handle_timeout(now);
        drain();
        break;
      }
      default:
        if (next() % 2 == 0) {
          Command c;
          c.argv = {"true"};
          (void)m.submit_run(c, now);
        } else {
          (void)m.submit_kill(now);
        }
        drain();
        break;
    }
  }
  (void)m.submit_kill(now);
  drain();
  return 0;
}
