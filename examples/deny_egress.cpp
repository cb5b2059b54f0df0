// Deny-by-default egress: a sandbox reaches no network unless its creator allows a host, and a
// backend that cannot enforce an allow list refuses to create rather than open everything.
// The program checks each claim it prints and exits 1 if one does not hold.
//
//   deny_egress DSN [HOST:PORT]
//
// HOST:PORT is the address probed from inside: give a canary you control (the tests start a
// listener on the Docker bridge and check that no connection reached it). The default,
// canary.invalid:8080, resolves nowhere.
#include <iostream>
#include <string>
#include <vector>

#include "sandboxio/sync.hpp"

namespace {

int failures = 0;

void check(bool holds, const std::string& claim) {
  std::cout << (holds ? "ok   " : "FAIL ") << claim << "\n";
  if (!holds) ++failures;
}

// A connection attempt from inside the sandbox, with Python's socket module (no curl needed),
// the way ordinary programs make it: through the proxy the sandbox's environment names when
// there is one (an allow list), directly otherwise.
std::vector<std::string> probe(const std::string& host, const std::string& port) {
  return {"python3", "-c",
          "import os, socket, sys\n"
          "host, port = sys.argv[1], int(sys.argv[2])\n"
          "proxy = os.environ.get('https_proxy')\n"
          "if proxy:\n"
          "    ph, pp = proxy.split('//')[1].rstrip('/').rsplit(':', 1)\n"
          "    s = socket.create_connection((ph, int(pp)), 3)\n"
          "    s.sendall(b'CONNECT %s:%d HTTP/1.1\\r\\n\\r\\n' % (host.encode(), port))\n"
          "    status = s.recv(200).split(b'\\r\\n')[0]\n"
          "    if b' 200 ' not in status + b' ':\n"
          "        sys.exit(status.decode())\n"
          "else:\n"
          "    socket.create_connection((host, port), 3)\n"
          "print('connected')\n",
          host, port};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dsn = argc > 1 ? argv[1] : "fake://";
  const std::string target = argc > 2 ? argv[2] : "canary.invalid:8080";
  const std::string host = target.substr(0, target.rfind(':'));
  const std::string port = target.substr(target.rfind(':') + 1);
  try {
    // 1. The default policy denies everything.
    {
      auto sandbox = sandboxio::sync::Sandbox::create(dsn);
      const auto r = sandbox.run(probe(host, port));
      std::cout << "  probe: exit " << r.exit_code.value_or(-1) << ", stderr tail: "
                << r.stderr_bytes.substr(r.stderr_bytes.rfind('\n', r.stderr_bytes.size() - 2) + 1);
      check(!r.ok() && r.stdout_bytes.empty(), "the default sandbox cannot connect to " + target);
      check(!sandbox.info().network.allows(host), "info() says the host is not allowed");
    }

    // 2. Allowing one host: the backend enforces it, or refuses to create.
    sandboxio::CreateOptions options;
    options.network = sandboxio::NetworkPolicy::allowing({host});
    try {
      auto sandbox = sandboxio::sync::Sandbox::create(dsn, options);
      const auto r = sandbox.run(probe(host, port));
      check(r.ok(), "with " + host + " allowed, the sandbox connects to it");
      const auto other = sandbox.run(probe("other.invalid", port));
      check(!other.ok(), "a host that is not on the list stays unreachable");
    } catch (const sandboxio::Error& e) {
      std::cout << "  " << e.what() << "\n";
      check(e.code() == sandboxio::errc::PolicyUnenforceable,
            "this backend cannot enforce an allow list, so it refused to create (SBX_E1403)");
    }
  } catch (const sandboxio::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
