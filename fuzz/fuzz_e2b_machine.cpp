// libFuzzer harness: the e2b:// machine driven by fuzzer-chosen bytes from the control plane,
// envd and the code interpreter, split points, connection outcomes, timer expiries and user
// operations (machine_driver.hpp has the input format and the properties checked). Seeds
// (corpus/e2b_machine, made by make_e2b_seeds.py) follow the recorded SDK exchange.
#include "machine_driver.hpp"
#include "sandboxio/e2b.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  auto m = fuzz::make_machine(
      e2b::backend_entry(), "e2b://base?api_url=http://127.0.0.1:3000",
      {{"owner", "host:1"}, {"session", "fuzz"}, {"env:E2B_API_KEY", "e2b_fuzz"}});
  CreateOptions o;
  o.create_timeout = std::chrono::seconds(5);
  const OpId first = m->submit_create(o, Instant{});
  fuzz::run(
      *m, first, 14,
      [](Machine& mm, unsigned which, Instant now, bool& stream) -> OpId {
        Command cmd;
        cmd.argv = {"sh", "-c", "echo hi"};
        cmd.timeout = std::chrono::milliseconds(200);
        CodeRequest code;
        code.code = "1 + 1";
        code.timeout = std::chrono::milliseconds(200);
        switch (which) {
          case 0:
            return mm.submit_run(cmd, now);
          case 1:
            stream = true;
            return mm.submit_stream(cmd, now);
          case 2:
            return mm.submit_write_file("/tmp/a/b.txt", "data", now);
          case 3:
            return mm.submit_read_file("/tmp/a/b.txt", now);
          case 4:
            return mm.submit_list_files("/tmp", now);
          case 5:
            return mm.submit_remove_file("/tmp/x", now);
          case 6:
            return mm.submit_info(now);
          case 7:
            return mm.submit_kill(now);
          case 8:
            return mm.submit_list_managed({{"k", "v"}}, now);
          case 9:
            return mm.submit_run_code(code, now);
          case 10:
            code.context = "ctx1";
            return mm.submit_run_code(code, now);
          case 11:
            return mm.submit_create_context("python", now);
          case 12:
            cmd.stdin_data = "input";
            return mm.submit_run(cmd, now);
          default:
            return e2b::extensions(mm).submit_pause(now);
        }
      },
      data, size);
  return 0;
}
