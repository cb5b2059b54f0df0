// The async API: the same sandboxes driven by Asio. Every operation takes a completion token
// (a callback, asio::use_future, asio::use_awaitable where the compiler has coroutines, ...),
// completes with (std::error_code, value), never inside the initiating function, on the
// handler's associated executor, and honours the handler's cancellation slot: a cancelled
// operation stops its remote work and completes with asio::error::operation_aborted.
//
//   asio::io_context io;
//   sandboxio::async::Sandbox::async_create(io.get_executor(), "fake://", {},
//       [](std::error_code ec, sandboxio::async::Sandbox sb) { ... sb.async_run(cmd, ...); });
//   io.run();
//
// A Sandbox handle may be used from any thread: operations are serialised on a strand.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "sandboxio/create_options.hpp"
#include "sandboxio/machine.hpp"

namespace sandboxio::async {

namespace detail {

/// Receives an operation's outcome on the session's strand.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual void done(std::error_code ec, Completion value) = 0;
};

class ChunkWaiter {
 public:
  virtual ~ChunkWaiter() = default;
  virtual void chunk(std::error_code ec, std::optional<OutputChunk> chunk) = 0;
};

/// Receives the id of a stream that started, or why it could not start.
class StreamWaiter {
 public:
  virtual ~StreamWaiter() = default;
  virtual void started(std::error_code ec, OpId op) = 0;
};

class Session;

/// Submits work to a session (implemented in the library, not a template).
using Submit = std::function<OpId(Machine&, Instant)>;
void start(const std::shared_ptr<Session>& session, Submit submit, std::unique_ptr<Waiter> waiter,
           asio::cancellation_slot slot);
void start_stream(const std::shared_ptr<Session>& session, Submit submit,
                  std::unique_ptr<StreamWaiter> waiter);
void next_chunk(const std::shared_ptr<Session>& session, OpId op,
                std::unique_ptr<ChunkWaiter> waiter, asio::cancellation_slot slot);
void cancel(const std::shared_ptr<Session>& session, OpId op);
/// Waits for an operation already started (a stream's end).
void wait_for(const std::shared_ptr<Session>& session, OpId op, std::unique_ptr<Waiter> waiter,
              asio::cancellation_slot slot);
void open(asio::any_io_executor ex, std::string dsn, CreateOptions options, bool connect,
          std::string id, std::unique_ptr<Waiter> waiter, asio::cancellation_slot slot,
          std::function<void(std::shared_ptr<Session>)> keep);
asio::any_io_executor executor_of(const std::shared_ptr<Session>& session);
std::string_view scheme_of(const std::shared_ptr<Session>& session);
CapabilitySet capabilities_of(const std::shared_ptr<Session>& session);
IsolationTier tier_of(const std::shared_ptr<Session>& session);
/// The warnings the session collected so far; call on the session's strand only.
std::vector<Problem> warnings_of(const std::shared_ptr<Session>& session);
void release(const std::shared_ptr<Session>& session, bool kill);

// Completes `handler` with (ec, T) on its associated executor, after the initiating function.
template <class T, class Handler>
class HandlerWaiter final : public Waiter {
 public:
  HandlerWaiter(Handler h, asio::any_io_executor fallback)
      : handler_(std::move(h)), work_(asio::get_associated_executor(handler_, fallback)) {}
  void done(std::error_code ec, Completion value) override {
    T out{};
    if (!ec) {
      if constexpr (std::is_same_v<T, Completion>) {
        out = std::move(value);
      } else if (auto* v = std::get_if<T>(&value)) {
        out = std::move(*v);
      } else if constexpr (!std::is_same_v<T, std::monostate>) {
        ec = make_error_code(errc::ProtocolError);
      }
    }
    auto ex = work_.get_executor();
    asio::post(ex, [h = std::move(handler_), ec, out = std::move(out)]() mutable {
      if constexpr (std::is_same_v<T, std::monostate>) {
        std::move(h)(ec);
      } else {
        std::move(h)(ec, std::move(out));
      }
    });
    work_.reset();
  }

 private:
  Handler handler_;
  asio::executor_work_guard<asio::associated_executor_t<Handler, asio::any_io_executor>> work_;
};

template <class Handler>
class HandlerChunkWaiter final : public ChunkWaiter {
 public:
  HandlerChunkWaiter(Handler h, asio::any_io_executor fallback)
      : handler_(std::move(h)), work_(asio::get_associated_executor(handler_, fallback)) {}
  void chunk(std::error_code ec, std::optional<OutputChunk> c) override {
    auto ex = work_.get_executor();
    asio::post(ex, [h = std::move(handler_), ec, c = std::move(c)]() mutable {
      std::move(h)(ec, std::move(c));
    });
    work_.reset();
  }

 private:
  Handler handler_;
  asio::executor_work_guard<asio::associated_executor_t<Handler, asio::any_io_executor>> work_;
};

template <class T>
using Signature = std::conditional_t<std::is_same_v<T, std::monostate>, void(std::error_code),
                                     void(std::error_code, T)>;

template <class T, class Token>
auto initiate(const std::shared_ptr<Session>& session, Submit submit, Token&& token) {
  return asio::async_initiate<Token, Signature<T>>(
      [session](auto handler, Submit s) {
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto waiter = std::make_unique<HandlerWaiter<T, decltype(handler)>>(std::move(handler),
                                                                            executor_of(session));
        start(session, std::move(s), std::move(waiter), slot);
      },
      token, std::move(submit));
}

}  // namespace detail

class Sandbox;

/// A running command whose output arrives as it is produced. Destroying it before the end
/// kills the remote process.
class Process {
 public:
  Process() = default;
  Process(Process&& other) noexcept
      : session_(std::move(other.session_)), op_(other.op_), done_(other.done_) {
    other.done_ = true;
  }
  Process& operator=(Process&& other) noexcept {
    if (this != &other) {
      drop();
      session_ = std::move(other.session_);
      op_ = other.op_;
      done_ = other.done_;
      other.done_ = true;
    }
    return *this;
  }
  ~Process() { drop(); }

  /// The next chunk (in order within each stream), or nullopt at the end. Signature
  /// void(std::error_code, std::optional<OutputChunk>).
  template <class Token>
  auto async_next(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::optional<OutputChunk>)>(
        [this](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto waiter = std::make_unique<detail::HandlerChunkWaiter<decltype(handler)>>(
              std::move(handler), detail::executor_of(session_));
          detail::next_chunk(session_, op_, std::move(waiter), slot);
        },
        token);
  }
  /// The result once the process ended (streamed = true); unread output is discarded.
  template <class Token>
  auto async_wait(Token&& token) {
    done_ = true;
    return asio::async_initiate<Token, void(std::error_code, ExecResult)>(
        [this](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto waiter = std::make_unique<detail::HandlerWaiter<ExecResult, decltype(handler)>>(
              std::move(handler), detail::executor_of(session_));
          detail::wait_for(session_, op_, std::move(waiter), slot);
        },
        token);
  }
  /// Kills the remote process now; a pending async_wait completes with operation_aborted.
  void kill() {
    if (session_ && !done_) detail::cancel(session_, op_);
    done_ = true;
  }

 private:
  friend class Sandbox;
  Process(std::shared_ptr<detail::Session> s, OpId op) : session_(std::move(s)), op_(op) {}
  void drop() {
    if (session_ && !done_) detail::cancel(session_, op_);
    done_ = true;
  }
  std::shared_ptr<detail::Session> session_;
  OpId op_ = 0;
  bool done_ = false;
};

class Sandbox {
 public:
  Sandbox() = default;
  Sandbox(Sandbox&&) noexcept = default;
  Sandbox& operator=(Sandbox&& other) noexcept {
    if (this != &other) {
      if (session_) detail::release(session_, owner_);
      session_ = std::move(other.session_);
      info_ = std::move(other.info_);
      warnings_ = std::move(other.warnings_);
      owner_ = other.owner_;
    }
    return *this;
  }
  ~Sandbox() {
    if (session_) detail::release(session_, owner_);
  }

  /// Creates a sandbox. Signature void(std::error_code, Sandbox).
  template <class Token>
  static auto async_create(asio::any_io_executor ex, std::string dsn, CreateOptions options,
                           Token&& token) {
    return initiate_open(std::move(ex), std::move(dsn), std::move(options), false, {},
                         std::forward<Token>(token));
  }
  /// Re-attaches to a sandbox by id; the handle does not own it.
  template <class Token>
  static auto async_connect(asio::any_io_executor ex, std::string dsn, std::string id,
                            CreateOptions options, Token&& token) {
    options.outlive_owner = true;
    return initiate_open(std::move(ex), std::move(dsn), std::move(options), true, std::move(id),
                         std::forward<Token>(token));
  }

  [[nodiscard]] const std::string& id() const noexcept { return info_.id; }
  [[nodiscard]] std::string_view backend() const { return detail::scheme_of(session_); }
  [[nodiscard]] CapabilitySet capabilities() const { return detail::capabilities_of(session_); }
  [[nodiscard]] IsolationTier tier() const { return detail::tier_of(session_); }
  /// Warnings the backend reported while creating the sandbox (for example the UNKNOWN tier).
  [[nodiscard]] const std::vector<Problem>& warnings() const noexcept { return warnings_; }
  /// Keeps the sandbox alive after this handle is destroyed (until its lifetime ends).
  void detach() noexcept { owner_ = false; }

  /// Runs a backend-specific operation (see sync::Sandbox::native_call). Signature
  /// void(std::error_code, Completion).
  template <class Token>
  auto async_native_call(std::function<OpId(Machine&, Instant)> submit, Token&& token) {
    return detail::initiate<Completion>(
        session_, [s = std::move(submit)](Machine& m, Instant now) { return s(m, now); },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_info(Token&& token) {
    return detail::initiate<SandboxInfo>(
        session_, [](Machine& m, Instant now) { return m.submit_info(now); },
        std::forward<Token>(token));
  }
  /// Runs a command to its end. Signature void(std::error_code, ExecResult).
  template <class Token>
  auto async_run(Command command, Token&& token) {
    return detail::initiate<ExecResult>(
        session_,
        [c = std::move(command)](Machine& m, Instant now) mutable {
          return m.submit_run(std::move(c), now);
        },
        std::forward<Token>(token));
  }
  /// Starts a command whose output is read with Process::async_next. Signature
  /// void(std::error_code, Process).
  template <class Token>
  auto async_stream(Command command, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, Process)>(
        [session = session_](auto handler, Command c) {
          auto ex = detail::executor_of(session);
          detail::start_stream(
              session,
              [c = std::move(c)](Machine& m, Instant now) mutable {
                return m.submit_stream(std::move(c), now);
              },
              std::make_unique<StreamStarted<decltype(handler)>>(std::move(handler), session, ex));
        },
        token, std::move(command));
  }
  template <class Token>
  auto async_run_code(CodeRequest request, Token&& token) {
    return detail::initiate<ExecResult>(
        session_,
        [r = std::move(request)](Machine& m, Instant now) mutable {
          return m.submit_run_code(std::move(r), now);
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_create_context(std::string language, Token&& token) {
    return detail::initiate<CodeContext>(
        session_,
        [l = std::move(language)](Machine& m, Instant now) mutable {
          return m.submit_create_context(std::move(l), now);
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_write_file(std::string path, Bytes data, Token&& token) {
    return detail::initiate<std::monostate>(
        session_,
        [p = std::move(path), d = std::move(data)](Machine& m, Instant now) mutable {
          return m.submit_write_file(std::move(p), std::move(d), now);
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_read_file(std::string path, Token&& token) {
    return detail::initiate<Bytes>(
        session_,
        [p = std::move(path)](Machine& m, Instant now) mutable {
          return m.submit_read_file(std::move(p), now);
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_list_files(std::string path, Token&& token) {
    return detail::initiate<std::vector<FileInfo>>(
        session_,
        [p = std::move(path)](Machine& m, Instant now) mutable {
          return m.submit_list_files(std::move(p), now);
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto async_remove_file(std::string path, Token&& token) {
    return detail::initiate<std::monostate>(
        session_,
        [p = std::move(path)](Machine& m, Instant now) mutable {
          return m.submit_remove_file(std::move(p), now);
        },
        std::forward<Token>(token));
  }
  /// Ends the sandbox. Signature void(std::error_code).
  template <class Token>
  auto async_kill(Token&& token) {
    owner_ = false;  // nothing left to tear down on destruction
    return detail::initiate<std::monostate>(
        session_, [](Machine& m, Instant now) { return m.submit_kill(now); },
        std::forward<Token>(token));
  }

 private:
  template <class Handler>
  class StreamStarted final : public detail::StreamWaiter {
   public:
    StreamStarted(Handler h, std::shared_ptr<detail::Session> s, asio::any_io_executor ex)
        : handler_(std::move(h)),
          session_(std::move(s)),
          work_(asio::get_associated_executor(handler_, ex)) {}
    void started(std::error_code ec, OpId op) override {
      Process p;
      if (!ec) p = Process(session_, op);
      asio::post(work_.get_executor(), [h = std::move(handler_), ec, p = std::move(p)]() mutable {
        std::move(h)(ec, std::move(p));
      });
      work_.reset();
    }

   private:
    Handler handler_;
    std::shared_ptr<detail::Session> session_;
    asio::executor_work_guard<asio::associated_executor_t<Handler, asio::any_io_executor>> work_;
  };

  template <class Token>
  static auto initiate_open(asio::any_io_executor ex, std::string dsn, CreateOptions options,
                            bool connect, std::string id, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, Sandbox)>(
        [ex](auto handler, std::string d, CreateOptions o, bool c, std::string i) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto holder = std::make_shared<std::shared_ptr<detail::Session>>();
          const bool owner = !o.outlive_owner;
          auto waiter =
              std::make_unique<Opened<decltype(handler)>>(std::move(handler), ex, holder, owner);
          detail::open(ex, std::move(d), std::move(o), c, std::move(i), std::move(waiter), slot,
                       [holder](std::shared_ptr<detail::Session> s) { *holder = std::move(s); });
        },
        token, std::move(dsn), std::move(options), connect, std::move(id));
  }

  template <class Handler>
  class Opened final : public detail::Waiter {
   public:
    Opened(Handler h, asio::any_io_executor ex,
           std::shared_ptr<std::shared_ptr<detail::Session>> holder, bool owner)
        : handler_(std::move(h)),
          work_(asio::get_associated_executor(handler_, ex)),
          holder_(std::move(holder)),
          owner_(owner) {}
    void done(std::error_code ec, Completion value) override {
      Sandbox sb;
      if (!ec) {
        if (auto* info = std::get_if<SandboxInfo>(&value)) {
          sb.session_ = *holder_;
          sb.info_ = std::move(*info);
          sb.warnings_ = detail::warnings_of(sb.session_);  // done() runs on the session's strand
          sb.owner_ = owner_;
        } else {
          ec = make_error_code(errc::ProtocolError);
        }
      }
      asio::post(work_.get_executor(), [h = std::move(handler_), ec, sb = std::move(sb)]() mutable {
        std::move(h)(ec, std::move(sb));
      });
      work_.reset();
    }

   private:
    Handler handler_;
    asio::executor_work_guard<asio::associated_executor_t<Handler, asio::any_io_executor>> work_;
    std::shared_ptr<std::shared_ptr<detail::Session>> holder_;
    bool owner_;
  };

  std::shared_ptr<detail::Session> session_;
  SandboxInfo info_;
  std::vector<Problem> warnings_;
  bool owner_ = true;
};

}  // namespace sandboxio::async
