// The host side of one egress proxy connection: the allow list decides on the request's head,
// an allowed request is relayed byte for byte with the host resolving the name, a refused one
// gets a 403 the client can read, learning mode refuses everything and remembers it, and what
// is recorded holds no path, query or header.
#include <gtest/gtest.h>

#include <algorithm>

#include "sandboxio/backend/egress.hpp"
#include "sandboxio/codec/agent.hpp"
#include "sandboxio/local.hpp"
#include "sandboxio/machine.hpp"

namespace {

using sandboxio::NetworkPolicy;
using sandboxio::backend::EgressTunnel;
using Phase = EgressTunnel::Phase;

const NetworkPolicy kPolicy = NetworkPolicy::allowing({"pypi.org:443", "canary.test"});

TEST(EgressTunnel, AnAllowedConnectOpensTheUpstreamThenRelaysBothWays) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  const std::string head = "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n";
  auto s = t.from_client(head + "\x16\x03\x01hello");  // a client that does not wait
  EXPECT_EQ(s.used, head.size() + 8);
  ASSERT_TRUE(s.open.has_value());
  EXPECT_EQ(s.open->host, "pypi.org");
  EXPECT_EQ(s.open->port, 443);
  EXPECT_TRUE(s.to_client.empty()) << "nothing is promised before the upstream is up";
  EXPECT_EQ(t.phase(), Phase::Connecting);

  s = t.upstream_connected();
  EXPECT_EQ(s.to_client, "HTTP/1.1 200 Connection established\r\n\r\n");
  EXPECT_EQ(s.to_upstream, "\x16\x03\x01hello") << "held bytes go first, unchanged";

  s = t.from_upstream("server hello");
  EXPECT_EQ(s.to_client, "server hello");
  s = t.from_client("more");
  EXPECT_EQ(s.to_upstream, "more");
  s = t.client_closed();
  EXPECT_TRUE(s.end_upstream);
  s = t.upstream_closed();
  EXPECT_TRUE(s.end_client);
  EXPECT_EQ(t.phase(), Phase::Done);
  EXPECT_TRUE(t.attempt().allowed);
  EXPECT_EQ(t.attempt().bytes_out, 12u);
  EXPECT_EQ(t.attempt().bytes_in, 12u);
  EXPECT_TRUE(t.attempt().reason.empty());
}

TEST(EgressTunnel, AForwardedRequestGoesOutInOriginFormAndItsSecretsAreNotRecorded) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  auto s = t.from_client(
      "GET http://canary.test/v1/data?token=s3cr3t-query HTTP/1.1\r\nHost: canary.test\r\n"
      "Authorization: Bearer s3cr3t-bearer\r\n\r\n");
  ASSERT_TRUE(s.open.has_value());
  EXPECT_EQ(s.open->port, 80);
  s = t.upstream_connected();
  EXPECT_EQ(
      s.to_upstream.rfind("GET /v1/data?token=s3cr3t-query HTTP/1.1\r\nHost: canary.test\r\n", 0),
      0u);
  EXPECT_TRUE(s.to_client.empty());
  const auto& a = t.attempt();
  for (const std::string& field : {a.host, a.method, a.reason}) {
    EXPECT_EQ(field.find("s3cr3t"), std::string::npos) << field;
    EXPECT_EQ(field.find("/v1"), std::string::npos) << field;
  }
  EXPECT_EQ(a.host, "canary.test");
  EXPECT_EQ(a.method, "GET");
}

TEST(EgressTunnel, AnUnlistedHostAPortNotNamedAndABareAddressAreRefusedWith403) {
  for (const char* head :
       {"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", "CONNECT pypi.org:22 HTTP/1.1\r\n\r\n",
        "CONNECT 151.101.0.223:443 HTTP/1.1\r\n\r\n"}) {
    EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
    auto s = t.from_client(std::string(head) + "trailing");
    EXPECT_FALSE(s.open.has_value()) << head;
    EXPECT_EQ(s.to_client.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << head;
    EXPECT_NE(s.to_client.find("not in this sandbox's allow list"), std::string::npos);
    EXPECT_TRUE(s.end_client);
    EXPECT_EQ(t.phase(), Phase::Done);
    EXPECT_FALSE(t.attempt().allowed);
    EXPECT_FALSE(t.attempt().host.empty()) << "a refusal still says where it meant to go";
  }
}

TEST(EgressTunnel, LearningModeRefusesEvenAnAllowedHostAndRecordsIt) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Learn);
  auto s = t.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  EXPECT_FALSE(s.open.has_value());
  EXPECT_NE(s.to_client.find("learning mode"), std::string::npos);
  EXPECT_EQ(t.attempt().host, "pypi.org");
  EXPECT_EQ(t.attempt().port, 443);
  EXPECT_FALSE(t.attempt().allowed);
}

TEST(EgressTunnel, AMalformedHeadGetsItsStatusAndAnUnreachableHostA502) {
  EgressTunnel bad(kPolicy, EgressTunnel::Mode::Enforce);
  auto s = bad.from_client("GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n");
  EXPECT_EQ(s.to_client.rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_TRUE(s.end_client);

  EgressTunnel down(kPolicy, EgressTunnel::Mode::Enforce);
  (void)down.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  s = down.upstream_failed(sandboxio::Problem{sandboxio::errc::ConnectionFailed, "refused", {}});
  EXPECT_EQ(s.to_client.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0), 0u);
  EXPECT_NE(down.attempt().reason.find("cannot reach pypi.org:443"), std::string::npos);
  EXPECT_TRUE(down.attempt().allowed) << "allowed, then failed: the record says both";
}

TEST(EgressTunnel, AClientThatFloodsBeforeTheUpstreamIsUpIsHeldBackNotBuffered) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  (void)t.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  const std::string flood(1 << 20, 'x');
  std::size_t taken = 0;
  for (int i = 0; i < 4; ++i)
    taken += t.from_client(flood).used;
  EXPECT_EQ(taken, EgressTunnel::kMaxPending);
  auto s = t.upstream_connected();
  EXPECT_EQ(s.to_upstream.size(), EgressTunnel::kMaxPending);
  EXPECT_EQ(t.from_client(flood).used, flood.size()) << "once open, bytes flow";
}

TEST(NetworkPolicy, LearningDeniesEverythingTakesNoAllowListAndNeedsAProxy) {
  const auto learn = NetworkPolicy::learning();
  EXPECT_TRUE(learn.denies_all());
  EXPECT_TRUE(learn.needs_proxy());
  EXPECT_EQ(learn.describe(), "learn");
  EXPECT_TRUE(learn.validate());
  EXPECT_FALSE(NetworkPolicy::deny_all().needs_proxy());
  auto both = NetworkPolicy::allowing({"pypi.org"});
  both.learn = true;
  EXPECT_EQ(both.validate().problem().code, sandboxio::errc::InvalidCreateOptions);
  // A backend with no allow lists refuses learning too: it could record nothing.
  sandboxio::CreateOptions o;
  o.network = learn;
  const auto refused =
      sandboxio::admit_create("fake", sandboxio::IsolationTier::Container,
                              sandboxio::CapabilitySet{sandboxio::Capability::NetworkPolicy}, o);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, sandboxio::errc::PolicyUnenforceable);
}

TEST(NetworkPolicy, PinnedNamesAreExactNamesToAddresses) {
  auto p = NetworkPolicy::allowing({"canary.test"});
  p.pinned = {{"canary.test", "127.0.0.1"}, {"v6.canary.test", "::1"}};
  EXPECT_TRUE(p.validate());
  for (const auto& [name, address] :
       std::vector<std::pair<std::string, std::string>>{{"*.canary.test", "127.0.0.1"},
                                                        {"canary.test:80", "127.0.0.1"},
                                                        {"canary.test", "localhost"},
                                                        {"canary.test", ""},
                                                        {"canary.test", "127.0.0.1; rm -rf /"}}) {
    auto bad = NetworkPolicy::allowing({"canary.test"});
    bad.pinned = {{name, address}};
    EXPECT_EQ(bad.validate().problem().code, sandboxio::errc::InvalidCreateOptions)
        << name << address;
  }
}

TEST(EgressRecord, RendersWhereItWentAndTheLearnedListIsSortedAndUnique) {
  sandboxio::OperationRecord r;
  r.operation = sandboxio::Operation::Egress;
  r.egress = sandboxio::EgressAttempt{"pypi.org", 443, "CONNECT", false, "not listed", 10, 0};
  const std::string line = sandboxio::to_json_line(r);
  EXPECT_NE(line.find(R"("operation":"egress")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("egress":{"host":"pypi.org","port":443,"method":"CONNECT",)"
                      R"("allowed":false,"reason":"not listed","bytes_out":10,"bytes_in":0})"),
            std::string::npos)
      << line;
  auto other = r;
  other.egress->host = "files.pythonhosted.org";
  auto plain = r;
  plain.egress.reset();
  EXPECT_EQ(sandboxio::learned_allow_list({r, other, r, plain}),
            (std::vector<std::string>{"files.pythonhosted.org:443", "pypi.org:443"}));
}

TEST(AgentCodec, EgressListenCarriesAPortAndRefusesZero) {
  namespace agent = sandboxio::agent;
  const auto wire = agent::EgressListen{8080}.encode();
  EXPECT_EQ(agent::EgressListen::decode(wire).value().port, 8080);
  EXPECT_FALSE(agent::EgressListen::decode(agent::EgressListen{0}.encode()));
  EXPECT_FALSE(agent::EgressListen::decode(wire + "x"));
  EXPECT_EQ(agent::to_string(agent::Type::TunnelOpen), "TunnelOpen");
  agent::EgressListen handing{8080, true};
  EXPECT_TRUE(agent::EgressListen::decode(handing.encode()).value().handover);
  EXPECT_FALSE(agent::EgressListen::decode(wire.substr(0, 4) + "\x02")) << "a flag is 0 or 1";
}

TEST(AgentCodec, TunnelSocketAndTunnelDoneRoundTripAndRefuseTrailingBytes) {
  namespace agent = sandboxio::agent;
  const agent::TunnelSocket socket{12345, "GET / HTTP/1.1\r\n\r\n"};
  const auto s = agent::TunnelSocket::decode(socket.encode()).value();
  EXPECT_EQ(s.used, 12345u);
  EXPECT_EQ(s.head, socket.head);
  EXPECT_FALSE(agent::TunnelSocket::decode(socket.encode() + "x"));
  const agent::TunnelDone done{1u << 30, 7, "reading from the upstream: Connection reset"};
  const auto d = agent::TunnelDone::decode(done.encode()).value();
  EXPECT_EQ(d.to_client, 1u << 30);
  EXPECT_EQ(d.to_upstream, 7u);
  EXPECT_EQ(d.reason, done.reason);
  EXPECT_FALSE(agent::TunnelDone::decode(done.encode().substr(0, 10)));
  EXPECT_EQ(agent::to_string(agent::Type::TunnelSocket), "TunnelSocket");
  EXPECT_EQ(agent::to_string(agent::Type::TunnelDone), "TunnelDone");
}

}  // namespace

// ---- the host side in a machine: a local:// machine whose agent is this test ----

namespace sandboxio {
namespace {

TEST(EgressMachine, AnUpstreamThatNeverAnswersGetsA502After30sAndARecordThatSaysSo) {
  local::Config config;
  config.bwrap = "/usr/bin/bwrap";
  config.agent = "/usr/lib/sandboxio/agent";
  config.id = "local-egress-1";
  auto machine = local::make_machine(config);
  Machine& m = *machine;
  Instant now{};
  ConnId agent = 0;
  std::vector<ConnId> upstreams;
  std::vector<ConnId> closed;
  std::string to_agent;
  std::vector<OperationRecord> records;
  auto drain = [&] {
    while (auto r = m.poll_request()) {
      if (auto* o = std::get_if<request::Open>(&*r)) {
        (o->endpoint.kind == Endpoint::Kind::Process ? agent : upstreams.emplace_back()) = o->conn;
      } else if (auto* s = std::get_if<request::Send>(&*r); s && s->conn == agent) {
        to_agent += s->data;
      } else if (auto* c = std::get_if<request::Close>(&*r)) {
        closed.push_back(c->conn);
      }
    }
    while (auto e = m.poll_event()) {
      if (auto* rec = std::get_if<event::Record>(&*e)) records.push_back(rec->record);
    }
  };
  auto from_agent = [&](agent::Type type, std::uint32_t channel, std::string_view payload) {
    const std::string wire = agent::frame(type, channel, payload);
    ASSERT_EQ(m.handle_bytes(agent, wire, now), wire.size());
    drain();
  };
  CreateOptions options;
  options.network = NetworkPolicy::allowing({"canary.test:443"});
  (void)m.submit_create(options, now);
  drain();
  ASSERT_NE(agent, 0u);
  m.handle_connected(agent, now);
  from_agent(agent::Type::Welcome, 0, agent::Welcome{}.encode());
  from_agent(agent::Type::Done, 1, agent::Done{agent::kProxyPort}.encode());

  const std::uint32_t tunnel = agent::kAgentChannel | 1;
  from_agent(agent::Type::TunnelOpen, tunnel, {});
  from_agent(agent::Type::TunnelData, tunnel, "CONNECT canary.test:443 HTTP/1.1\r\n\r\n");
  ASSERT_EQ(upstreams.size(), 1u) << "the allowed host is connected to";
  // The upstream neither connects nor fails: the machine's own deadline ends the wait.
  const auto deadline = m.poll_deadline();
  ASSERT_TRUE(deadline.has_value());
  EXPECT_LE(*deadline - now, std::chrono::seconds(30));
  to_agent.clear();
  now += std::chrono::seconds(30);
  m.handle_timeout(now);
  drain();
  EXPECT_NE(std::find(closed.begin(), closed.end(), upstreams[0]), closed.end())
      << "the transport is told to give up the connect";
  std::vector<agent::Frame> frames;
  agent::FrameReader reader;
  reader.feed(to_agent, [&](agent::Frame f) { frames.push_back(std::move(f)); });
  std::string said;
  for (const auto& f : frames) {
    if (f.channel == tunnel && f.type == agent::Type::TunnelData) said += f.payload;
  }
  EXPECT_EQ(said.rfind("HTTP/1.1 502", 0), 0u) << said;
  EXPECT_NE(said.find("within 30 s"), std::string::npos) << said;
  // The program's end, then the record, naming the wait.
  from_agent(agent::Type::TunnelEnd, tunnel, {});
  const auto egress = std::find_if(records.begin(), records.end(), [](const OperationRecord& r) {
    return r.operation == Operation::Egress;
  });
  ASSERT_NE(egress, records.end());
  ASSERT_TRUE(egress->egress.has_value());
  EXPECT_TRUE(egress->egress->allowed);
  EXPECT_NE(egress->egress->reason.find("within 30 s"), std::string::npos)
      << egress->egress->reason;
}

/// A local:// machine whose agent is the test, up to a listening proxy.
struct EgressRig {
  std::unique_ptr<Machine> machine;
  Instant now{};
  ConnId agent = 0;
  std::vector<ConnId> upstreams;
  std::vector<Request> to_upstreams;  // every request naming an upstream after it opened
  std::vector<request::Pass> passes;
  std::vector<agent::Frame> frames;  // what the agent was sent
  agent::FrameReader reader;
  std::vector<OperationRecord> records;

  explicit EgressRig(bool pass_sockets) {
    local::Config config;
    config.bwrap = "/usr/bin/bwrap";
    config.agent = "/usr/lib/sandboxio/agent";
    config.id = "local-egress-2";
    machine = local::make_machine(config);
    machine->handle_driver_features(DriverFeatures{.pass_sockets = pass_sockets});
    CreateOptions options;
    options.network = NetworkPolicy::allowing({"canary.test:443"});
    options.network.pinned = {{"canary.test", "127.0.0.1"}};
    (void)machine->submit_create(options, now);
    drain();
    machine->handle_connected(agent, now);
    from_agent(agent::Type::Welcome, 0, agent::Welcome{}.encode());
    from_agent(agent::Type::Done, 1, agent::Done{agent::kProxyPort}.encode());
  }
  void drain() {
    while (auto r = machine->poll_request()) {
      if (auto* o = std::get_if<request::Open>(&*r)) {
        (o->endpoint.kind == Endpoint::Kind::Process ? agent : upstreams.emplace_back()) = o->conn;
      } else if (auto* s = std::get_if<request::Send>(&*r); s && s->conn == agent) {
        reader.feed(s->data, [&](agent::Frame f) { frames.push_back(std::move(f)); });
      } else if (auto* p = std::get_if<request::Pass>(&*r)) {
        passes.push_back(*p);
      } else {
        to_upstreams.push_back(*r);
      }
    }
    while (auto e = machine->poll_event()) {
      if (auto* rec = std::get_if<event::Record>(&*e)) records.push_back(rec->record);
    }
  }
  void from_agent(agent::Type type, std::uint32_t channel, std::string_view payload) {
    const std::string wire = agent::frame(type, channel, payload);
    ASSERT_EQ(machine->handle_bytes(agent, wire, now), wire.size());
    drain();
  }
  std::optional<agent::Frame> sent(agent::Type type) const {
    for (const auto& f : frames)
      if (f.type == type) return f;
    return std::nullopt;
  }
};

TEST(EgressMachine, ADriverThatPassesSocketsGetsTheConnectedUpstreamHandedToTheAgent) {
  EgressRig rig(true);
  auto listen = rig.sent(agent::Type::EgressListen);
  ASSERT_TRUE(listen);
  EXPECT_TRUE(agent::EgressListen::decode(listen->payload).value().handover);
  const std::uint32_t tunnel = agent::kAgentChannel | 1;
  rig.from_agent(agent::Type::TunnelOpen, tunnel, {});
  // A client that does not wait for the answer: its first TLS bytes come with the head.
  const std::string head = "CONNECT canary.test:443 HTTP/1.1\r\n\r\n";
  rig.from_agent(agent::Type::TunnelData, tunnel, head + "EARLY");
  ASSERT_EQ(rig.upstreams.size(), 1u);
  rig.frames.clear();
  rig.machine->handle_connected(rig.upstreams[0], rig.now);
  rig.drain();
  ASSERT_EQ(rig.passes.size(), 1u) << "the connected socket goes to the agent";
  EXPECT_EQ(rig.passes[0].conn, rig.upstreams[0]);
  EXPECT_EQ(rig.passes[0].via, rig.agent);
  std::vector<agent::Frame> passed;
  agent::FrameReader reader;
  reader.feed(rig.passes[0].data, [&](agent::Frame f) { passed.push_back(std::move(f)); });
  ASSERT_EQ(passed.size(), 1u);
  EXPECT_EQ(passed[0].type, agent::Type::TunnelSocket);
  EXPECT_EQ(passed[0].channel, tunnel);
  const auto socket = agent::TunnelSocket::decode(passed[0].payload).value();
  EXPECT_EQ(socket.used, head.size() + 5) << "everything the tunnel took";
  EXPECT_EQ(socket.head, "EARLY") << "what the upstream gets first";
  auto established = rig.sent(agent::Type::TunnelData);
  ASSERT_TRUE(established) << "CONNECT's answer goes before the socket";
  EXPECT_EQ(established->payload.rfind("HTTP/1.1 200", 0), 0u);
  // What the agent sent meanwhile is its to replay; the upstream is the driver's no more.
  rig.from_agent(agent::Type::TunnelData, tunnel, "more");
  rig.from_agent(agent::Type::TunnelEnd, tunnel, {});
  EXPECT_TRUE(rig.to_upstreams.empty()) << "a passed connection is never named again";
  EXPECT_TRUE(rig.records.empty() || rig.records.back().operation != Operation::Egress);
  rig.from_agent(agent::Type::TunnelDone, tunnel, agent::TunnelDone{1000, 4, ""}.encode());
  ASSERT_FALSE(rig.records.empty());
  const OperationRecord& r = rig.records.back();
  ASSERT_EQ(r.operation, Operation::Egress);
  EXPECT_EQ(r.outcome, Outcome::Ok);
  EXPECT_TRUE(r.egress->handed_over);
  EXPECT_EQ(r.egress->bytes_in, 1000u);
  EXPECT_EQ(r.egress->bytes_out, 5u + 4u) << "the early bytes here, the rest the agent's";
  EXPECT_NE(to_json_line(r).find("\"handed_over\":true"), std::string::npos);
  EXPECT_TRUE(rig.to_upstreams.empty());
}

TEST(EgressMachine, AHandedOverTunnelTheAgentEndsWithAReasonFailsWithIt) {
  EgressRig rig(true);
  const std::uint32_t tunnel = agent::kAgentChannel | 2;
  rig.from_agent(agent::Type::TunnelOpen, tunnel, {});
  rig.from_agent(agent::Type::TunnelData, tunnel, "CONNECT canary.test:443 HTTP/1.1\r\n\r\n");
  rig.machine->handle_connected(rig.upstreams.at(0), rig.now);
  rig.drain();
  ASSERT_EQ(rig.passes.size(), 1u);
  rig.from_agent(agent::Type::TunnelDone, tunnel,
                 agent::TunnelDone{10, 0, "reading from the upstream: Connection reset"}.encode());
  ASSERT_FALSE(rig.records.empty());
  const OperationRecord& r = rig.records.back();
  EXPECT_EQ(r.outcome, Outcome::Failed);
  EXPECT_EQ(r.error_code, static_cast<int>(errc::ConnectionFailed));
  EXPECT_NE(r.egress->reason.find("Connection reset"), std::string::npos) << r.egress->reason;
}

TEST(EgressMachine, WithoutADriverThatPassesSocketsTheHostRelaysAsBefore) {
  EgressRig rig(false);
  auto listen = rig.sent(agent::Type::EgressListen);
  ASSERT_TRUE(listen);
  EXPECT_FALSE(agent::EgressListen::decode(listen->payload).value().handover);
  const std::uint32_t tunnel = agent::kAgentChannel | 1;
  rig.from_agent(agent::Type::TunnelOpen, tunnel, {});
  rig.from_agent(agent::Type::TunnelData, tunnel, "CONNECT canary.test:443 HTTP/1.1\r\n\r\n");
  rig.machine->handle_connected(rig.upstreams.at(0), rig.now);
  rig.drain();
  EXPECT_TRUE(rig.passes.empty());
  rig.from_agent(agent::Type::TunnelData, tunnel, "hello");
  ASSERT_FALSE(rig.to_upstreams.empty());
  auto* send = std::get_if<request::Send>(&rig.to_upstreams.back());
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->data, "hello");
}

}  // namespace
}  // namespace sandboxio
