// Helper for the owner-lease tests: creates a sandbox (docker://, e2b://), prints its id on
// stdout, then runs a long command in it until someone SIGKILLs this process. With
// `outlive` as its second argument, the sandbox is created with outlive_owner.
#include <cstdio>
#include <iostream>
#include <string>

#include "sandboxio/sync.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: lease_holder DSN [outlive]\n";
    return 2;
  }
  sandboxio::CreateOptions options;
  options.outlive_owner = argc > 2 && std::string(argv[2]) == "outlive";
  auto sb = sandboxio::sync::Sandbox::create(argv[1], options);
  std::cout << sb.id() << std::endl;
  sandboxio::Command c;
  c.argv = {"sleep", "300"};
  c.timeout = std::chrono::seconds(300);
  (void)sb.run(c);
  return 0;
}
