// The agent protocol: what the host and sandboxio-agent (the small static init inside a
// sandbox) say to each other over one byte stream, such as a container's attach stream. The
// same code encodes and decodes on both sides, so they cannot drift apart. Sans-I/O.
//
// A frame is a 9-byte header [u32 payload length, u8 type, u32 channel] (big-endian) and the
// payload. Channel 0 is the session; a process or a file transfer has the channel the host
// chose when it started it. Payloads are made of big-endian integers and length-prefixed
// byte strings (docs/reference/agent-protocol.md has the table of messages).
//
//   sandboxio::agent::FrameReader reader;
//   reader.feed(bytes, [&](sandboxio::agent::Frame frame) { ... });
//   if (reader.error()) ...;               // sticky: a frame over the limit
//   auto start = sandboxio::agent::Start::decode(frame.payload);   // Result<Start>
//   std::string wire = sandboxio::agent::frame(Type::Start, 7, start.value().encode());
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/result.hpp"

namespace sandboxio::agent {

// 2: code contexts; 3: a read starts with its entry; 4: egress tunnels; 5: handed-over tunnels
inline constexpr std::uint32_t kVersion = 5;
inline constexpr std::size_t kHeaderSize = 9;
/// The largest payload either side accepts; a bigger frame ends the session (SBX_E1803).
inline constexpr std::uint32_t kMaxPayload = 1u << 20;
/// The most bytes the agent puts in one Output or FileData frame (a quarter of the window:
/// large reads, few wake-ups, and the window still holds four frames in flight).
inline constexpr std::uint32_t kChunk = 256u << 10;
/// Where the agent, as root, listens for sessions besides its owner's stream (a directory
/// only root may enter): bridge execs and the host's direct socket both come here.
inline constexpr std::string_view kSocketPath = "/.sandboxio/run/agent.sock";
/// The output window a process starts with when the host gives none: the agent reads no more
/// of its pipes than this many bytes ahead of the host's Credit.
inline constexpr std::uint32_t kDefaultWindow = 1u << 20;
/// Channels with this bit set are the agent's to choose: the egress tunnels it opens. The
/// host's own channels never have it.
inline constexpr std::uint32_t kAgentChannel = 0x8000'0000u;
/// The bytes either side of a tunnel may send ahead of the other's Credit.
inline constexpr std::uint32_t kTunnelWindow = 2u << 20;
/// The most tunnels the agent keeps open at once; a connection past them is closed at once.
inline constexpr std::size_t kMaxTunnels = 128;
/// Where the agent's egress proxy listens inside the sandbox when the host names no port.
inline constexpr std::uint16_t kProxyPort = 3128;

enum class Type : std::uint8_t {
  // host -> agent
  Hello = 1,          // session: Hello
  Start = 2,          // channel: Start
  Stdin = 3,          // channel: raw bytes for the process's stdin
  StdinClose = 4,     // channel: end of stdin
  Signal = 5,         // channel: Signal
  Credit = 6,         // channel: Credit (more output may be sent)
  ReadFile = 7,       // channel: PathRequest; FileData... then FileEnd, or Failure
  WriteFile = 8,      // channel: PathRequest; then the host's FileData... FileEnd; Done or Failure
  ListDir = 9,        // channel: PathRequest; Entries or Failure
  Stat = 10,          // channel: PathRequest; Entries (one) or Failure
  MakeDir = 11,       // channel: PathRequest (flags: parents); Done or Failure
  Remove = 12,        // channel: PathRequest (flags: recursive); Done or Failure
  Ping = 13,          // session: Ping
  Shutdown = 14,      // session: end the sandbox now
  ContextStart = 15,  // channel: ContextStart (the channel is the context's); Started or Failure
  RunCode = 16,       // channel: RunCode; Output..., CodeEvent..., then CodeDone
  ContextEnd = 17,    // channel: the context's; Done
  EgressListen = 18,  // channel: EgressListen; Done (the port) or Failure
  TunnelSocket = 19,  // channel (a tunnel's): TunnelSocket, with the upstream's socket attached
  // both directions
  FileData = 32,  // channel: raw bytes of a file
  FileEnd = 33,   // channel: the file's bytes are all sent
  // A tunnel: a connection a program made to the agent's egress proxy (agent channels only).
  TunnelData = 34,   // channel: raw bytes of the connection; Credit answers them
  TunnelEnd = 35,    // channel: the sender's side ended (the agent: EOF; the host: half-close)
  TunnelClose = 36,  // channel: the sender has dropped the tunnel; nothing more either way
  // agent -> host
  Welcome = 64,     // session: Welcome
  Started = 65,     // channel: Started
  Output = 66,      // channel: Output
  Exit = 67,        // channel: Exit (the last frame of a process)
  Done = 68,        // channel: Done
  Failure = 69,     // channel: Failure (channel 0: the session failed)
  Entries = 70,     // channel: Entries
  Pong = 71,        // session: Ping (the nonce back)
  Log = 72,         // session: a diagnostic line from the agent
  CodeEvent = 73,   // channel: CodeEvent (a cell's value or exception)
  CodeDone = 74,    // channel: CodeDone (the last frame of a cell)
  TunnelOpen = 75,  // channel (an agent channel): a program connected to the egress proxy
  TunnelDone = 76,  // channel (a handed-over tunnel's): TunnelDone, its last frame
};

[[nodiscard]] std::string_view to_string(Type t) noexcept;

struct Frame {
  Type type = Type::Ping;
  std::uint32_t channel = 0;
  std::string payload{};
};

/// One frame on the wire. Payloads over kMaxPayload are the caller's mistake.
[[nodiscard]] std::string frame(Type type, std::uint32_t channel, std::string_view payload = {});
/// The same frame, appended to `out` (a send queue) without a temporary.
void append_frame(std::string& out, Type type, std::uint32_t channel, std::string_view payload);

/// Splits a byte stream into frames; frames over `max_payload` set a sticky error.
class FrameReader {
 public:
  explicit FrameReader(std::uint32_t max_payload = kMaxPayload) : max_(max_payload) {}

  template <class Sink>
  bool feed(std::string_view data, Sink&& sink) {
    while (!data.empty() && !error_) {
      if (need_header_) {
        const std::size_t take = std::min(kHeaderSize - header_.size(), data.size());
        header_.append(data.substr(0, take));
        data.remove_prefix(take);
        if (header_.size() == kHeaderSize && start_frame()) {
          if (remaining_ == 0) sink(take_frame());
        }
        continue;
      }
      const std::size_t n = std::min<std::size_t>(remaining_, data.size());
      current_.payload.append(data.substr(0, n));
      remaining_ -= static_cast<std::uint32_t>(n);
      data.remove_prefix(n);
      if (remaining_ == 0) sink(take_frame());
    }
    return !error_;
  }
  /// True between frames: the stream may end here without losing a message.
  [[nodiscard]] bool at_boundary() const noexcept { return need_header_ && header_.empty(); }
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

 private:
  bool start_frame();
  Frame take_frame();

  std::uint32_t max_;
  bool need_header_ = true;
  std::string header_{};
  std::uint32_t remaining_ = 0;
  Frame current_{};
  std::optional<Problem> error_{};
};

// ---- messages ----

struct Hello {
  std::uint32_t min_version = kVersion;
  std::uint32_t max_version = kVersion;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Hello> decode(std::string_view payload);
};

/// What the agent found in the sandbox when it started.
enum Feature : std::uint32_t {
  kPython3 = 1u << 0,  // python3 is on the PATH
};

struct Welcome {
  std::uint32_t version = kVersion;
  std::string agent{};  // "sandboxio-agent 0.1.0"
  std::uint32_t features = 0;
  std::uint32_t pid = 0;  // the agent's own pid (1 as init)
  std::string python{};   // python3's path, when kPython3
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Welcome> decode(std::string_view payload);
};

struct Start {
  std::vector<std::string> argv{};
  std::vector<std::string> env{};  // NAME=VALUE over the sandbox's environment
  std::string cwd{};               // empty: the sandbox's working directory
  std::string user{};              // empty: the agent's; else UID[:GID]
  bool stdin_open = false;         // false: stdin is /dev/null
  std::uint32_t window = kDefaultWindow;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Start> decode(std::string_view payload);
};

struct Started {
  std::int32_t pid = 0;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Started> decode(std::string_view payload);
};

struct Signal {
  bool tree = true;  // true: every process the command started, wherever it went
  std::int32_t signo = 9;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Signal> decode(std::string_view payload);
};

struct Credit {
  std::uint32_t bytes = 0;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Credit> decode(std::string_view payload);
};

enum class StreamId : std::uint8_t { Stdout = 1, Stderr = 2 };

struct Output {
  StreamId stream = StreamId::Stdout;
  std::string data{};
  [[nodiscard]] std::string encode() const;
  // append_output() below writes the same frame straight into a send queue.
  [[nodiscard]] static Result<Output> decode(std::string_view payload);
};

/// frame(Type::Output, channel, Output{stream, data}.encode()), appended to `out` with one
/// copy of `data`: the agent's path for every byte of output.
void append_output(std::string& out, std::uint32_t channel, StreamId stream, std::string_view data);

struct Exit {
  enum class How : std::uint8_t { Exited = 0, Signalled = 1, StartFailed = 2 };
  How how = How::Exited;
  std::int32_t value = 0;  // the exit status, or the signal number, or errno
  bool core_dumped = false;
  std::string message{};  // StartFailed: what failed
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Exit> decode(std::string_view payload);
};

struct PathRequest {
  enum Flags : std::uint8_t { kParents = 1, kRecursive = 2 };
  std::string path{};
  std::uint32_t mode = 0644;
  std::uint8_t flags = 0;
  std::uint32_t window = kDefaultWindow;  // ReadFile: bytes ahead of the host's Credit
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<PathRequest> decode(std::string_view payload);
};

struct Done {
  std::uint64_t size = 0;  // WriteFile: bytes written
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Done> decode(std::string_view payload);
};

struct Failure {
  std::int32_t error = 0;  // errno in the sandbox (0: not a system error)
  std::string message{};
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Failure> decode(std::string_view payload);
  /// The SBX problem this failure is, for `what` ("read /etc/x").
  [[nodiscard]] Problem problem(const std::string& what) const;
};

struct Entry {
  enum class Kind : std::uint8_t { File = 0, Directory = 1, Symlink = 2, Other = 3 };
  std::string name{};
  Kind kind = Kind::File;
  std::uint64_t size = 0;
  std::uint32_t mode = 0;
  std::int64_t mtime = 0;  // unix seconds
  friend bool operator==(const Entry&, const Entry&) = default;
};

struct Entries {
  std::vector<Entry> entries{};
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Entries> decode(std::string_view payload);
};

// ---- code contexts ----
// A context is one python3 running the bootstrap the agent carries (agent/python/bootstrap.py),
// with one namespace. Cells run one at a time in the order they came; their stdout and stderr
// arrive as Output frames on the cell's channel, then its CodeEvents, then CodeDone. A Signal on
// a cell's channel: SIGINT interrupts it (everything the cell started is killed, the context
// lives on); SIGKILL restarts the context (a fresh python3: its variables are gone).

struct ContextStart {
  std::vector<std::string> env{};  // NAME=VALUE over the sandbox's environment
  std::string cwd{};               // empty: the sandbox's working directory
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<ContextStart> decode(std::string_view payload);
};

struct RunCode {
  std::uint32_t context = 0;  // the channel the context was started on
  std::string code{};
  std::vector<std::string> env{};  // NAME=VALUE for this cell only
  std::uint32_t window = kDefaultWindow;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<RunCode> decode(std::string_view payload);
};

/// What a cell produced beside its output. The bootstrap writes these bytes and the agent
/// relays them as they are: the host's decoder is the only parser of what Python said.
struct CodeEvent {
  enum class Kind : std::uint8_t { Result = 1, Error = 2 };
  Kind kind = Kind::Result;
  std::vector<std::pair<std::string, std::string>> bundle{};  // Result: (mime type, data)
  std::string name{}, value{}, traceback{};                   // Error
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<CodeEvent> decode(std::string_view payload);
};

struct CodeDone {
  enum class How : std::uint8_t {
    Finished = 0,   // the cell ran to its end (an exception is a CodeEvent before this)
    Restarted = 1,  // the host asked (SIGKILL): the context is a fresh python3 now
    Died = 2,       // python3 ended by itself; the context is a fresh one now
    Lost = 3,       // python3 ended and could not be started again: the context is gone
  };
  How how = How::Finished;
  /// python3 had ended between cells and the context was restarted before this one ran:
  /// the variables it expected are gone.
  bool fresh = false;
  bool signalled = false;  // Died: value is the signal that ended python3, else its status
  std::int32_t value = 0;
  std::string message{};
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<CodeDone> decode(std::string_view payload);
};

// ---- egress tunnels ----
// With EgressListen the host asks the agent to listen on 127.0.0.1:PORT inside the sandbox.
// Each connection made there becomes a tunnel on a channel the agent chooses (kAgentChannel
// set): TunnelOpen, then TunnelData and TunnelEnd both ways, each side sending at most
// kTunnelWindow bytes ahead of the other's Credit, until both ends ended or either side sent
// TunnelClose. The agent relays bytes and never reads them: the host parses the request,
// checks the policy and connects. The tunnels belong to the session that asked; they end
// with it.

//
// Handed-over tunnels (EgressListen.handover, asked only where the agent's socket reaches the
// agent itself and the host's driver can pass descriptors): once the host has checked a
// tunnel's request and connected its upstream, it sends TunnelSocket with that connected
// socket attached (SCM_RIGHTS, on the frame's bytes) and takes no further part in the bytes.
// The agent writes the frame's `head` to the upstream, then the client bytes it sent past the
// `used` ones (it keeps what the host has not credited yet for this), then relays both ways
// itself, kernel to kernel, and ends the tunnel with TunnelDone: the bytes it relayed and why
// it ended. The host still decided everything: the agent only carries bytes on a socket the
// host connected, to the address the host resolved. Nothing the host sent for the tunnel
// before TunnelSocket is lost: TunnelData to the client is written first.

struct EgressListen {
  std::uint16_t port = kProxyPort;
  bool handover = false;  // the host will hand over connected sockets (TunnelSocket)
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<EgressListen> decode(std::string_view payload);
};

struct TunnelSocket {
  std::uint64_t used = 0;  // the client bytes the host took (all of them in `head` or sent)
  std::string head{};      // for the upstream before anything else: the request the host made
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<TunnelSocket> decode(std::string_view payload);
};

struct TunnelDone {
  std::uint64_t to_client = 0;    // upstream bytes the agent relayed to the client
  std::uint64_t to_upstream = 0;  // client bytes it wrote to the upstream (past `used`)
  std::string reason{};           // empty: both sides ended in order
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<TunnelDone> decode(std::string_view payload);
};

struct Ping {
  std::uint64_t nonce = 0;
  [[nodiscard]] std::string encode() const;
  [[nodiscard]] static Result<Ping> decode(std::string_view payload);
};

}  // namespace sandboxio::agent
