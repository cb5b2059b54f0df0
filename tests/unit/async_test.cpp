// The async API over the Asio transport: Asio's conventions, checked.
#include <gtest/gtest.h>

#include <future>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <asio/use_future.hpp>
#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#endif
#include <thread>

#include "../support/flight_session.hpp"
#include "sandboxio/async.hpp"
#include "sandboxio/fake.hpp"

using namespace std::chrono_literals;
using sandboxio::async::Process;
using sandboxio::async::Sandbox;

namespace {

class Async : public testing::Test {
 protected:
  asio::io_context io;
  std::shared_ptr<sandboxio::fake::World> world = sandboxio::fake::World::create();

  Sandbox create() {
    std::optional<Sandbox> out;
    Sandbox::async_create(io.get_executor(), world->dsn(), {}, [&](std::error_code ec, Sandbox sb) {
      ASSERT_FALSE(ec) << ec.message();
      out = std::move(sb);
    });
    io.run();
    io.restart();
    EXPECT_TRUE(out.has_value());
    return std::move(*out);
  }
  static sandboxio::Command cmd(std::vector<std::string> argv) {
    sandboxio::Command c;
    c.argv = std::move(argv);
    return c;
  }
};

TEST_F(Async, CallbackRunNeverCompletesInsideTheInitiatingFunction) {
  auto sb = create();
  bool initiating = true;
  bool called = false;
  sb.async_run(cmd({"sh", "-c", "echo hi; echo err >&2; exit 3"}),
               [&](std::error_code ec, sandboxio::ExecResult r) {
                 EXPECT_FALSE(initiating) << "completed inside async_run";
                 EXPECT_FALSE(ec);
                 EXPECT_EQ(r.stdout_bytes, "hi\n");
                 EXPECT_EQ(r.stderr_bytes, "err\n");
                 EXPECT_EQ(r.exit_code, 3);
                 called = true;
               });
  initiating = false;
  io.run();
  EXPECT_TRUE(called);
}

/// Refuses the records of runs: a sink whose store is down.
class RefusingRuns final : public sandboxio::AuditSink {
 public:
  sandboxio::Result<void> write(const sandboxio::OperationRecord& r) override {
    if (r.operation != sandboxio::Operation::Run) return {};
    return sandboxio::Problem{sandboxio::errc::AuditSinkFailed, "the store is down", {}};
  }
};

// AuditFailurePolicy::Fail holds on every driver (the sync API checks the same in FakeSync):
// a run whose record the sink refused fails with SBX_E1602, and the next one, recorded or not,
// is not blamed for it twice.
TEST_F(Async, UnderTheFailPolicyARunWhoseRecordTheSinkRefusedFails) {
  sandboxio::CreateOptions o;
  o.audit.sink = std::make_shared<RefusingRuns>();
  o.audit.on_failure = sandboxio::AuditFailurePolicy::Fail;
  std::optional<Sandbox> sb;
  Sandbox::async_create(io.get_executor(), world->dsn(), o, [&](std::error_code ec, Sandbox s) {
    ASSERT_FALSE(ec) << ec.message();
    sb = std::move(s);
  });
  io.run();
  io.restart();
  ASSERT_TRUE(sb.has_value());
  std::error_code got;
  sb->async_run(cmd({"true"}), [&](std::error_code ec, sandboxio::ExecResult) { got = ec; });
  io.run();
  io.restart();
  EXPECT_EQ(got, sandboxio::make_error_code(sandboxio::errc::AuditSinkFailed)) << got.message();
  bool listed = false;
  sb->async_list_files("/",
                       [&](std::error_code ec, std::vector<sandboxio::FileInfo>) { listed = !ec; });
  io.run();
  io.restart();
  EXPECT_TRUE(listed) << "one refused record fails one operation";
}

TEST_F(Async, HandlerExecutorIsKept) {
  auto sb = create();
  auto strand = asio::make_strand(io);
  bool on_strand = false;
  sb.async_run(cmd({"true"}),
               asio::bind_executor(strand, [&](std::error_code, sandboxio::ExecResult) {
                 on_strand = strand.running_in_this_thread();
               }));
  io.run();
  EXPECT_TRUE(on_strand);
}

TEST_F(Async, FuturesWithAThreadRunningTheContext) {
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  auto sb_future = Sandbox::async_create(io.get_executor(), world->dsn(), {}, asio::use_future);
  Sandbox sb = sb_future.get();
  auto r = sb.async_run(cmd({"printf", "a\\000b"}), asio::use_future).get();
  EXPECT_EQ(r.stdout_bytes, std::string("a\0b", 3));
  sb.async_write_file("/tmp/f", "data", asio::use_future).get();
  EXPECT_EQ(sb.async_read_file("/tmp/f", asio::use_future).get(), "data");
  // The error as a value, through a handler: an exception rethrown from a future is shared
  // with the thread that set it through an exception_ptr whose reference count lives in the
  // uninstrumented libstdc++, which ThreadSanitizer reports as a race.
  std::promise<std::error_code> failed;
  sb.async_read_file("/tmp/missing",
                     [&failed](std::error_code ec, const std::string&) { failed.set_value(ec); });
  EXPECT_EQ(failed.get_future().get(), sandboxio::errc::FileNotFound);
  sb.async_kill(asio::use_future).get();
  work.reset();
  runner.join();
  EXPECT_TRUE(world->live_sandboxes().empty());
}

TEST_F(Async, ErrorsComeAsErrorCodes) {
  std::error_code got;
  Sandbox::async_create(io.get_executor(), "nosuch://x", {},
                        [&](std::error_code ec, Sandbox) { got = ec; });
  io.run();
  EXPECT_EQ(got, sandboxio::errc::BackendNotFound);
}

TEST_F(Async, StreamingChunksInOrder) {
  auto sb = create();
  std::string out, err;
  std::optional<sandboxio::ExecResult> result;
  std::optional<Process> proc;
  std::function<void()> pull;
  pull = [&] {
    proc->async_next([&](std::error_code ec, std::optional<sandboxio::OutputChunk> c) {
      ASSERT_FALSE(ec);
      if (!c) {
        proc->async_wait([&](std::error_code e, sandboxio::ExecResult r) {
          ASSERT_FALSE(e);
          result = r;
        });
        return;
      }
      (c->stream == sandboxio::StreamKind::Stdout ? out : err) += c->data;
      pull();
    });
  };
  sb.async_stream(cmd({"sh", "-c", "echo 1; sleep 0.05; echo x >&2; echo 2"}),
                  [&](std::error_code ec, Process p) {
                    ASSERT_FALSE(ec);
                    proc = std::move(p);
                    pull();
                  });
  io.run();
  EXPECT_EQ(out, "1\n2\n");
  EXPECT_EQ(err, "x\n");
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->streamed);
  EXPECT_EQ(result->exit_code, 0);
}

TEST_F(Async, CancellationSlotKillsTheRemoteProcess) {
  auto sb = create();
  asio::cancellation_signal signal;
  std::error_code got;
  sb.async_run(cmd({"sh", "-c", "sleep 600"}),
               asio::bind_cancellation_slot(
                   signal.slot(), [&](std::error_code ec, sandboxio::ExecResult) { got = ec; }));
  // Operations on one sandbox are serialised, so when this probe completes the command runs.
  sb.async_run(cmd({"pgrep", "-f", "sleep 600"}),
               [&](std::error_code ec, sandboxio::ExecResult probe) {
                 EXPECT_FALSE(ec);
                 EXPECT_EQ(probe.exit_code, 0) << "the command to cancel is not running";
                 signal.emit(asio::cancellation_type::terminal);
               });
  io.run();
  EXPECT_EQ(got, asio::error::operation_aborted);  // cancellation surfaces as cancellation
  EXPECT_EQ(world->running_processes(), 0u);
}

TEST_F(Async, DroppingAProcessKillsIt) {
  auto sb = create();
  sb.async_stream(cmd({"sh", "-c", "echo go; sleep 600"}), [&](std::error_code ec, Process p) {
    ASSERT_FALSE(ec);
    auto holder = std::make_shared<Process>(std::move(p));
    holder->async_next([holder](std::error_code, std::optional<sandboxio::OutputChunk> c) {
      EXPECT_TRUE(c);
      // holder goes out of scope here: the process handle is dropped mid-stream
    });
  });
  io.run();
  EXPECT_EQ(world->running_processes(), 0u);
}

TEST_F(Async, DestroyingTheHandleKillsTheSandbox) {
  { auto sb = create(); }
  io.run();
  EXPECT_TRUE(world->live_sandboxes().empty());
}

TEST_F(Async, ManySandboxesOnAMultiThreadedContext) {
  // Two threads run the context; the test thread drives 16 sandboxes through futures, with
  // streams, files and cancellations interleaved. Run under TSan to check the strands.
  auto work = asio::make_work_guard(io);
  std::thread t1([&] { io.run(); });
  std::thread t2([&] { io.run(); });
  std::vector<std::future<Sandbox>> creating;
  for (int i = 0; i < 16; ++i) {
    creating.push_back(
        Sandbox::async_create(io.get_executor(), world->dsn(), {}, asio::use_future));
  }
  std::vector<Sandbox> boxes;
  for (auto& f : creating)
    boxes.push_back(f.get());
  std::vector<std::future<sandboxio::ExecResult>> runs;
  for (auto& sb : boxes)
    runs.push_back(sb.async_run(cmd({"sh", "-c", "echo $$; sleep 0.01"}), asio::use_future));
  for (auto& sb : boxes)
    sb.async_write_file("/tmp/x", "y", asio::use_future).get();
  for (auto& r : runs)
    EXPECT_TRUE(r.get().ok());
  for (auto& sb : boxes) {
    auto p = sb.async_stream(cmd({"sh", "-c", "echo a; sleep 100"}), asio::use_future).get();
    EXPECT_TRUE(p.async_next(asio::use_future).get().has_value());
  }  // each Process dropped mid-stream: the kill is initiated, not awaited
  // Operations on a sandbox run in order on its strand: once this completes, the kill ran.
  for (auto& sb : boxes)
    (void)sb.async_info(asio::use_future).get();
  EXPECT_EQ(world->running_processes(), 0u);
  for (auto& sb : boxes)
    sb.async_kill(asio::use_future).get();
  work.reset();
  t1.join();
  t2.join();
  EXPECT_TRUE(world->live_sandboxes().empty());
}

// The flight recorder over Asio: a session the Asio transport drove (a run, a stream, a file)
// replays offline, identically, from its trace.
TEST_F(Async, ASessionDrivenByAsioIsRecordedAndReplaysIdentically) {
  namespace t = sandboxio::testing;
  t::TempDir dir;
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  sandboxio::CreateOptions o;
  o.record = (dir.path / "traces").string();
  auto sb = Sandbox::async_create(io.get_executor(), world->dsn(), o, asio::use_future).get();
  const auto ran =
      sb.async_run(cmd({"sh", "-c", "echo over asio; exit 4"}), asio::use_future).get();
  EXPECT_EQ(ran.exit_code, 4);
  sb.async_write_file("/tmp/f", "contents", asio::use_future).get();
  EXPECT_EQ(sb.async_read_file("/tmp/f", asio::use_future).get(), "contents");
  sb.async_kill(asio::use_future).get();
  sb = Sandbox{};  // the trace is complete once the session is gone
  work.reset();
  runner.join();
  t::Seen seen;
  auto summary = t::replay_bytes(t::slurp(t::the_trace(dir.path / "traces")), &seen);
  ASSERT_TRUE(summary) << summary.problem().describe();
  EXPECT_TRUE(summary.value().complete);
  ASSERT_EQ(seen.results.size(), 1u);
  EXPECT_EQ(seen.results[0], ran);
  EXPECT_EQ(seen.reads, std::vector<sandboxio::Bytes>{"contents"});
  EXPECT_EQ(summary.value().records, 5u);
}

#if defined(ASIO_HAS_CO_AWAIT)
// Coroutines: compiled where the compiler gives Asio co_await (g++ 12; not clang 14 over
// libstdc++ 12).
TEST_F(Async, UseAwaitable) {
  std::string out;
  // Built outside the coroutine: g++ 12 miscompiles braced lists inside co_await expressions.
  const sandboxio::Command echo = cmd({"echo", "from a coroutine"});
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        // Named, not temporaries: g++ 12 destroys temporaries inside co_await expressions wrongly.
        const std::string dsn = world->dsn();
        const sandboxio::CreateOptions options;
        auto sb = co_await Sandbox::async_create(ex, dsn, options, asio::use_awaitable);
        auto r = co_await sb.async_run(echo, asio::use_awaitable);
        out = r.stdout_bytes;
        co_await sb.async_kill(asio::use_awaitable);
      },
      asio::detached);
  io.run();
  EXPECT_EQ(out, "from a coroutine\n");
  EXPECT_TRUE(world->live_sandboxes().empty());
}
#endif

}  // namespace
