// The parts of the machine core that are not templates (no I/O, no clock).
#include "sandboxio/backend/core.hpp"

#include <algorithm>

#include "sandboxio/duration.hpp"

namespace sandboxio::backend {

void Outbox::push(Event e) {
  events_.push_back(std::move(e));
}
void Outbox::push(Request r) {
  requests_.push_back(std::move(r));
}

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
  r.bytes_out = offsets[0] + offsets[1];
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

Result<HostPort> parse_host_port(std::string_view rest, std::uint16_t default_port) {
  auto bad = [](std::string why) { return Problem{errc::InvalidOption, std::move(why), {}}; };
  HostPort out;
  out.port = default_port;
  std::string_view name = rest;
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    name = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty() && rest.front() != ':') return bad("junk after ]");
    if (!rest.empty()) rest.remove_prefix(1);
  } else if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    name = rest.substr(0, colon);
    rest.remove_prefix(colon + 1);
  } else {
    rest = {};
  }
  if (!rest.empty()) {
    unsigned long p = 0;
    for (char c : rest) {
      if (c < '0' || c > '9' || p > 65535) return bad("bad port");
      p = p * 10 + static_cast<unsigned long>(c - '0');
    }
    if (p == 0 || p > 65535) return bad("bad port");
    out.port = static_cast<std::uint16_t>(p);
  }
  if (name.empty()) return bad("no host name");
  out.host = std::string(name);
  return out;
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
