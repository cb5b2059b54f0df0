// The parts of the machine core that are not templates (no I/O, no clock).
#include "sandboxio/backend/core.hpp"

#include <algorithm>

#include "sandboxio/duration.hpp"

namespace sandboxio::backend {

std::optional<Request> Outbox::poll_request() {
  if (requests_.empty()) return std::nullopt;
  Request r = std::move(requests_.front());
  requests_.pop_front();
  return r;
}

std::optional<Event> Outbox::poll_event() {
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::size_t OutputAccount::room(const Limits& limits) const {
  if (!streaming) return static_cast<std::size_t>(-1);
  return unconsumed >= limits.stream_buffer ? 0 : limits.stream_buffer - unconsumed;
}

std::optional<Problem> OutputAccount::take(OpId op, StreamKind kind, std::string_view piece,
                                           Outbox& outbox) {
  const int s = kind == StreamKind::Stderr ? 1 : 0;
  if (streaming) {
    OutputChunk chunk;
    chunk.stream = kind;
    chunk.data = Bytes(piece);
    chunk.offset = offsets[s];
    offsets[s] += piece.size();
    unconsumed += piece.size();
    outbox.push(event::Output{op, std::move(chunk)});
    return std::nullopt;
  }
  if (out.size() + err.size() + piece.size() > limit) {
    return Problem{errc::OutputLimitExceeded,
                   "the command wrote more than " + std::to_string(limit) +
                       " bytes of output; stream() it instead of run()",
                   {}};
  }
  (s == 1 ? err : out).append(piece);
  offsets[s] += piece.size();
  return std::nullopt;
}

void OutputAccount::fill(ExecResult& r) {
  r.streamed = streaming;
  if (streaming) return;
  r.stdout_bytes = std::move(out);
  r.stderr_bytes = std::move(err);
}

Problem expired(Operation operation, std::chrono::milliseconds after) {
  return Problem{errc::OperationTimeout,
                 std::string(to_string(operation)) + " did not finish within " +
                     format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(after)),
                 {}};
}

Problem missing_file(const std::string& path) {
  return Problem{errc::FileNotFound, "\"" + path + "\" does not exist in the sandbox", {}};
}

std::optional<Problem> check_path(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos)
    return Problem{errc::InvalidPath, "\"" + path + "\" is not an absolute path", {}};
  if (path.find("/../") != std::string::npos || path.ends_with("/.."))
    return Problem{errc::InvalidPath, "\"" + path + "\" contains \"..\"", {}};
  return std::nullopt;
}

}  // namespace sandboxio::backend
