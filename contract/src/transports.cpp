// The contract suite's view of the transports: the sync API over any Link, and the async API
// over Asio (driven from the test thread through futures, with its io_context on its own thread).
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_future.hpp>
#include <thread>

#include "sandboxio/async.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/tls.hpp"

namespace sandboxio::contract {
namespace {

// ---- sync ----

class SyncStream final : public Stream {
 public:
  explicit SyncStream(sync::Process p) : p_(std::move(p)) {}
  std::optional<OutputChunk> next() override { return p_.next(); }
  ExecResult wait() override { return p_.wait(); }
  void kill() override { p_.kill(); }

 private:
  sync::Process p_;
};

class SyncBox final : public Box {
 public:
  explicit SyncBox(sync::Sandbox sb) : sb_(std::move(sb)) {}
  const std::string& id() const override { return sb_.id(); }
  CapabilitySet capabilities() const override { return sb_.capabilities(); }
  IsolationTier tier() const override { return sb_.tier(); }
  std::vector<Problem> warnings() const override { return sb_.warnings(); }
  SandboxInfo info() override { return sb_.info(); }
  ExecResult run(Command c) override { return sb_.run(std::move(c)); }
  std::unique_ptr<Stream> stream(Command c) override {
    return std::make_unique<SyncStream>(sb_.stream(std::move(c)));
  }
  ExecResult run_code(CodeRequest r) override { return sb_.run_code(std::move(r)); }
  CodeContext create_context() override { return sb_.create_context(); }
  void write_file(std::string p, Bytes d) override { sb_.write_file(std::move(p), std::move(d)); }
  Bytes read_file(std::string p) override { return sb_.read_file(std::move(p)); }
  std::vector<FileInfo> list_files(std::string p) override { return sb_.list_files(std::move(p)); }
  void remove_file(std::string p) override { sb_.remove_file(std::move(p)); }
  void kill() override { sb_.kill(); }
  std::optional<std::error_code> run_and_cancel(Command, const std::function<bool()>&) override {
    return std::nullopt;  // a blocking call has no per-operation cancellation
  }

 private:
  sync::Sandbox sb_;
};

class BlockingTransport final : public Transport {
 public:
  explicit BlockingTransport(std::function<std::unique_ptr<Link>()> make_link)
      : make_link_(std::move(make_link)) {}
  std::string name() const override { return make_link_ ? "sync-over-link" : "blocking"; }
  std::unique_ptr<Box> create(const std::string& dsn, CreateOptions o) override {
    return std::make_unique<SyncBox>(sync::Sandbox::create(dsn, std::move(o), link()));
  }
  std::unique_ptr<Box> connect(const std::string& dsn, std::string id, CreateOptions o) override {
    return std::make_unique<SyncBox>(
        sync::Sandbox::connect(dsn, std::move(id), std::move(o), link()));
  }
  std::optional<std::error_code> create_and_cancel(const std::string&, CreateOptions,
                                                   std::chrono::milliseconds) override {
    return std::nullopt;
  }

 private:
  std::unique_ptr<Link> link() { return make_link_ ? make_link_() : nullptr; }
  std::function<std::unique_ptr<Link>()> make_link_;
};

// ---- async over Asio ----

// Turns an SBX error_code from a future back into the sandboxio::Error the cases expect.
[[noreturn]] void rethrow(const std::system_error& e) {
  if (e.code().category() == sandbox_category())
    throw Error(static_cast<errc>(e.code().value()), e.what());
  throw;
}

template <class F>
auto get(F&& future) {
  try {
    return future.get();
  } catch (const std::system_error& e) {
    rethrow(e);
  }
}

struct Io {
  // OpenSSL first: its exit handler then runs after this thread was joined (see tls.hpp).
  bool tls_ready = (tls_global_init(), true);
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::thread thread{[this] { io.run(); }};
  ~Io() {
    work.reset();
    thread.join();
  }
};

class AsyncStream final : public Stream {
 public:
  explicit AsyncStream(async::Process p) : p_(std::move(p)) {}
  std::optional<OutputChunk> next() override { return get(p_.async_next(asio::use_future)); }
  ExecResult wait() override {
    try {
      return p_.async_wait(asio::use_future).get();
    } catch (const std::system_error& e) {
      if (e.code() != asio::error::operation_aborted) rethrow(e);
      ExecResult r;
      r.termination = Termination::Cancelled;
      r.streamed = true;
      return r;
    }
  }
  void kill() override { p_.kill(); }

 private:
  async::Process p_;
};

class AsyncBox final : public Box {
 public:
  AsyncBox(std::shared_ptr<Io> io, async::Sandbox sb, bool owner)
      : io_(std::move(io)), sb_(std::move(sb)), owner_(owner) {}
  ~AsyncBox() override {
    // Like the sync handle: the owner's handle ends the sandbox, and the case waits for it.
    if (!owner_ || killed_) return;
    try {
      sb_.async_kill(asio::use_future).get();
    } catch (...) {
    }
  }
  const std::string& id() const override { return sb_.id(); }
  CapabilitySet capabilities() const override { return sb_.capabilities(); }
  IsolationTier tier() const override { return sb_.tier(); }
  std::vector<Problem> warnings() const override { return sb_.warnings(); }
  SandboxInfo info() override { return get(sb_.async_info(asio::use_future)); }
  ExecResult run(Command c) override { return get(sb_.async_run(std::move(c), asio::use_future)); }
  std::unique_ptr<Stream> stream(Command c) override {
    return std::make_unique<AsyncStream>(get(sb_.async_stream(std::move(c), asio::use_future)));
  }
  ExecResult run_code(CodeRequest r) override {
    return get(sb_.async_run_code(std::move(r), asio::use_future));
  }
  CodeContext create_context() override {
    return get(sb_.async_create_context("python", asio::use_future));
  }
  void write_file(std::string p, Bytes d) override {
    get(sb_.async_write_file(std::move(p), std::move(d), asio::use_future));
  }
  Bytes read_file(std::string p) override {
    return get(sb_.async_read_file(std::move(p), asio::use_future));
  }
  std::vector<FileInfo> list_files(std::string p) override {
    return get(sb_.async_list_files(std::move(p), asio::use_future));
  }
  void remove_file(std::string p) override {
    get(sb_.async_remove_file(std::move(p), asio::use_future));
  }
  void kill() override {
    killed_ = true;
    get(sb_.async_kill(asio::use_future));
  }
  std::optional<std::error_code> run_and_cancel(Command c,
                                                const std::function<bool()>& running) override {
    asio::cancellation_signal signal;
    auto result =
        sb_.async_run(std::move(c), asio::bind_cancellation_slot(signal.slot(), asio::use_future));
    for (int i = 0; i < 1000 && !running(); ++i) {
    }
    // A cancellation signal is emitted from the context that runs the operation.
    std::promise<void> emitted;
    asio::post(io_->io, [&] {
      signal.emit(asio::cancellation_type::terminal);
      emitted.set_value();
    });
    emitted.get_future().wait();
    try {
      (void)result.get();
      return std::error_code();
    } catch (const std::system_error& e) {
      return e.code();
    }
  }

 private:
  std::shared_ptr<Io> io_;
  async::Sandbox sb_;
  bool owner_;
  bool killed_ = false;
};

class AsioTransport final : public Transport {
 public:
  std::string name() const override { return "asio"; }
  std::unique_ptr<Box> create(const std::string& dsn, CreateOptions o) override {
    const bool owner = !o.outlive_owner;
    return std::make_unique<AsyncBox>(
        io_,
        get(async::Sandbox::async_create(io_->io.get_executor(), dsn, std::move(o),
                                         asio::use_future)),
        owner);
  }
  std::unique_ptr<Box> connect(const std::string& dsn, std::string id, CreateOptions o) override {
    return std::make_unique<AsyncBox>(
        io_,
        get(async::Sandbox::async_connect(io_->io.get_executor(), dsn, std::move(id), std::move(o),
                                          asio::use_future)),
        false);
  }
  std::optional<std::error_code> create_and_cancel(const std::string& dsn, CreateOptions o,
                                                   std::chrono::milliseconds after) override {
    auto signal = std::make_shared<asio::cancellation_signal>();
    auto created = async::Sandbox::async_create(
        io_->io.get_executor(), dsn, std::move(o),
        asio::bind_cancellation_slot(signal->slot(), asio::use_future));
    auto timer = std::make_shared<asio::steady_timer>(io_->io, after);
    std::promise<void> fired;
    timer->async_wait([signal, timer, &fired](std::error_code) {
      signal->emit(asio::cancellation_type::terminal);
      fired.set_value();
    });
    std::error_code outcome;
    try {
      async::Sandbox sb = created.get();  // not cancelled in time: the handle ends it
    } catch (const std::system_error& e) {
      outcome = e.code();
    }
    fired.get_future().wait();
    return outcome;
  }

 private:
  std::shared_ptr<Io> io_ = std::make_shared<Io>();
};

}  // namespace

std::shared_ptr<Transport> blocking_transport(std::function<std::unique_ptr<Link>()> make_link) {
  return std::make_shared<BlockingTransport>(std::move(make_link));
}

std::shared_ptr<Transport> asio_transport() {
  return std::make_shared<AsioTransport>();
}

}  // namespace sandboxio::contract
