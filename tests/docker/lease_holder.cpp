// Helper for the owner-lease test: creates a docker:// sandbox, prints its id on stdout, then
// runs a long command in it until someone SIGKILLs this process.
#include <cstdio>
#include <iostream>

#include "sandboxio/sync.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: lease_holder DSN\n";
    return 2;
  }
  auto sb = sandboxio::sync::Sandbox::create(argv[1]);
  std::cout << sb.id() << std::endl;
  sandboxio::Command c;
  c.argv = {"sleep", "300"};
  c.timeout = std::chrono::seconds(300);
  (void)sb.run(c);
  return 0;
}
