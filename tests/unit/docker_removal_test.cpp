// kill() on docker:// ends only when the container is gone. A removal that the daemon had
// already begun (AutoRemove, or its own clean-up after a restart) can fail and leave the
// container "dead" but present; the machine waits for that removal and then asks again, and
// says so with a code when the container refuses to go. And a container removed under a
// running command is the sandbox gone, whichever way the engine says so (Docker, Podman).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sandboxio/docker.hpp"
#include "sandboxio/sim.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio {
namespace {

// A Docker engine that creates and starts one container, then answers DELETE with the statuses
// it is given in turn (the last one repeats) and every wait?condition=removed with 200. It
// keeps the request lines it saw.
struct Script {
  std::vector<int> deletes;
  std::size_t next_delete = 0;
  std::vector<std::string> seen;
};

class RemovingDaemon final : public sim::Peer {
 public:
  explicit RemovingDaemon(std::shared_ptr<Script> s) : script_(std::move(s)) {}

  void on_bytes(std::string_view data, std::string& reply, bool& close) override {
    got_ += data;
    if (answered_ || got_.find("\r\n\r\n") == std::string::npos) return;
    answered_ = true;
    close = true;
    const std::string line = got_.substr(0, got_.find("\r\n"));
    script_->seen.push_back(line);
    auto answer = [&](int status, std::string_view body) {
      reply =
          "HTTP/1.1 " + std::to_string(status) +
          " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n\r\n" + std::string(body);
    };
    if (line.starts_with("POST /v1.41/containers/create")) return answer(201, R"({"Id":"c0ffee"})");
    if (line.find("/start") != std::string::npos) return answer(204, "");
    if (line.find("/wait?condition=removed") != std::string::npos)
      return answer(200, R"({"StatusCode":137})");
    if (line.starts_with("DELETE ")) {
      auto& s = *script_;
      const int status = s.deletes[std::min(s.next_delete, s.deletes.size() - 1)];
      ++s.next_delete;
      return answer(status,
                    status == 409
                        ? R"({"message":"removal of container c0ffee is already in progress"})"
                        : "");
    }
    answer(200, "[]");
  }

 private:
  std::shared_ptr<Script> script_;
  std::string got_;
  bool answered_ = false;
};

std::size_t deletes_seen(const Script& s) {
  std::size_t n = 0;
  for (const auto& line : s.seen)
    n += line.starts_with("DELETE /v1.41/containers/c0ffee?force=1") ? 1 : 0;
  return n;
}

sync::Sandbox create_on(const std::shared_ptr<Script>& script) {
  sim::Config c;
  c.peers = [script](const Endpoint&) { return std::make_unique<RemovingDaemon>(script); };
  CreateOptions o;
  o.outlive_owner = true;  // no owner lease: its attach stream is not what is tested
  // The daemon's exec path (agent=off): this daemon speaks HTTP only, no agent.
  return sync::Sandbox::create("docker://img?agent=off", o, sim::make_link(c));
}

TEST(DockerRemoval, ARemovalAlreadyUnderWayIsWaitedForAndThenCheckedAgain) {
  auto script = std::make_shared<Script>();
  script->deletes = {409, 204};  // under way, then: the failed removal left it dead; now gone
  auto sb = create_on(script);
  sb.kill();
  EXPECT_EQ(deletes_seen(*script), 2u);
  bool waited = false;
  for (const auto& line : script->seen)
    waited = waited || line.find("/containers/c0ffee/wait?condition=removed") != std::string::npos;
  EXPECT_TRUE(waited);
}

TEST(DockerRemoval, AContainerThatWillNotGoIsACodedErrorNotASilentLeak) {
  auto script = std::make_shared<Script>();
  script->deletes = {409};  // always under way, never gone
  auto sb = create_on(script);
  try {
    sb.kill();
    FAIL() << "kill() reported a container that is still there as removed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already in progress"), std::string::npos) << e.what();
  }
  EXPECT_EQ(deletes_seen(*script), 3u);  // bounded: it does not ask forever
  sb.detach();
}

TEST(DockerRemoval, ARemovalThatSucceedsAtOnceCostsOneRequest) {
  auto script = std::make_shared<Script>();
  script->deletes = {204};
  auto sb = create_on(script);
  sb.kill();
  EXPECT_EQ(deletes_seen(*script), 1u);
}

// Podman answers an exec inspected after its container was removed (the lifetime ran out under
// the command) with 500 and "no such container", where Docker answers 404: both are the
// sandbox gone, never an engine error.
class GoneUnderTheExec final : public sim::Peer {
 public:
  explicit GoneUnderTheExec(int status) : status_(status) {}

  void on_bytes(std::string_view data, std::string& reply, bool& close) override {
    got_ += data;
    if (answered_ || got_.find("\r\n\r\n") == std::string::npos) return;
    answered_ = true;
    close = true;
    const std::string line = got_.substr(0, got_.find("\r\n"));
    auto answer = [&](int status, std::string_view body) {
      reply =
          "HTTP/1.1 " + std::to_string(status) +
          " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n\r\n" + std::string(body);
    };
    if (line.starts_with("POST /v1.41/containers/create")) return answer(201, R"({"Id":"c0ffee"})");
    if (line.starts_with("POST /v1.41/containers/c0ffee/exec"))
      return answer(201, R"({"Id":"e1"})");
    if (line.starts_with("POST /v1.41/exec/e1/start")) {
      // The stream, then its end: the container was removed while the command ran.
      reply =
          "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
          "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
      return;
    }
    if (line.starts_with("GET /v1.41/exec/e1/json")) {
      return answer(status_, status_ == 404 ? R"({"message":"No such exec instance: e1"})"
                                            : R"({"message":"retrieving exec session e1 from )"
                                              R"(container c0ffee: container c0ffee does not )"
                                              R"(exist in database: no such container"})");
    }
    if (line.find("/start") != std::string::npos) return answer(204, "");
    if (line.starts_with("GET /v1.41/containers/c0ffee/json")) return answer(404, "{}");
    answer(200, "[]");
  }

 private:
  int status_;
  std::string got_;
  bool answered_ = false;
};

TEST(DockerExec, AContainerGoneUnderTheCommandIsSandboxGoneOnDockerAndOnPodman) {
  for (const int status : {404, 500}) {
    sim::Config c;
    c.peers = [status](const Endpoint&) { return std::make_unique<GoneUnderTheExec>(status); };
    CreateOptions o;
    o.outlive_owner = true;
    auto sb = sync::Sandbox::create("docker://img?agent=off", o, sim::make_link(c));
    const ExecResult r = sb.run({"sleep", "5"});
    EXPECT_EQ(r.termination, Termination::SandboxGone) << "inspect answered " << status;
    EXPECT_FALSE(r.exit_code.has_value());
    sb.detach();
  }
}

}  // namespace
}  // namespace sandboxio
