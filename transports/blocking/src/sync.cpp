#include "sandboxio/sync.hpp"

#include "sandboxio/e2b.hpp"

#include "sandboxio/config.hpp"
#include "sandboxio/flight_recorder.hpp"
#include "session.hpp"

namespace sandboxio::sync {
namespace {

template <class T>
T take(Completion&& c, const char* what) {
  if (auto* v = std::get_if<T>(&c)) return std::move(*v);
  throw Error(errc::ProtocolError,
              std::string("the backend answered ") + what + " with the wrong kind of value");
}

// The error_code overloads: the value, or `ec` set and a default value.
template <class T>
T value_or_code(detail::Session& session, OpId op, const char* what, std::error_code& ec) {
  auto r = session.wait_result(op);
  if (!r) {
    ec = make_error_code(r.problem().code);
    return T{};
  }
  ec.clear();
  if constexpr (std::is_same_v<T, Completion>) {
    return std::move(r).value();
  } else {
    return take<T>(std::move(r).value(), what);
  }
}

std::shared_ptr<detail::Session> open_session(std::string_view text, CreateOptions options,
                                              std::unique_ptr<Link> link) {
  if (!options.teardown_grace) options.teardown_grace = teardown_grace().value();
  Dsn dsn = parse_dsn(text).value();
  std::unique_ptr<Machine> machine = make_machine(dsn, options).value();
  return std::make_shared<detail::Session>(std::move(machine), options, std::move(link));
}

}  // namespace

// ---- Process ----

Process::Process(std::shared_ptr<detail::Session> session, OpId op)
    : session_(std::move(session)), op_(op) {}
Process::Process(Process&& other) noexcept
    : session_(std::move(other.session_)),
      op_(other.op_),
      finished_(other.finished_),
      result_(std::move(other.result_)) {
  other.finished_ = true;
}
Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    this->~Process();
    new (this) Process(std::move(other));
  }
  return *this;
}

Process::~Process() {
  if (finished_ || !session_) return;
  try {
    kill();        // dropping the handle kills the remote process
  } catch (...) {  // a destructor must not throw; the record tells what happened
  }
}

std::optional<OutputChunk> Process::next() {
  if (finished_ || !session_) return std::nullopt;
  const auto held = session_->hold();
  auto chunk = session_->next_chunk(op_);
  return chunk;
}

ExecResult Process::wait() {
  if (result_) return *result_;
  if (!session_) throw Error(errc::ProcessClosed, "this Process was moved from");
  const auto held = session_->hold();
  try {
    result_ = take<ExecResult>(session_->wait(op_), "stream()");
  } catch (const std::system_error& e) {
    if (e.code() != std::errc::operation_canceled) throw;
    ExecResult cancelled;
    cancelled.termination = Termination::Cancelled;
    cancelled.streamed = true;
    result_ = cancelled;
  }
  finished_ = true;
  return *result_;
}

void Process::kill() {
  if (finished_ || !session_) return;
  const auto held = session_->hold();
  session_->cancel(op_);
  finished_ = true;
  ExecResult cancelled;
  cancelled.termination = Termination::Cancelled;
  cancelled.streamed = true;
  cancelled.exit_code = 137;
  cancelled.signal = 9;
  result_ = cancelled;
  session_->forget(op_);
}

// ---- Sandbox ----

Sandbox::Sandbox(std::shared_ptr<detail::Session> session) : session_(std::move(session)) {}
Sandbox::Sandbox(Sandbox&&) noexcept = default;
Sandbox& Sandbox::operator=(Sandbox&& other) noexcept {
  if (this != &other) {
    this->~Sandbox();
    new (this) Sandbox(std::move(other));
  }
  return *this;
}

Sandbox::~Sandbox() {
  if (!session_ || session_->detached || session_->killed || session_->options().outlive_owner)
    return;
  try {
    kill();
  } catch (...) {  // teardown failures are in the record; a destructor must not throw
  }
}

Sandbox Sandbox::create(std::string_view dsn, CreateOptions options) {
  return create(dsn, std::move(options), nullptr);
}

Sandbox Sandbox::create(std::string_view dsn, CreateOptions options, std::unique_ptr<Link> link) {
  auto session = open_session(dsn, options, std::move(link));
  Machine& m = session->machine();
  const OpId op = session->track(m.submit_create(session->options(), session->now()));
  session->info = take<SandboxInfo>(session->wait(op), "create()");
  session->sandbox_id = session->info.id;
  detail::keep_time(session);
  return Sandbox(std::move(session));
}

Sandbox Sandbox::connect(std::string_view dsn, std::string id, CreateOptions options,
                         std::unique_ptr<Link> link) {
  options.outlive_owner = true;  // re-attaching does not take ownership
  auto session = open_session(dsn, options, std::move(link));
  Machine& m = session->machine();
  const OpId op =
      session->track(m.submit_connect(std::move(id), session->options(), session->now()));
  session->info = take<SandboxInfo>(session->wait(op), "connect()");
  session->sandbox_id = session->info.id;
  return Sandbox(std::move(session));
}

const std::string& Sandbox::id() const noexcept {
  return session_->sandbox_id;
}
std::string_view Sandbox::backend() const noexcept {
  return session_->machine().scheme();
}
CapabilitySet Sandbox::capabilities() const noexcept {
  return session_->machine().capabilities();
}
IsolationTier Sandbox::tier() const noexcept {
  return session_->machine().tier();
}

SandboxInfo Sandbox::info() {
  const auto held = session_->hold();  // the lease keeper drives it between calls
  const OpId op = session_->track(session_->machine().submit_info(session_->now()));
  return take<SandboxInfo>(session_->wait(op), "info()");
}

ExecResult Sandbox::run(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  return run(std::move(c));
}

ExecResult Sandbox::run(Command command) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_run(std::move(command), session_->now()));
  return take<ExecResult>(session_->wait(op), "run()");
}

ExecResult Sandbox::run(Command command, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_run(std::move(command), session_->now()));
  return value_or_code<ExecResult>(*session_, op, "run()", ec);
}

Process Sandbox::stream(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  return stream(std::move(c));
}

Process Sandbox::stream(Command command) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_stream(std::move(command), session_->now()));
  // An immediate refusal (capability, bad command) is thrown here, not at the first next().
  // A command that already finished keeps its output for next().
  if (session_->refused(op)) {
    auto r = session_->wait_result(op);
    if (!r) r.problem().raise();
  }
  return Process(session_, op);
}

ExecResult Sandbox::run_code(std::string code) {
  CodeRequest r;
  r.code = std::move(code);
  return run_code(std::move(r));
}

ExecResult Sandbox::run_code(CodeRequest request) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_run_code(std::move(request), session_->now()));
  return take<ExecResult>(session_->wait(op), "run_code()");
}

CodeContext Sandbox::create_context(std::string language) {
  const auto held = session_->hold();
  const OpId op = session_->track(
      session_->machine().submit_create_context(std::move(language), session_->now()));
  return take<CodeContext>(session_->wait(op), "create_context()");
}

void Sandbox::write_file(std::string path, Bytes data) {
  const auto held = session_->hold();
  const OpId op = session_->track(
      session_->machine().submit_write_file(std::move(path), std::move(data), session_->now()));
  (void)session_->wait(op);
}

void Sandbox::write_file(std::string path, Bytes data, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op = session_->track(
      session_->machine().submit_write_file(std::move(path), std::move(data), session_->now()));
  (void)value_or_code<Completion>(*session_, op, "write_file()", ec);
}

Bytes Sandbox::read_file(std::string path) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_read_file(std::move(path), session_->now()));
  return take<Bytes>(session_->wait(op), "read_file()");
}

Bytes Sandbox::read_file(std::string path, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_read_file(std::move(path), session_->now()));
  return value_or_code<Bytes>(*session_, op, "read_file()", ec);
}

SandboxInfo Sandbox::info(std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op = session_->track(session_->machine().submit_info(session_->now()));
  return value_or_code<SandboxInfo>(*session_, op, "info()", ec);
}

Process Sandbox::stream(Command command, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_stream(std::move(command), session_->now()));
  ec.clear();
  if (session_->refused(op)) {
    auto r = session_->wait_result(op);
    if (!r) ec = make_error_code(r.problem().code);
  }
  return Process(session_, op);
}

ExecResult Sandbox::run_code(CodeRequest request, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_run_code(std::move(request), session_->now()));
  return value_or_code<ExecResult>(*session_, op, "run_code()", ec);
}

CodeContext Sandbox::create_context(std::string language, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op = session_->track(
      session_->machine().submit_create_context(std::move(language), session_->now()));
  return value_or_code<CodeContext>(*session_, op, "create_context()", ec);
}

std::vector<FileInfo> Sandbox::list_files(std::string path, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_list_files(std::move(path), session_->now()));
  return value_or_code<std::vector<FileInfo>>(*session_, op, "list_files()", ec);
}

void Sandbox::remove_file(std::string path, std::error_code& ec) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_remove_file(std::move(path), session_->now()));
  (void)value_or_code<Completion>(*session_, op, "remove_file()", ec);
}

void Sandbox::kill(std::error_code& ec) {
  const auto held = session_->hold();
  ec.clear();
  if (session_->killed) return;
  session_->killed = true;
  const OpId op = session_->track(session_->machine().submit_kill(session_->now()));
  (void)value_or_code<Completion>(*session_, op, "kill()", ec);
}

Completion Sandbox::native_call(const std::function<OpId(Machine&, Instant)>& submit,
                                std::error_code& ec) {
  const OpId op = session_->track(submit(session_->machine(), session_->now()));
  return value_or_code<Completion>(*session_, op, "native_call()", ec);
}

std::vector<FileInfo> Sandbox::list_files(std::string path) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_list_files(std::move(path), session_->now()));
  return take<std::vector<FileInfo>>(session_->wait(op), "list_files()");
}

void Sandbox::remove_file(std::string path) {
  const auto held = session_->hold();
  const OpId op =
      session_->track(session_->machine().submit_remove_file(std::move(path), session_->now()));
  (void)session_->wait(op);
}

void Sandbox::kill() {
  const auto held = session_->hold();
  if (session_->killed) return;
  session_->killed = true;
  const OpId op = session_->track(session_->machine().submit_kill(session_->now()));
  (void)session_->wait(op);
}

void Sandbox::detach() noexcept {
  session_->detached = true;
  // The owner lets go: a lease (e2b://) gives way to what is left of the lifetime.
  try {
    const auto held = session_->hold();
    if (auto op = session_->machine().submit_release(session_->now())) {
      session_->track(*op);
      if (auto r = session_->wait_result(*op); !r) session_->warnings.push_back(r.problem());
    }
  } catch (...) {  // noexcept: the sandbox then ends with its lease; the record says why
  }
}
const std::vector<Problem>& Sandbox::warnings() const noexcept {
  return session_->warnings;
}
Machine& Sandbox::native() {
  return session_->machine();
}
Completion Sandbox::native_call(const std::function<OpId(Machine&, Instant)>& submit) {
  const auto held = session_->hold();
  const OpId op = session_->track(submit(session_->machine(), session_->now()));
  Completion done = session_->wait(op);
  detail::keep_time(session_);  // a new lifetime may bring a lease to renew
  return done;
}

// ---- e2b://'s typed extensions ----

namespace e2b {
void pause(Sandbox& sandbox) {
  (void)sandbox.native_call(
      [](Machine& m, Instant now) { return sandboxio::e2b::extensions(m).submit_pause(now); });
}
SandboxInfo resume(Sandbox& sandbox, std::chrono::seconds lifetime) {
  return take<SandboxInfo>(sandbox.native_call([lifetime](Machine& m, Instant now) {
    return sandboxio::e2b::extensions(m).submit_resume(lifetime, now);
  }),
                           "resume()");
}
void set_lifetime(Sandbox& sandbox, std::chrono::seconds lifetime) {
  (void)sandbox.native_call([lifetime](Machine& m, Instant now) {
    return sandboxio::e2b::extensions(m).submit_set_lifetime(lifetime, now);
  });
}
ExecResult run_pty(Sandbox& sandbox, Command command, std::uint16_t cols, std::uint16_t rows) {
  return take<ExecResult>(sandbox.native_call([&](Machine& m, Instant now) {
    return sandboxio::e2b::extensions(m).submit_run_pty(std::move(command), cols, rows, now);
  }),
                          "run_pty()");
}
}  // namespace e2b

// ---- reaping ----

std::vector<ManagedSandbox> list_managed(std::string_view dsn,
                                         const std::map<std::string, std::string>& labels) {
  auto session = open_session(dsn, {}, nullptr);
  const OpId op = session->track(session->machine().submit_list_managed(labels, session->now()));
  return take<std::vector<ManagedSandbox>>(session->wait(op), "list_managed()");
}

void remove_managed(std::string_view dsn, std::string id) {
  auto session = open_session(dsn, {}, nullptr);
  const OpId op =
      session->track(session->machine().submit_remove_managed(std::move(id), session->now()));
  (void)session->wait(op);
}

}  // namespace sandboxio::sync
