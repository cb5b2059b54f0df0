// HTTP/2 client codec on libnghttp2's memory interface: bytes in, frames out, events as
// values. No I/O and no clock. Many request streams share one connection; each stream's
// flow-control window is the reader's backpressure (a stream's data is acknowledged to the
// peer only when the reader says it took it), and a hostile peer meets bounds with a code.
//
//   sandboxio::http2::Client h2;                           // queues the preface and SETTINGS
//   auto id = h2.submit_request({"POST", "https", "envd", "/process.Process/Start", hdrs}, false);
//   h2.submit_data(*id, body, /*end_stream=*/true);
//   write(h2.take_output());                               // bytes for the socket
//   h2.handle_bytes(read_bytes);                            // what came back
//   while (auto e = h2.poll_event()) { /* Response, Data (then consume()), Trailers, End, Reset */
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "sandboxio/codec/http.hpp"
#include "sandboxio/output.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::http2 {

using StreamId = std::int32_t;
using http::Header;

/// What the client allows itself and its peer. Every bound a hostile peer could push against
/// is here, with its default.
struct Limits {
  /// Streams open at once. Beyond it (or beyond the peer's SETTINGS_MAX_CONCURRENT_STREAMS,
  /// whichever is lower) submit_request() answers SBX_E1807 QueueFull.
  std::uint32_t max_concurrent_streams = 100;
  /// Bytes of one received header block (names, values and 32 per field, as RFC 9113 counts
  /// them). Past it the stream is reset and ends with SBX_E1803 MessageTooLarge.
  std::size_t max_header_list_bytes = 64 * 1024;
  /// Data the peer may send on one stream before the reader consumes it: the most one slow
  /// reader holds in memory. Announced as SETTINGS_INITIAL_WINDOW_SIZE.
  std::uint32_t stream_window = 1 << 20;
  /// Data the peer may send on all streams before they are consumed: the most the connection
  /// holds in memory.
  std::uint32_t connection_window = 16 << 20;
  /// The largest frame the peer may send (SETTINGS_MAX_FRAME_SIZE, 16384 to 16777215).
  std::uint32_t max_frame_size = 16384;
};

/// A request's head. `headers` are the regular fields; names are lower-cased on the wire, and
/// connection-specific fields (Connection, Keep-Alive, Transfer-Encoding, Upgrade, Host) are
/// refused, as HTTP/2 forbids them.
struct Request {
  std::string method{};
  std::string scheme{};     // "https" or "http"
  std::string authority{};  // "host:port"
  std::string path{};       // "/process.Process/Start?x=1"
  std::vector<Header> headers{};
};

/// The final response head (interim 1xx heads are skipped).
struct Response {
  StreamId stream = 0;
  int status = 0;
  std::vector<Header> headers{};
};
/// Body bytes of a stream, in order. The reader calls consume(stream, bytes.size()) once it
/// has taken them; until then they count against the stream's window.
struct Data {
  StreamId stream = 0;
  Bytes bytes{};
};
/// A trailer block (gRPC status lives here).
struct Trailers {
  StreamId stream = 0;
  std::vector<Header> headers{};
};
/// The peer ended the stream: everything it will send on it has been given.
struct End {
  StreamId stream = 0;
};
/// The stream ended before the peer finished it: the peer reset it, a bound was passed, or
/// the connection went away. `retryable` means the peer said it did not process the request
/// (REFUSED_STREAM, or above a GOAWAY's last stream), so repeating it elsewhere is safe.
struct Reset {
  StreamId stream = 0;
  std::uint32_t error_code = 0;  // RFC 9113 section 7
  bool retryable = false;
  Problem problem{};
};
/// The peer is closing the connection: streams above `last_stream` were not processed (each
/// also gets a retryable Reset); streams up to it still finish. No new stream may be opened.
struct GoAway {
  StreamId last_stream = 0;
  std::uint32_t error_code = 0;
  std::string debug{};
};
using Event = std::variant<Response, Data, Trailers, End, Reset, GoAway>;

/// The client side of one HTTP/2 connection (TLS with ALPN "h2", or h2c with prior
/// knowledge: the codec does not care which). A connection error (the peer broke the
/// protocol, flooded control frames, passed a window) is sticky: error() holds it, the
/// GOAWAY that says so is in take_output(), and every later call does nothing.
class Client {
 public:
  explicit Client(Limits limits = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Opens a stream with this head. With end_stream the request has no body; otherwise its
  /// body follows with submit_data(). Errors: a forbidden or malformed field (SBX_E1000),
  /// too many open streams (SBX_E1807), a connection that failed or is going away (SBX_E1802).
  [[nodiscard]] Result<StreamId> submit_request(const Request& request, bool end_stream);
  /// Appends body bytes to a stream opened without end_stream; they go out as the peer's
  /// window allows. With end_stream the body is complete. Data for a stream that is gone is
  /// dropped. Bytes still queued are pending_data(); bound them by not submitting more.
  void submit_data(StreamId stream, std::string_view bytes, bool end_stream);
  /// Gives up a stream: RST_STREAM(CANCEL) goes out, its undelivered events are dropped and its
  /// window is given back. Nothing more is reported for it.
  void cancel(StreamId stream);
  /// The reader took `bytes` of a stream's Data: the peer may send that much more.
  void consume(StreamId stream, std::size_t bytes);
  /// Ends the connection politely: GOAWAY(NO_ERROR) after the open streams.
  void shutdown();

  /// Reads bytes from the peer; returns how many were used (all of them unless the
  /// connection failed). Events become available through poll_event().
  std::size_t handle_bytes(std::string_view bytes);
  /// The next event, or nothing when none is ready.
  [[nodiscard]] std::optional<Event> poll_event();
  /// Bytes to write to the peer, at most about `max` (frames are never split); empty when
  /// there is nothing to send now. Call after every submit and every handle_bytes().
  [[nodiscard]] Bytes take_output(std::size_t max = 1 << 20);

  /// Body bytes submitted on a stream and not yet sent (waiting for the peer's window).
  [[nodiscard]] std::size_t pending_data(StreamId stream) const;
  /// Streams open now (submitted and not yet ended or reset).
  [[nodiscard]] std::size_t open_streams() const noexcept { return streams_.size(); }
  /// Whether another stream may be opened now.
  [[nodiscard]] bool can_open_stream() const;
  /// Whether the connection can still carry anything (no error, no GOAWAY from either side
  /// with every stream done).
  [[nodiscard]] bool alive() const;
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

  struct Callbacks;  // nghttp2's callbacks (private)

 private:
  struct Stream {
    Bytes outgoing{};           // body bytes not yet framed
    bool outgoing_end = false;  // the body is complete
    bool deferred = false;      // nghttp2 waits for resume_data
    bool cancelled = false;
    bool ended = false;        // End or Reset reported
    bool reset_by_us = false;  // our RST_STREAM went out (the peer broke the protocol)
    std::size_t header_bytes = 0;
    std::size_t unconsumed = 0;  // delivered in Data events, not yet consume()d
    std::vector<Header> block{};
    std::optional<Problem> problem{};  // a bound this stream passed
  };
  void fail(Problem problem);
  void flush(Bytes& out, std::size_t max);  // frames what is queued while out is under max
  void push(Event event);
  Stream* find(StreamId id);

  Limits limits_;
  struct Session;
  Session* session_;
  std::map<StreamId, Stream> streams_;
  std::vector<Event> events_;
  Bytes out_;  // framed by handle_bytes(), not yet taken
  std::size_t next_event_ = 0;
  std::vector<std::pair<StreamId, std::size_t>> pending_consume_;  // windows to give back
  std::optional<Problem> error_;
  std::string last_library_error_;
  bool going_away_ = false;
};

/// The bytes a connection starts with (client preface), for recognising h2c with prior
/// knowledge and for tests.
inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace sandboxio::http2
