// The HTTP/2 client codec on nghttp2's memory interface (nghttp2_session_mem_recv/_mem_send).
// nghttp2's callbacks only record: they append events and note problems, never call back out,
// so nothing runs inside handle_bytes() but this file. Window updates are ours to send
// (no_auto_window_update): data the reader has not consumed keeps the peer's window closed.
#include "sandboxio/codec/http2.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>

#include "text.hpp"

namespace sandboxio::http2 {

struct Client::Session {
  nghttp2_session* s = nullptr;
};

namespace {

constexpr std::size_t kFieldOverhead = 32;       // RFC 9113 6.5.2: each field costs 32 more
constexpr std::size_t kEagerOutput = 64 * 1024;  // framed inside handle_bytes(), at most

bool forbidden_field(std::string_view lowered) {
  return lowered == "connection" || lowered == "keep-alive" || lowered == "proxy-connection" ||
         lowered == "transfer-encoding" || lowered == "upgrade" || lowered == "host";
}

bool has_line_break_or_nul(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

nghttp2_nv field(const std::string& name, const std::string& value) {
  // nghttp2 does not write through these pointers (NO_COPY flags are not set: it copies).
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

std::string error_name(std::uint32_t code) {
  switch (code) {
    case NGHTTP2_NO_ERROR:
      return "NO_ERROR";
    case NGHTTP2_PROTOCOL_ERROR:
      return "PROTOCOL_ERROR";
    case NGHTTP2_INTERNAL_ERROR:
      return "INTERNAL_ERROR";
    case NGHTTP2_FLOW_CONTROL_ERROR:
      return "FLOW_CONTROL_ERROR";
    case NGHTTP2_SETTINGS_TIMEOUT:
      return "SETTINGS_TIMEOUT";
    case NGHTTP2_STREAM_CLOSED:
      return "STREAM_CLOSED";
    case NGHTTP2_FRAME_SIZE_ERROR:
      return "FRAME_SIZE_ERROR";
    case NGHTTP2_REFUSED_STREAM:
      return "REFUSED_STREAM";
    case NGHTTP2_CANCEL:
      return "CANCEL";
    case NGHTTP2_COMPRESSION_ERROR:
      return "COMPRESSION_ERROR";
    case NGHTTP2_CONNECT_ERROR:
      return "CONNECT_ERROR";
    case NGHTTP2_ENHANCE_YOUR_CALM:
      return "ENHANCE_YOUR_CALM";
    case NGHTTP2_INADEQUATE_SECURITY:
      return "INADEQUATE_SECURITY";
    case NGHTTP2_HTTP_1_1_REQUIRED:
      return "HTTP_1_1_REQUIRED";
    default:
      return "error " + std::to_string(code);
  }
}

}  // namespace

// The callbacks nghttp2 makes from inside mem_recv/mem_send. Each one only records.
struct Client::Callbacks {
  static Client& self(void* user) { return *static_cast<Client*>(user); }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (Stream* st = self(user).find(frame->hd.stream_id)) {
      st->block.clear();
      st->header_bytes = 0;
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    Client& c = self(user);
    Stream* st = c.find(frame->hd.stream_id);
    if (st == nullptr || st->cancelled) return 0;
    st->header_bytes += namelen + valuelen + kFieldOverhead;
    if (st->header_bytes > c.limits_.max_header_list_bytes) {
      st->problem = Problem{errc::MessageTooLarge,
                            "an HTTP/2 header block from the peer passed " +
                                std::to_string(c.limits_.max_header_list_bytes) + " bytes",
                            "the server sent more headers than Limits::max_header_list_bytes "
                            "allows; raise it only for a peer you trust"};
      // nghttp2 resets the stream (INTERNAL_ERROR); the reader hears of it now.
      st->ended = true;
      st->block.clear();
      c.push(Reset{frame->hd.stream_id, NGHTTP2_INTERNAL_ERROR, false, std::move(*st->problem)});
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    st->block.push_back(Header{std::string(reinterpret_cast<const char*>(name), namelen),
                               std::string(reinterpret_cast<const char*>(value), valuelen)});
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Client& c = self(user);
    const StreamId id = frame->hd.stream_id;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        Stream* st = c.find(id);
        if (st == nullptr || st->cancelled || st->ended) break;
        if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE ||
            (frame->headers.cat == NGHTTP2_HCAT_HEADERS && !st->block.empty() &&
             st->block.front().name == ":status")) {
          int status = 0;
          std::vector<Header> regular;
          for (auto& h : st->block) {
            if (h.name == ":status")
              status = std::atoi(h.value.c_str());
            else if (!h.name.starts_with(':'))
              regular.push_back(std::move(h));
          }
          st->block.clear();
          if (status >= 100 && status < 200) break;  // interim: the final head follows
          c.push(Response{id, status, std::move(regular)});
        } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
          c.push(Trailers{id, std::move(st->block)});
          st->block.clear();
        }
        if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 && !st->ended) {
          st->ended = true;
          c.push(End{id});
        }
        break;
      }
      case NGHTTP2_DATA: {
        Stream* st = c.find(id);
        if (st != nullptr && !st->cancelled && !st->ended &&
            (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
          st->ended = true;
          c.push(End{id});
        }
        break;
      }
      case NGHTTP2_GOAWAY: {
        c.going_away_ = true;
        const auto& g = frame->goaway;
        c.push(GoAway{g.last_stream_id, g.error_code,
                      std::string(reinterpret_cast<const char*>(g.opaque_data),
                                  std::min<std::size_t>(g.opaque_data_len, 256))});
        break;
      }
      default:
        break;
    }
    return 0;
  }

  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                           const std::uint8_t* data, std::size_t len, void* user) {
    Client& c = self(user);
    Stream* st = c.find(id);
    if (st == nullptr || st->cancelled || st->ended) {
      c.pending_consume_.push_back({id, len});  // nobody will read it: give the window back
      return 0;
    }
    st->unconsumed += len;
    const std::string_view piece(reinterpret_cast<const char*>(data), len);
    // Chunks of one stream that arrive back to back become one event.
    if (c.events_.size() > c.next_event_)
      if (auto* last = std::get_if<Data>(&c.events_.back());
          last != nullptr && last->stream == id) {
        last->bytes.append(piece);
        return 0;
      }
    c.push(Data{id, Bytes(piece)});
    return 0;
  }

  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
    Client& c = self(user);
    auto it = c.streams_.find(id);
    if (it == c.streams_.end()) return 0;
    Stream& st = it->second;
    if (!st.cancelled && !st.ended) {
      Reset r{id, code, code == NGHTTP2_REFUSED_STREAM, {}};
      if (st.problem) {
        r.problem = std::move(*st.problem);
      } else if (c.going_away_ && code == NGHTTP2_REFUSED_STREAM) {
        r.problem =
            Problem{errc::ConnectionLost,
                    "the HTTP/2 peer is closing the connection and did not process stream " +
                        std::to_string(id),
                    "the request was not processed: repeating it on a new connection is safe"};
      } else if (st.reset_by_us) {
        r.problem = Problem{errc::RemoteProtocolViolation,
                            "sandboxio reset HTTP/2 stream " + std::to_string(id) + " (" +
                                error_name(code) + "): the peer broke the protocol on it",
                            {}};
      } else {
        r.problem = Problem{
            errc::RemoteProtocolViolation,
            "the HTTP/2 peer reset stream " + std::to_string(id) + " (" + error_name(code) + ")",
            code == NGHTTP2_REFUSED_STREAM ? "the request was not processed: repeating it is safe"
                                           : ""};
      }
      c.push(std::move(r));
    }
    c.streams_.erase(it);
    return 0;
  }

  // Every connection error nghttp2 detects ends in a GOAWAY with its code: that is when the
  // connection is known to have failed (there is no query for it before).
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Client& c = self(user);
    if (frame->hd.type == NGHTTP2_RST_STREAM)
      if (Stream* st = c.find(frame->hd.stream_id)) st->reset_by_us = true;
    if (frame->hd.type != NGHTTP2_GOAWAY || frame->goaway.error_code == NGHTTP2_NO_ERROR) return 0;
    std::string why(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                    std::min<std::size_t>(frame->goaway.opaque_data_len, 256));
    if (!c.last_library_error_.empty()) why += (why.empty() ? "" : "; ") + c.last_library_error_;
    c.fail(Problem{errc::RemoteProtocolViolation,
                   "the HTTP/2 peer broke the protocol (" + error_name(frame->goaway.error_code) +
                       (why.empty() ? ")" : "): " + why),
                   "the server does not speak HTTP/2 as RFC 9113 says; the connection is closed"});
    return 0;
  }

  // A frame nghttp2 refused: the reason, for the Reset or GOAWAY that follows.
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int lib_error,
                              void* user) {
    Client& c = self(user);
    const std::string why = nghttp2_strerror(lib_error);
    if (Stream* st = c.find(frame->hd.stream_id); st != nullptr && !st->problem)
      st->problem = Problem{errc::RemoteProtocolViolation,
                            "sandboxio reset HTTP/2 stream " + std::to_string(frame->hd.stream_id) +
                                ": the peer broke the protocol (" + why + ")",
                            {}};
    else if (frame->hd.stream_id == 0 && c.last_library_error_.empty())
      c.last_library_error_ = why;
    return 0;
  }

  static int on_error(nghttp2_session*, int, const char* msg, std::size_t len, void* user) {
    self(user).last_library_error_.assign(msg, std::min<std::size_t>(len, 512));
    return 0;
  }

  static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* flags, nghttp2_data_source*, void* user) {
    Stream* st = self(user).find(id);
    if (st == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const std::size_t n = std::min(length, st->outgoing.size());
    std::memcpy(buf, st->outgoing.data(), n);
    st->outgoing.erase(0, n);
    if (st->outgoing.empty()) {
      if (st->outgoing_end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
      } else if (n == 0) {
        st->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
    }
    return static_cast<ssize_t>(n);
  }
};

Client::Client(Limits limits) : limits_(limits), session_(new Session) {
  limits_.max_frame_size = std::clamp<std::uint32_t>(limits_.max_frame_size, 16384, 16777215);
  limits_.stream_window = std::clamp<std::uint32_t>(limits_.stream_window, 1, (1U << 31) - 1);
  limits_.connection_window =
      std::clamp<std::uint32_t>(limits_.connection_window, 65535, (1U << 31) - 1);
  limits_.max_concurrent_streams = std::max<std::uint32_t>(limits_.max_concurrent_streams, 1);

  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_option* opt = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cb);
    fail(Problem{errc::ProtocolError, "out of memory for an HTTP/2 session", {}});
    return;
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &Callbacks::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &Callbacks::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &Callbacks::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &Callbacks::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &Callbacks::on_stream_close);
  nghttp2_session_callbacks_set_error_callback2(cb, &Callbacks::on_error);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &Callbacks::on_frame_send);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &Callbacks::on_invalid_frame);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, limits_.max_concurrent_streams);
  nghttp2_option_set_max_settings(opt, 32);        // entries in one SETTINGS frame
  nghttp2_option_set_max_outbound_ack(opt, 1000);  // PING/SETTINGS acks queued: a flood
  nghttp2_option_set_max_continuations(opt, 8);
  const int rv = nghttp2_session_client_new2(&session_->s, cb, this, opt);
  nghttp2_session_callbacks_del(cb);
  nghttp2_option_del(opt);
  if (rv != 0) {
    fail(Problem{errc::ProtocolError, "out of memory for an HTTP/2 session", {}});
    return;
  }
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0},  // the server may open none
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits_.stream_window},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, limits_.max_frame_size},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<std::uint32_t>(std::min<std::size_t>(limits_.max_header_list_bytes, 1U << 30))},
  };
  nghttp2_submit_settings(session_->s, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_->s, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<std::int32_t>(limits_.connection_window));
}

Client::~Client() {
  if (session_ != nullptr) nghttp2_session_del(session_->s);
  delete session_;
}

Client::Stream* Client::find(StreamId id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : &it->second;
}

void Client::push(Event event) {
  events_.push_back(std::move(event));
}

void Client::fail(Problem problem) {
  if (!error_) error_ = std::move(problem);
}

Result<StreamId> Client::submit_request(const Request& request, bool end_stream) {
  if (error_) return *error_;
  if (going_away_ || session_->s == nullptr)
    return Problem{errc::ConnectionLost, "the HTTP/2 connection is going away",
                   "open the stream on a new connection"};
  if (!can_open_stream())
    return Problem{errc::QueueFull,
                   "the HTTP/2 connection has " + std::to_string(streams_.size()) +
                       " streams open, as many as it may",
                   "wait for a stream to end, or open another connection"};
  std::vector<std::string> strings;
  strings.reserve(8 + 2 * request.headers.size());
  auto add = [&](std::string name, std::string value) {
    strings.push_back(std::move(name));
    strings.push_back(std::move(value));
  };
  add(":method", request.method);
  add(":scheme", request.scheme);
  add(":authority", request.authority);
  add(":path", request.path);
  for (const auto& h : request.headers) {
    std::string name = detail::ascii_lowered(h.name);
    if (name.empty() || name.front() == ':' || forbidden_field(name) ||
        has_line_break_or_nul(name) || has_line_break_or_nul(h.value))
      return Problem{errc::ConfigurationError,
                     "the HTTP/2 request field \"" + h.name + "\" is not allowed",
                     "HTTP/2 forbids connection-specific fields and line breaks in fields"};
    add(std::move(name), h.value);
  }
  for (std::size_t i = 0; i < 4; ++i)
    if (strings[2 * i + 1].empty() || has_line_break_or_nul(strings[2 * i + 1]))
      return Problem{errc::ConfigurationError,
                     "the HTTP/2 request's " + strings[2 * i] + " is empty or has a line break",
                     {}};
  std::vector<nghttp2_nv> nva;
  nva.reserve(strings.size() / 2);
  for (std::size_t i = 0; i < strings.size(); i += 2)
    nva.push_back(field(strings[i], strings[i + 1]));
  nghttp2_data_provider body{};
  body.read_callback = &Callbacks::read_body;
  const std::int32_t id = nghttp2_submit_request(session_->s, nullptr, nva.data(), nva.size(),
                                                 end_stream ? nullptr : &body, nullptr);
  if (id < 0)
    return Problem{
        errc::ConnectionLost,
        std::string("the HTTP/2 connection cannot open a stream: ") + nghttp2_strerror(id),
        "open the stream on a new connection"};
  Stream& st = streams_[id];
  st.outgoing_end = end_stream;
  return id;
}

void Client::submit_data(StreamId stream, std::string_view bytes, bool end_stream) {
  if (error_) return;
  Stream* st = find(stream);
  if (st == nullptr || st->outgoing_end || st->cancelled) return;
  st->outgoing.append(bytes);
  st->outgoing_end = end_stream;
  if (st->deferred) {
    st->deferred = false;
    nghttp2_session_resume_data(session_->s, stream);
  }
}

void Client::cancel(StreamId stream) {
  Stream* st = find(stream);
  if (st == nullptr || st->cancelled) return;
  st->cancelled = true;
  // Its events not yet polled are dropped, and data not yet consumed is given back.
  std::erase_if(events_, [&, i = std::size_t{0}](const Event& e) mutable {
    const bool queued = i++ >= next_event_;
    return queued && std::visit(
                         [&](const auto& v) {
                           if constexpr (std::is_same_v<std::decay_t<decltype(v)>, GoAway>)
                             return false;
                           else
                             return v.stream == stream;
                         },
                         e);
  });
  if (error_) return;
  if (st->unconsumed > 0) nghttp2_session_consume(session_->s, stream, st->unconsumed);
  st->unconsumed = 0;
  if (!st->ended) nghttp2_submit_rst_stream(session_->s, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL);
}

void Client::consume(StreamId stream, std::size_t bytes) {
  if (error_ || bytes == 0) return;
  if (Stream* st = find(stream)) {
    if (st->cancelled) return;  // cancel() gave it back already
    st->unconsumed -= std::min(bytes, st->unconsumed);
  }
  // Consumes the connection's window, and the stream's while it exists.
  nghttp2_session_consume(session_->s, stream, bytes);
}

void Client::shutdown() {
  if (error_ || going_away_) return;
  going_away_ = true;
  nghttp2_submit_goaway(session_->s, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_->s), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

std::size_t Client::handle_bytes(std::string_view bytes) {
  if (error_) return 0;
  const auto rv = nghttp2_session_mem_recv(
      session_->s, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  if (rv < 0) {
    fail(Problem{errc::RemoteProtocolViolation,
                 rv == NGHTTP2_ERR_FLOODED
                     ? std::string("the HTTP/2 peer flooded the connection with control frames")
                     : std::string("the HTTP/2 connection failed: ") + nghttp2_strerror(int(rv)),
                 {}});
    return 0;
  }
  for (const auto& [id, n] : pending_consume_)
    nghttp2_session_consume(session_->s, id, n);
  pending_consume_.clear();
  // What the input calls for (acks, resets, a GOAWAY) is framed now, so that a connection
  // error is known before handle_bytes() returns. Up to a bound: a peer that sends control
  // frames while never reading its answers meets nghttp2's flood limit, not a growing buffer.
  flush(out_, kEagerOutput);
  return static_cast<std::size_t>(rv);
}

std::optional<Event> Client::poll_event() {
  while (next_event_ < events_.size()) {
    Event e = std::move(events_[next_event_++]);
    if (next_event_ == events_.size()) {
      events_.clear();
      next_event_ = 0;
    }
    const StreamId id = std::visit(
        [](const auto& v) -> StreamId {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, GoAway>)
            return 0;
          else
            return v.stream;
        },
        e);
    if (id != 0)
      if (const Stream* st = find(id); st != nullptr && st->cancelled) continue;
    return e;
  }
  return std::nullopt;
}

void Client::flush(Bytes& out, std::size_t max) {
  while (out.size() < max) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session_->s, &data);
    if (n <= 0) {
      if (n < 0 && !error_)
        fail(Problem{errc::ProtocolError,
                     std::string("the HTTP/2 codec failed: ") + nghttp2_strerror(int(n)),
                     {}});
      return;
    }
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    if (error_) return;  // the GOAWAY that says why is out
  }
}

Bytes Client::take_output(std::size_t max) {
  Bytes out = std::move(out_);
  out_.clear();
  if (session_->s != nullptr && !error_) flush(out, max);
  return out;
}

std::size_t Client::pending_data(StreamId stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.outgoing.size();
}

bool Client::can_open_stream() const {
  if (error_ || going_away_ || session_->s == nullptr) return false;
  const std::uint32_t peer =
      nghttp2_session_get_remote_settings(session_->s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return streams_.size() < std::min(peer, limits_.max_concurrent_streams);
}

bool Client::alive() const {
  if (error_ || session_->s == nullptr) return false;
  return nghttp2_session_want_read(session_->s) != 0 ||
         nghttp2_session_want_write(session_->s) != 0;
}

}  // namespace sandboxio::http2
