// The flight recorder: a machine's behaviour is a pure function of the calls it was given (the
// bytes it consumed, the connections that opened or failed, the times it was woken at, the
// commands submitted), so writing those calls down is enough to run the same session again,
// offline, with no daemon and no network, and get the same events and records byte for byte.
//
//   auto sink = std::make_shared<MyTraceSink>();             // bytes out: a file, a buffer
//   auto m = std::make_unique<flight::Recorder>(std::move(machine), header, sink);
//   ... drive m as any machine ...                            // every call is written down
//
//   flight::TraceReader trace(bytes);                        // later, elsewhere
//   auto machine = entry->make(dsn).value();                 // made as it was (the header)
//   auto summary = flight::replay(*machine, trace, observer); // SBX_E1604 where it diverges
//
// A trace is "SBXTRACE" and a format byte, then one protocol-buffers message: a sequence of
// length-delimited fields, one per call, whose field number says what the call was
// (docs/reference/trace-format.md has the schema; `protoc --decode_raw` reads one). Besides
// the inputs it holds, after each run of polls, how many requests and events the machine gave
// and a digest of the events, so a replay checks itself step by step.
//
// What a trace holds and what it does not: every byte the machine received (so everything the
// sandbox printed, and whatever a service sent back), the commands and code submitted with
// the values of secret variables replaced by a placeholder (and those values removed from the
// command lines and code too), and the configuration the backend read from the environment,
// with variables whose names end in API_KEY, TOKEN, SECRET or PASSWORD replaced the same way.
// The bytes the machine sent (which carry credentials) are counted, never kept.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/machine.hpp"
#include "sandboxio/redact.hpp"

namespace sandboxio::flight {

/// The first bytes of every trace: the magic and the format.
inline constexpr std::string_view kMagic = "SBXTRACE\x01";
/// What a secret's value is replaced with in a trace: "[secret:NAME]".
[[nodiscard]] std::string secret_placeholder(std::string_view name);
/// True for names whose values a trace never keeps (…API_KEY, …TOKEN, …SECRET, …PASSWORD).
[[nodiscard]] bool secret_name(std::string_view name) noexcept;

/// What is needed to make the machine again: the DSN it was made for, and what its backend's
/// configuration read from the recording process ("env:NAME", "owner", "session", ...).
struct Header {
  std::string dsn{};
  std::map<std::string, std::string> ambient{};
  std::string version{};              // the sandboxio that recorded it
  std::int64_t recorded_unix_ns = 0;  // when recording started (wall clock), for the reader

  friend bool operator==(const Header&, const Header&) = default;
};

/// Where a recorder's bytes go. The recorder never blocks on it and never asks twice: a sink
/// that cannot take more returns false, and the recorder ends the trace there (Truncated).
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual bool write(std::string_view bytes) = 0;
  /// A call was just submitted: a sink that buffers writes out what it holds, so that what
  /// led up to a crash in the machine is on disk.
  virtual void checkpoint() {}
  /// The trace is complete (the machine is being destroyed).
  virtual void close() {}
};

/// A sink into a string, for tests and for fuzz harnesses that hand a crash over as a trace.
class StringTraceSink final : public TraceSink {
 public:
  bool write(std::string_view bytes) override {
    out.append(bytes);
    return true;
  }
  std::string out{};
};

/// What a recorder counted: what the session moved, and what it wrote.
struct RecorderStats {
  std::uint64_t bytes_in = 0;   // new bytes the machine was offered (re-offers counted once)
  std::uint64_t bytes_out = 0;  // bytes the machine asked to send
  std::uint64_t trace_bytes = 0;
  bool truncated = false;
};

/// Wraps a machine and writes down every call it is given, and how many outputs each gave.
/// At most `max_bytes` of trace are written: past it, a Truncated entry ends the trace and the
/// machine runs on unrecorded.
class Recorder final : public ForwardingMachine {
 public:
  Recorder(std::unique_ptr<Machine> inner, const Header& header, std::shared_ptr<TraceSink> sink,
           std::uint64_t max_bytes = std::uint64_t{256} << 20);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void handle_connected(ConnId c, Instant now) override;
  void handle_reused(ConnId c, Instant now) override;
  void handle_connect_failed(ConnId c, Problem p, Instant now) override;
  std::size_t handle_bytes(ConnId c, std::string_view d, Instant now) override;
  void handle_eof(ConnId c, Instant now) override;
  void handle_timeout(Instant now) override;
  void handle_consumed(OpId op, std::size_t n, Instant now) override;
  void handle_wall_clock(Instant at, std::chrono::system_clock::time_point wall) override;
  void handle_owners_gone(std::vector<std::string> gone, Instant now) override;
  void handle_driver_features(DriverFeatures features) override;
  OpId submit_create(const CreateOptions& o, Instant now) override;
  OpId submit_connect(std::string id, const CreateOptions& o, Instant now) override;
  OpId submit_info(Instant now) override;
  OpId submit_run(Command c, Instant now) override;
  OpId submit_stream(Command c, Instant now) override;
  OpId submit_run_code(CodeRequest r, Instant now) override;
  OpId submit_create_context(std::string l, Instant now) override;
  OpId submit_write_file(std::string p, Bytes d, Instant now) override;
  OpId submit_read_file(std::string p, Instant now) override;
  OpId submit_list_files(std::string p, Instant now) override;
  OpId submit_remove_file(std::string p, Instant now) override;
  OpId submit_kill(Instant now) override;
  OpId submit_list_managed(std::map<std::string, std::string> l, Instant now) override;
  OpId submit_remove_managed(std::string id, Instant now) override;
  void submit_cancel(OpId op, Instant now) override;
  std::optional<OpId> submit_release(Instant now) override;
  std::optional<Request> poll_request() override;
  std::optional<Event> poll_event() override;
  /// A backend's typed extensions (e2b pause, resume, PTY) are called on it directly, past
  /// the recorder: the trace says so (an Extension entry), and its replay may diverge.
  Machine& backend() noexcept override;

  [[nodiscard]] const RecorderStats& stats() const noexcept { return stats_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  RecorderStats stats_{};
};

/// The kinds of entry in a trace; the value is the entry's field number on the wire.
enum class Kind : std::uint8_t {
  Header = 1,
  Connected = 2,
  Reused = 3,
  ConnectFailed = 4,
  Bytes = 5,
  Eof = 6,
  Timeout = 7,
  Consumed = 8,
  WallClock = 9,
  OwnersGone = 10,
  DriverFeatures = 11,
  Submit = 12,
  Requests = 13,
  Events = 14,
  Truncated = 15,
  End = 16,
  Extension = 17,
  Taken = 18,  // after Bytes, when the machine took fewer than offered: how many
};

/// Which submit_*() an Entry of Kind::Submit is.
enum class Call : std::uint8_t {
  Create = 1,
  Connect,
  Info,
  Run,
  Stream,
  RunCode,
  CreateContext,
  WriteFile,
  ReadFile,
  ListFiles,
  RemoveFile,
  Kill,
  ListManaged,
  RemoveManaged,
  Cancel,
  Release,
};
[[nodiscard]] std::string_view to_string(Call call) noexcept;

/// One decoded entry. Only the fields its kind uses are set; `data` views the reader's input.
struct Entry {
  Kind kind = Kind::End;
  ConnId conn = 0;
  OpId op = 0;  // Submit(Cancel): the op cancelled; Consumed: the op
  Instant now{};
  std::uint64_t count = 0;   // Taken: bytes taken; Consumed: bytes; Requests/Events: how many
  std::uint64_t kept = 0;    // Bytes: how many of the last offer's untaken bytes lead again
  std::uint64_t digest = 0;  // Events: the digest of the run of events
  std::string_view data{};   // Bytes: the new bytes
  Problem problem{};         // ConnectFailed
  std::vector<std::string> names{};              // OwnersGone
  std::chrono::system_clock::time_point wall{};  // WallClock
  DriverFeatures features{};                     // DriverFeatures
  Call call = Call::Info;                        // Submit
  CreateOptions options{};                       // Submit(Create, Connect)
  std::string text{};                            // Submit: id, path, language
  Command command{};                             // Submit(Run, Stream)
  CodeRequest code{};                            // Submit(RunCode)
  Bytes file{};                                  // Submit(WriteFile)
  std::map<std::string, std::string> labels{};   // Submit(ListManaged)
  RecorderStats stats{};                         // End
};

/// Reads a trace entry by entry, checking as it goes. Every problem is SBX_E1603 TraceInvalid
/// with the offset it was found at; nothing is allocated beyond the entry being read.
class TraceReader {
 public:
  /// `bytes` must outlive the reader and the entries it returns.
  explicit TraceReader(std::string_view bytes);
  /// The header (the trace's first entry); a problem when the trace does not start with one.
  [[nodiscard]] const Result<Header>& header() const noexcept { return header_; }
  /// The next entry, nullopt at the end of the bytes.
  [[nodiscard]] Result<std::optional<Entry>> next();

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
  Result<Header> header_;
};

/// A digest of one event: equal events have equal digests, on every platform.
[[nodiscard]] std::uint64_t digest(const Event& event);

/// Told what a replay does, as it does it (a timeline, an HTML page, a test's comparison).
class ReplayObserver {
 public:
  virtual ~ReplayObserver() = default;
  /// An entry about to be given to the machine (inputs and submits, not output counts).
  virtual void input(const Entry& entry) { (void)entry; }
  /// A Submit entry was given: the operation it opened (none for a cancel, or a release with
  /// nothing to do).
  virtual void submitted(const Entry& entry, std::optional<OpId> op) {
    (void)entry;
    (void)op;
  }
  /// An event the machine gave, after the entry `now` was last given at.
  virtual void event(const Event& event, Instant now) {
    (void)event;
    (void)now;
  }
  /// Each record, stamped with the wall-clock start the recording's driver gave it (from the
  /// recorded wall clock): to_json_line() of it is the line the audit sink got.
  virtual void record(const OperationRecord& record) { (void)record; }
};

struct ReplaySummary {
  std::uint64_t inputs = 0;
  std::uint64_t events = 0;
  std::uint64_t requests = 0;
  std::uint64_t records = 0;
  bool truncated = false;    // the recording stopped at its size bound
  bool extension = false;    // typed extensions were called past the recorder
  bool complete = false;     // the trace has its End entry (the recorder was closed)
  RecorderStats recorded{};  // from the End entry
};

/// Gives `machine` (made from the trace's header) every recorded call in order, and checks
/// that it answers as it did: the same bytes taken, as many requests and as many events, with
/// the same digests. SBX_E1604 ReplayDiverged names the first entry where it did not;
/// SBX_E1603 TraceInvalid, a trace that cannot be read. A trace is untrusted input: one that
/// would break the driver contract (bytes on a connection the machine did not open, time
/// running backwards, output consumed of an operation never submitted) is refused before the
/// machine sees it.
[[nodiscard]] Result<ReplaySummary> replay(Machine& machine, TraceReader& trace,
                                           ReplayObserver* observer = nullptr);

}  // namespace sandboxio::flight
