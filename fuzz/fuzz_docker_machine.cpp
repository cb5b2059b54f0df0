// libFuzzer harness: the docker:// machine driven by fuzzer-chosen daemon bytes, split points,
// connection outcomes, timer expiries and user operations (machine_driver.hpp has the input
// format and the properties checked).
#include "machine_driver.hpp"
#include "sandboxio/docker.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  auto m = fuzz::make_machine(docker::backend_entry(), "docker://img?tmpfs=/work&agent=off",
                              {{"owner", "host:1"},
                               {"session", "fuzz"},
                               {"env:DOCKER_HOST", "unix:///var/run/docker.sock"}});
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
            return mm.submit_remove_file("/work/x", now);
          case 6:
            return mm.submit_info(now);
          case 7:
            return mm.submit_kill(now);
          case 8:
            return mm.submit_list_managed({{"k", "v"}}, now);
          case 9:
            return mm.submit_remove_managed("abc", now);
          default:
            return mm.submit_read_file("/work/f", now);
        }
      },
      data, size);
  return 0;
}
