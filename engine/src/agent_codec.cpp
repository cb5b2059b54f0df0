#include <cerrno>
#include <cstring>

#include "sandboxio/codec/agent.hpp"

namespace sandboxio::agent {
namespace {

Problem malformed(std::string_view what) {
  return Problem{errc::RemoteProtocolViolation,
                 "agent protocol: a malformed " + std::string(what) + " message",
                 "The two ends speak different versions, or the stream was corrupted."};
}

// ---- the payload's building blocks: big-endian integers and length-prefixed strings ----

class Writer {
 public:
  Writer& u8(std::uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out_.push_back(static_cast<char>((v >> shift) & 0xff));
    return *this;
  }
  Writer& u64(std::uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8)
      out_.push_back(static_cast<char>((v >> shift) & 0xff));
    return *this;
  }
  Writer& i32(std::int32_t v) { return u32(static_cast<std::uint32_t>(v)); }
  Writer& i64(std::int64_t v) { return u64(static_cast<std::uint64_t>(v)); }
  Writer& str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  Writer& list(const std::vector<std::string>& items) {
    u32(static_cast<std::uint32_t>(items.size()));
    for (const auto& s : items)
      str(s);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_{};
};

/// Reads a payload; any read past its end, or a length larger than what is left, fails it.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8() {
    if (!need(1)) return 0;
    const auto v = static_cast<std::uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  // A boolean is 0 or 1 on the wire; any other byte is malformed (one wire form per message).
  bool flag() {
    const auto v = u8();
    if (v > 1) ok_ = false;
    return v == 1;
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v = (v << 8) | static_cast<std::uint8_t>(in_[static_cast<std::size_t>(i)]);
    in_.remove_prefix(4);
    return v;
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v = (v << 8) | static_cast<std::uint8_t>(in_[static_cast<std::size_t>(i)]);
    in_.remove_prefix(8);
    return v;
  }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  std::string str() {
    const std::uint32_t n = u32();
    if (!need(n)) return {};
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  std::vector<std::string> list() {
    const std::uint32_t n = u32();
    std::vector<std::string> items;
    // Each item takes at least its 4-byte length: a count the payload cannot hold is a lie,
    // refused before anything is allocated for it.
    if (!ok_ || n > in_.size() / 4) {
      ok_ = false;
      return items;
    }
    items.reserve(n);
    for (std::uint32_t i = 0; i < n && ok_; ++i)
      items.push_back(str());
    return items;
  }
  std::string rest() {
    std::string s(in_);
    in_ = {};
    return s;
  }
  template <class T>
  Result<T> finish(T value, std::string_view what) {
    if (!ok_ || !in_.empty()) return malformed(what);
    return value;
  }

 private:
  bool need(std::size_t n) {
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace

std::string_view to_string(Type t) noexcept {
  switch (t) {
    case Type::Hello:
      return "Hello";
    case Type::Start:
      return "Start";
    case Type::Stdin:
      return "Stdin";
    case Type::StdinClose:
      return "StdinClose";
    case Type::Signal:
      return "Signal";
    case Type::Credit:
      return "Credit";
    case Type::ReadFile:
      return "ReadFile";
    case Type::WriteFile:
      return "WriteFile";
    case Type::ListDir:
      return "ListDir";
    case Type::Stat:
      return "Stat";
    case Type::MakeDir:
      return "MakeDir";
    case Type::Remove:
      return "Remove";
    case Type::Ping:
      return "Ping";
    case Type::Shutdown:
      return "Shutdown";
    case Type::ContextStart:
      return "ContextStart";
    case Type::RunCode:
      return "RunCode";
    case Type::ContextEnd:
      return "ContextEnd";
    case Type::FileData:
      return "FileData";
    case Type::FileEnd:
      return "FileEnd";
    case Type::Welcome:
      return "Welcome";
    case Type::Started:
      return "Started";
    case Type::Output:
      return "Output";
    case Type::Exit:
      return "Exit";
    case Type::Done:
      return "Done";
    case Type::Failure:
      return "Failure";
    case Type::Entries:
      return "Entries";
    case Type::Pong:
      return "Pong";
    case Type::Log:
      return "Log";
    case Type::CodeEvent:
      return "CodeEvent";
    case Type::CodeDone:
      return "CodeDone";
    case Type::EgressListen:
      return "EgressListen";
    case Type::TunnelData:
      return "TunnelData";
    case Type::TunnelEnd:
      return "TunnelEnd";
    case Type::TunnelClose:
      return "TunnelClose";
    case Type::TunnelOpen:
      return "TunnelOpen";
    case Type::TunnelSocket:
      return "TunnelSocket";
    case Type::TunnelDone:
      return "TunnelDone";
  }
  return "unknown";
}

std::string frame(Type type, std::uint32_t channel, std::string_view payload) {
  std::string out;
  append_frame(out, type, channel, payload);
  return out;
}

void append_frame(std::string& out, Type type, std::uint32_t channel, std::string_view payload) {
  const auto size = static_cast<std::uint32_t>(payload.size());
  const char header[kHeaderSize] = {
      static_cast<char>(size >> 24),    static_cast<char>(size >> 16),
      static_cast<char>(size >> 8),     static_cast<char>(size),
      static_cast<char>(type),          static_cast<char>(channel >> 24),
      static_cast<char>(channel >> 16), static_cast<char>(channel >> 8),
      static_cast<char>(channel)};
  out.append(header, kHeaderSize);
  out.append(payload);
}

void append_output(std::string& out, std::uint32_t channel, StreamId stream,
                   std::string_view data) {
  const char tag = static_cast<char>(stream);
  append_frame(out, Type::Output, channel, std::string_view(&tag, 1));
  // The header says one byte; the data follows it: fix the length to the whole payload.
  const auto size = static_cast<std::uint32_t>(1 + data.size());
  char* length = out.data() + out.size() - 1 - kHeaderSize;
  length[0] = static_cast<char>(size >> 24);
  length[1] = static_cast<char>(size >> 16);
  length[2] = static_cast<char>(size >> 8);
  length[3] = static_cast<char>(size);
  out.append(data);
}

bool FrameReader::start_frame() {
  Reader r(header_);
  const std::uint32_t length = r.u32();
  const auto type = r.u8();
  const std::uint32_t channel = r.u32();
  header_.clear();
  if (length > max_) {
    error_ = Problem{errc::MessageTooLarge,
                     "agent protocol: a " + std::to_string(length) + "-byte frame (limit " +
                         std::to_string(max_) + ")",
                     "The two ends speak different versions, or the stream was corrupted."};
    return false;
  }
  current_ = Frame{static_cast<Type>(type), channel, {}};
  current_.payload.reserve(length);
  remaining_ = length;
  need_header_ = false;
  return true;
}

Frame FrameReader::take_frame() {
  need_header_ = true;
  return std::move(current_);
}

std::string Hello::encode() const {
  return Writer().u32(min_version).u32(max_version).take();
}
Result<Hello> Hello::decode(std::string_view payload) {
  Reader r(payload);
  Hello h;
  h.min_version = r.u32();
  h.max_version = r.u32();
  return r.finish(h, "Hello");
}

std::string Welcome::encode() const {
  return Writer().u32(version).str(agent).u32(features).u32(pid).str(python).take();
}
Result<Welcome> Welcome::decode(std::string_view payload) {
  Reader r(payload);
  Welcome w;
  w.version = r.u32();
  w.agent = r.str();
  w.features = r.u32();
  w.pid = r.u32();
  w.python = r.str();
  return r.finish(w, "Welcome");
}

std::string Start::encode() const {
  return Writer().list(argv).list(env).str(cwd).str(user).u8(stdin_open ? 1 : 0).u32(window).take();
}
Result<Start> Start::decode(std::string_view payload) {
  Reader r(payload);
  Start s;
  s.argv = r.list();
  s.env = r.list();
  s.cwd = r.str();
  s.user = r.str();
  s.stdin_open = r.flag();
  s.window = r.u32();
  auto out = r.finish(s, "Start");
  if (out && out.value().argv.empty()) return malformed("Start (no program)");
  return out;
}

std::string Started::encode() const {
  return Writer().i32(pid).take();
}
Result<Started> Started::decode(std::string_view payload) {
  Reader r(payload);
  Started s;
  s.pid = r.i32();
  return r.finish(s, "Started");
}

std::string Signal::encode() const {
  return Writer().u8(tree ? 1 : 0).i32(signo).take();
}
Result<Signal> Signal::decode(std::string_view payload) {
  Reader r(payload);
  Signal s;
  s.tree = r.flag();
  s.signo = r.i32();
  return r.finish(s, "Signal");
}

std::string Credit::encode() const {
  return Writer().u32(bytes).take();
}
Result<Credit> Credit::decode(std::string_view payload) {
  Reader r(payload);
  Credit c;
  c.bytes = r.u32();
  return r.finish(c, "Credit");
}

std::string Output::encode() const {
  std::string out = Writer().u8(static_cast<std::uint8_t>(stream)).take();
  out.append(data);
  return out;
}
Result<Output> Output::decode(std::string_view payload) {
  Reader r(payload);
  Output o;
  const auto s = r.u8();
  o.stream = static_cast<StreamId>(s);
  o.data = r.rest();
  if (s != 1 && s != 2) return malformed("Output (stream)");
  return r.finish(std::move(o), "Output");
}

std::string Exit::encode() const {
  return Writer()
      .u8(static_cast<std::uint8_t>(how))
      .i32(value)
      .u8(core_dumped ? 1 : 0)
      .str(message)
      .take();
}
Result<Exit> Exit::decode(std::string_view payload) {
  Reader r(payload);
  Exit e;
  const auto how = r.u8();
  e.how = static_cast<Exit::How>(how);
  e.value = r.i32();
  e.core_dumped = r.flag();
  e.message = r.str();
  if (how > 2) return malformed("Exit (kind)");
  return r.finish(e, "Exit");
}

std::string PathRequest::encode() const {
  return Writer().str(path).u32(mode).u8(flags).u32(window).take();
}
Result<PathRequest> PathRequest::decode(std::string_view payload) {
  Reader r(payload);
  PathRequest p;
  p.path = r.str();
  p.mode = r.u32();
  p.flags = r.u8();
  p.window = r.u32();
  return r.finish(p, "path request");
}

std::string Done::encode() const {
  return Writer().u64(size).take();
}
Result<Done> Done::decode(std::string_view payload) {
  Reader r(payload);
  Done d;
  d.size = r.u64();
  return r.finish(d, "Done");
}

std::string Failure::encode() const {
  return Writer().i32(error).str(message).take();
}
Result<Failure> Failure::decode(std::string_view payload) {
  Reader r(payload);
  Failure f;
  f.error = r.i32();
  f.message = r.str();
  return r.finish(f, "Failure");
}

Problem Failure::problem(const std::string& what) const {
  // The agent names the path it failed on; prefix ours only when it names another (a parent).
  const std::string detail = message.starts_with(what + ": ") ? message : what + ": " + message;
  switch (error) {
    case ENOENT:
      return {errc::FileNotFound, detail, {}};
    case ENOTDIR:
      return {errc::NotADirectory, detail, {}};
    case EISDIR:
      return {errc::IsADirectory, detail, {}};
    case EACCES:
    case EPERM:
    case EROFS:
      return {errc::FilePermissionDenied, detail, {}};
    default:
      return {errc::FilesystemError, detail, {}};
  }
}

std::string Entries::encode() const {
  Writer w;
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    w.str(e.name).u8(static_cast<std::uint8_t>(e.kind)).u64(e.size).u32(e.mode).i64(e.mtime);
  }
  return w.take();
}
Result<Entries> Entries::decode(std::string_view payload) {
  Reader r(payload);
  Entries out;
  const std::uint32_t n = r.u32();
  // An entry takes at least 25 bytes: refuse a count the payload cannot hold.
  if (n > payload.size() / 25) return malformed("Entries (count)");
  out.entries.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    Entry e;
    e.name = r.str();
    const auto kind = r.u8();
    if (kind > 3) return malformed("Entries (kind)");
    e.kind = static_cast<Entry::Kind>(kind);
    e.size = r.u64();
    e.mode = r.u32();
    e.mtime = r.i64();
    out.entries.push_back(std::move(e));
  }
  return r.finish(std::move(out), "Entries");
}

std::string ContextStart::encode() const {
  return Writer().list(env).str(cwd).take();
}
Result<ContextStart> ContextStart::decode(std::string_view payload) {
  Reader r(payload);
  ContextStart c;
  c.env = r.list();
  c.cwd = r.str();
  return r.finish(std::move(c), "ContextStart");
}

std::string RunCode::encode() const {
  return Writer().u32(context).str(code).list(env).u32(window).take();
}
Result<RunCode> RunCode::decode(std::string_view payload) {
  Reader r(payload);
  RunCode c;
  c.context = r.u32();
  c.code = r.str();
  c.env = r.list();
  c.window = r.u32();
  return r.finish(std::move(c), "RunCode");
}

std::string CodeEvent::encode() const {
  Writer w;
  w.u8(static_cast<std::uint8_t>(kind));
  if (kind == Kind::Result) {
    w.u32(static_cast<std::uint32_t>(bundle.size()));
    for (const auto& [mime, data] : bundle)
      w.str(mime).str(data);
  } else {
    w.str(name).str(value).str(traceback);
  }
  return w.take();
}
Result<CodeEvent> CodeEvent::decode(std::string_view payload) {
  Reader r(payload);
  CodeEvent e;
  const auto kind = r.u8();
  if (kind != 1 && kind != 2) return malformed("CodeEvent (kind)");
  e.kind = static_cast<Kind>(kind);
  if (e.kind == Kind::Result) {
    const std::uint32_t n = r.u32();
    // Each item takes at least its two 4-byte lengths.
    if (n > payload.size() / 8) return malformed("CodeEvent (count)");
    e.bundle.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::string mime = r.str();
      std::string data = r.str();
      e.bundle.emplace_back(std::move(mime), std::move(data));
    }
  } else {
    e.name = r.str();
    e.value = r.str();
    e.traceback = r.str();
  }
  return r.finish(std::move(e), "CodeEvent");
}

std::string CodeDone::encode() const {
  return Writer()
      .u8(static_cast<std::uint8_t>(how))
      .u8(fresh ? 1 : 0)
      .u8(signalled ? 1 : 0)
      .i32(value)
      .str(message)
      .take();
}
Result<CodeDone> CodeDone::decode(std::string_view payload) {
  Reader r(payload);
  CodeDone d;
  const auto how = r.u8();
  d.how = static_cast<How>(how);
  d.fresh = r.flag();
  d.signalled = r.flag();
  d.value = r.i32();
  d.message = r.str();
  if (how > 3) return malformed("CodeDone (kind)");
  return r.finish(std::move(d), "CodeDone");
}

std::string EgressListen::encode() const {
  return Writer().u32(port).u8(handover ? 1 : 0).take();
}
Result<EgressListen> EgressListen::decode(std::string_view payload) {
  Reader r(payload);
  const std::uint32_t port = r.u32();
  const std::uint8_t handover = r.u8();
  if (port == 0 || port > 65535) return malformed("EgressListen (port)");
  if (handover > 1) return malformed("EgressListen (handover)");
  return r.finish(EgressListen{static_cast<std::uint16_t>(port), handover == 1}, "EgressListen");
}

std::string TunnelSocket::encode() const {
  return Writer().u64(used).str(head).take();
}
Result<TunnelSocket> TunnelSocket::decode(std::string_view payload) {
  Reader r(payload);
  TunnelSocket t;
  t.used = r.u64();
  t.head = r.str();
  return r.finish(t, "TunnelSocket");
}

std::string TunnelDone::encode() const {
  return Writer().u64(to_client).u64(to_upstream).str(reason).take();
}
Result<TunnelDone> TunnelDone::decode(std::string_view payload) {
  Reader r(payload);
  TunnelDone d;
  d.to_client = r.u64();
  d.to_upstream = r.u64();
  d.reason = r.str();
  return r.finish(d, "TunnelDone");
}

std::string Ping::encode() const {
  return Writer().u64(nonce).take();
}
Result<Ping> Ping::decode(std::string_view payload) {
  Reader r(payload);
  Ping p;
  p.nonce = r.u64();
  return r.finish(p, "Ping");
}

}  // namespace sandboxio::agent
