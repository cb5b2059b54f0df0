// docker:// code: run_code and code contexts. Through the agent, when the image has python3,
// each context is a python3 running the agent's bootstrap (one namespace: the shared
// AgentMachine's code_start and context_start); otherwise run_code is `python3 -c CODE` as a
// command.
#include "machine.hpp"
#include "sandboxio/codec/shell.hpp"

namespace sandboxio::docker::detail {

CapabilitySet DockerMachine::capabilities() const noexcept {
  CapabilitySet caps = declared_capabilities();
  // Allow lists are enforced by the agent's egress proxy: the exec path has no way to.
  if (config_.agent) caps.insert(Capability::NetworkAllowList);
  if (agent_python()) {
    caps.insert(Capability::StatefulCode);
    caps.insert(Capability::RichOutput);
  }
  return caps;
}

OpId DockerMachine::submit_create_context(std::string language, Instant now) {
  const OpId id = open(Operation::CreateContext, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  if (!agent_python())
    return fail(id, unsupported(Capability::StatefulCode, "create_context()"), now);
  if (!language.empty() && language != "python") {
    return fail(
        id,
        Problem{errc::CapabilityNotSupported, "docker:// contexts run python, not " + language, {}},
        now);
  }
  context_start(id, now);
  return id;
}

OpId DockerMachine::submit_run_code(CodeRequest request, Instant now) {
  if (request.language != "python") {
    const OpId id = open(Operation::RunCode, now, request.code);
    if (!alive(id)) return id;
    return fail(
        id,
        Problem{errc::CapabilityNotSupported,
                "docker:// runs python code (python3 in the image), not " + request.language,
                {}},
        now);
  }
  if (request.context || agent_python()) {
    const OpId id = open(Operation::RunCode, now, request.code);
    meter_in(id, request.code.size());
    if (!alive(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (!agent_python())
      return fail(id, unsupported(Capability::StatefulCode, "run_code() in a context"), now);
    traced(id, request.env);
    code_start(id, std::move(request), now);
    return id;
  }
  Command c;
  c.argv = {"python3", "-c", request.code};
  c.env = std::move(request.env);
  c.timeout = request.timeout;
  return start_user_exec(Operation::RunCode, std::move(c), false, now);
}

}  // namespace sandboxio::docker::detail
