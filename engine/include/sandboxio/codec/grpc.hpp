// gRPC over the HTTP/2 codec: a call's request head, its length-prefixed messages, and the
// reading of its answer (messages, then a status from the trailers, a Trailers-Only answer,
// an HTTP error or a reset stream), as the gRPC HTTP/2 protocol document says. No I/O, no
// clock: a deadline goes out as `grpc-timeout`, and is the driver's to keep.
//
//   auto id = h2.submit_request(grpc::request("localhost:443",
//   "/modal.client.ModalClient/AppGetOrCreate",
//                                             {{"x-modal-token-id", id}}, 10s), false);
//   h2.submit_data(*id, grpc::frame(request_message), true);
//   grpc::CallReader call(4 << 20);
//   call.on(event);                       // each http2 event of that stream
//   while (auto m = call.next_message()) decode(*m);
//   if (call.done()) call.status();       // {code 0, ""} or the server's, or ours
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/codec/http2.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::grpc {

/// gRPC status codes (google.rpc.Code).
enum class Code : std::uint8_t {
  Ok = 0,
  Cancelled = 1,
  Unknown = 2,
  InvalidArgument = 3,
  DeadlineExceeded = 4,
  NotFound = 5,
  AlreadyExists = 6,
  PermissionDenied = 7,
  ResourceExhausted = 8,
  FailedPrecondition = 9,
  Aborted = 10,
  OutOfRange = 11,
  Unimplemented = 12,
  Internal = 13,
  Unavailable = 14,
  DataLoss = 15,
  Unauthenticated = 16
};
/// "UNAVAILABLE", ...; "CODE_17" past the known ones.
[[nodiscard]] std::string code_name(Code code);

struct Status {
  Code code = Code::Ok;
  std::string message{};  // grpc-message, percent-decoded
  /// The trailers or Trailers-Only head it came with (x-modal-warning, grpc-status-details-bin).
  std::vector<http::Header> trailers{};
  /// Whether the status was made here rather than sent by the server (an HTTP error, a reset
  /// stream, a malformed answer): its message then says what happened.
  bool synthesized = false;
  [[nodiscard]] bool ok() const noexcept { return code == Code::Ok; }
};

/// The head of a call: POST to /package.Service/Method with content-type application/grpc,
/// te: trailers, grpc-timeout when `timeout` is set, and the caller's metadata (names are
/// lower-cased; a "-bin" name's value must already be base64).
[[nodiscard]] http2::Request request(std::string authority, std::string path,
                                     std::vector<http::Header> metadata,
                                     std::optional<std::chrono::milliseconds> timeout = {},
                                     std::string scheme = "https");
/// `grpc-timeout`'s value: at most eight digits and a unit ("250m", "90S", "10M").
[[nodiscard]] std::string timeout_value(std::chrono::milliseconds timeout);
/// One message with its 5-byte prefix (uncompressed).
[[nodiscard]] std::string frame(std::string_view message);

/// Reads one call's answer from the events of its HTTP/2 stream. Messages larger than
/// `max_message` end the call with RESOURCE_EXHAUSTED (SBX_E1803 in problem()) before they are
/// buffered; a compressed message (no encoding was offered) or a non-gRPC answer ends it with
/// INTERNAL. After done(), nothing changes.
class CallReader {
 public:
  explicit CallReader(std::size_t max_message = 4 << 20) : max_(max_message) {}

  /// One event of the call's stream (events of other streams must not be given).
  void on(const http2::Event& event);
  /// The next complete message, without its prefix.
  [[nodiscard]] std::optional<std::string> next_message();
  /// Message bytes received and not yet returned (bounded by max_message and the prefix).
  [[nodiscard]] std::size_t buffered() const noexcept { return buf_.size() - at_; }
  [[nodiscard]] bool done() const noexcept { return status_.has_value(); }
  /// The call's status once done().
  [[nodiscard]] const Status& status() const& { return *status_; }
  /// A failure of the answer itself (not a status the server sent): what made the status.
  [[nodiscard]] const std::optional<Problem>& problem() const& noexcept { return problem_; }

 private:
  void finish(Status status);
  void fail(Code code, Problem problem);
  void parse();
  std::size_t max_;
  bool head_ = false;
  std::string buf_;
  std::size_t at_ = 0;
  std::vector<std::string> ready_;
  std::size_t next_ = 0;
  std::optional<Status> status_;
  std::optional<Problem> problem_;
};

}  // namespace sandboxio::grpc
