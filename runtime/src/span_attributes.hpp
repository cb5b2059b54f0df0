// Every span attribute name sandboxio exports, in one place (tests/gates/check_span_attributes.sh
// fails on a "gen_ai.*", "sandboxio.*" or other OpenTelemetry name spelled anywhere else).
// docs/how-to/observability.md lists them with their meaning.
#pragma once

#include <string_view>

namespace sandboxio::telemetry::attr {

// OpenTelemetry semantic conventions: GenAI (execute_tool spans) and general ones.
inline constexpr std::string_view kGenAiOperationName = "gen_ai.operation.name";
inline constexpr std::string_view kGenAiToolName = "gen_ai.tool.name";
inline constexpr std::string_view kGenAiToolType = "gen_ai.tool.type";
inline constexpr std::string_view kErrorType = "error.type";
inline constexpr std::string_view kProcessExitCode = "process.exit.code";
inline constexpr std::string_view kServerAddress = "server.address";
inline constexpr std::string_view kServerPort = "server.port";

// Resource attributes.
inline constexpr std::string_view kServiceName = "service.name";
inline constexpr std::string_view kSdkName = "telemetry.sdk.name";
inline constexpr std::string_view kSdkLanguage = "telemetry.sdk.language";
inline constexpr std::string_view kSdkVersion = "telemetry.sdk.version";

// sandboxio's own.
inline constexpr std::string_view kBackend = "sandboxio.backend";
inline constexpr std::string_view kSandboxId = "sandboxio.sandbox.id";
inline constexpr std::string_view kOperation = "sandboxio.operation";
inline constexpr std::string_view kSequence = "sandboxio.sequence";
inline constexpr std::string_view kOutcome = "sandboxio.outcome";
inline constexpr std::string_view kTermination = "sandboxio.termination";
inline constexpr std::string_view kIsolation = "sandboxio.isolation";
inline constexpr std::string_view kNetworkPolicy = "sandboxio.network_policy";
inline constexpr std::string_view kErrorCode = "sandboxio.error.code";
inline constexpr std::string_view kCommand = "sandboxio.command";
inline constexpr std::string_view kPossibleOrphan = "sandboxio.possible_orphan";
inline constexpr std::string_view kBytesIn = "sandboxio.bytes_in";
inline constexpr std::string_view kBytesOut = "sandboxio.bytes_out";
inline constexpr std::string_view kEgressMethod = "sandboxio.egress.method";
inline constexpr std::string_view kEgressAllowed = "sandboxio.egress.allowed";
inline constexpr std::string_view kEgressReason = "sandboxio.egress.reason";
inline constexpr std::string_view kEgressBytesOut = "sandboxio.egress.bytes_out";
inline constexpr std::string_view kEgressBytesIn = "sandboxio.egress.bytes_in";

// Values.
inline constexpr std::string_view kExecuteTool = "execute_tool";
inline constexpr std::string_view kToolTypeFunction = "function";

}  // namespace sandboxio::telemetry::attr
