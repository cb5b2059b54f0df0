// libFuzzer harness: the modal:// machine driven by fuzzer-chosen HTTP/2 bytes from Modal's
// control plane and the task command router, split points, connection outcomes, timer expiries
// and user operations (machine_driver.hpp has the input format and the properties checked).
// Seeds (corpus/modal_machine, made by make_modal_seeds.py) answer a create, then commands.
#include "machine_driver.hpp"
#include "sandboxio/modal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  auto m = fuzz::make_machine(modal::backend_entry(),
                              "modal://python:3.12-slim?server_url=http://127.0.0.1:1",
                              {{"modal.machine", "1"},
                               {"modal-profile", ""},
                               {"env:MODAL_TOKEN_ID", "ak-fuzz"},
                               {"env:MODAL_TOKEN_SECRET", "as-fuzz"},
                               {"env:MODAL_ENVIRONMENT", ""},
                               {"env:MODAL_SERVER_URL", ""},
                               {"env:modal-profile:environment", ""},
                               {"env:modal-profile:server_url", ""},
                               {"owner", "host:1"},
                               {"session", "fuzz"}});
  CreateOptions o;
  o.create_timeout = std::chrono::seconds(5);
  const OpId first = m->submit_create(o, Instant{});
  fuzz::run(
      *m, first, 11,
      [](Machine& mm, unsigned which, Instant now, bool& stream) -> OpId {
        Command cmd;
        cmd.argv = {"sh", "-c", "echo hi"};
        cmd.timeout = std::chrono::milliseconds(200);
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
          case 8: {
            CodeRequest code;
            code.code = "1 + 1";
            return mm.submit_run_code(code, now);
          }
          case 9:
            cmd.stdin_data = "input";
            return mm.submit_run(cmd, now);
          default:
            return mm.submit_connect("sb-other", {}, now);
        }
      },
      data, size);
  return 0;
}
