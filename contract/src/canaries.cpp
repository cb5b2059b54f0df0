// The canaries of the allow-list rows, and the probes that reach them from a sandbox. Both
// canaries are servers on this machine's loopback: HttpCanary a plain web server, TlsCanary one
// speaking TLS with a certificate made for this process (a fresh P-256 key, self-signed, for the
// canary's name), so that a client in a sandbox proves an end-to-end TLS session through the
// egress proxy's CONNECT tunnel: the proxy relays bytes and never holds a key.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <random>

#include "sandboxio/contract.hpp"

namespace sandboxio::contract {
namespace {

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;

/// A TCP listener on 127.0.0.1 on a port the kernel picks; sets `port`. `who` names the
/// canary in the failure.
int listen_on_loopback(int& port, const std::string& who) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 16) != 0) {
    if (fd >= 0) ::close(fd);
    throw CaseFailure(who + " cannot listen on 127.0.0.1");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

void add_extension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) throw CaseFailure("the TLS canary cannot make its certificate");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

}  // namespace

HttpCanary::HttpCanary(std::size_t extra) : big_(extra) {
  std::random_device rd;
  body_ = "sandboxio-canary-" + std::to_string(rd()) + "\n";
  fd_ = listen_on_loopback(port_, "the canary");
  thread_ = std::thread([this] {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<std::size_t>(n));
      }
      ++requests_;
      const bool big = head.rfind("GET /big", 0) == 0;  // origin-form: the proxy rewrote it
      const std::size_t size = body_.size() + (big ? big_ : 0);
      std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(size) +
          "\r\nConnection: close\r\n\r\n" + body_;
      if (big) reply.append(big_, 'x');
      std::string_view rest = reply;
      while (!rest.empty()) {
        const ssize_t n = ::send(c, rest.data(), rest.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        rest.remove_prefix(static_cast<std::size_t>(n));
      }
      ::close(c);
    }
  });
}

HttpCanary::~HttpCanary() {
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  thread_.join();
}

std::vector<std::string> python_fetch(const std::string& url) {
  // python3-minimal has no http.client (urllib needs it): the request is made the way curl
  // makes it, with the socket module alone: to the proxy the environment names, or, when it
  // names none, straight to the URL's host (port 80 unless the URL says otherwise).
  return {"python3", "-c",
          "import os, socket, sys\n"
          "url = sys.argv[1]\n"
          "target = url.split('/')[2]\n"
          "proxy = os.environ.get('http_proxy') or os.environ.get('HTTP_PROXY')\n"
          "if proxy:\n"
          "    host, port = proxy.split('//', 1)[-1].rstrip('/').rsplit(':', 1)\n"
          "    path = url\n"
          "else:\n"
          "    host, _, port = target.partition(':')\n"
          "    port = port or '80'\n"
          "    path = '/' + url.split('/', 3)[3] if url.count('/') > 2 else '/'\n"
          "s = socket.create_connection((host, int(port)), timeout=20)\n"
          "s.sendall(('GET %s HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n'\n"
          "          % (path, target)).encode())\n"
          "data = bytearray()\n"
          "while True:\n"
          "    chunk = s.recv(65536)\n"
          "    if not chunk:\n"
          "        break\n"
          "    data += chunk\n"
          "head, _, body = bytes(data).partition(b'\\r\\n\\r\\n')\n"
          "status = head.split(b'\\r\\n')[0].decode(errors='replace')\n"
          "if status.split(' ')[1:2] != ['200']:\n"
          "    sys.exit(status)\n"
          "sys.stdout.write(body.decode())\n",
          url};
}

std::vector<std::string> python_resolve(const std::string& name) {
  return {"python3", "-c", "import socket, sys; socket.getaddrinfo(sys.argv[1], 80)", name};
}

TlsCanary::TlsCanary(const std::string& name) {
  // (EVP_EC_gen is a macro that casts away const: clang's -Wcast-qual refuses it.)
  EVP_PKEY_CTX* gen = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr);
  EVP_PKEY* made = nullptr;
  if (gen == nullptr || EVP_PKEY_keygen_init(gen) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(gen, NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(gen, &made) != 1)
    made = nullptr;
  EVP_PKEY_CTX_free(gen);
  Key key(made);
  Cert cert(X509_new());
  if (!key || !cert) throw CaseFailure("the TLS canary cannot make a key");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  add_extension(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign");
  add_extension(cert.get(), NID_subject_alt_name, ("DNS:" + name).c_str());
  add_extension(cert.get(), NID_subject_key_identifier, "hash");
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    throw CaseFailure("the TLS canary cannot sign its certificate");
  BIO* pem = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(pem, cert.get());
  char* data = nullptr;
  const long size = BIO_get_mem_data(pem, &data);
  ca_pem_.assign(data, static_cast<std::size_t>(size));
  BIO_free(pem);

  ctx_ = SSL_CTX_new(TLS_server_method());
  if (ctx_ == nullptr || SSL_CTX_use_certificate(ctx_, cert.get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx_, key.get()) != 1)
    throw CaseFailure("the TLS canary cannot use its certificate");
  body_ = "sandboxio-tls-canary\n";

  fd_ = listen_on_loopback(port_, "the TLS canary");
  thread_ = std::thread([this] {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      SSL* ssl = SSL_new(ctx_);
      SSL_set_fd(ssl, c);
      if (SSL_accept(ssl) == 1) {
        ++sessions_;
        std::string head;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
          const int n = SSL_read(ssl, buf, sizeof buf);
          if (n <= 0) break;
          head.append(buf, static_cast<std::size_t>(n));
        }
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) +
            "\r\nConnection: close\r\n\r\n" + body_;
        (void)SSL_write(ssl, reply.data(), static_cast<int>(reply.size()));
        (void)SSL_shutdown(ssl);
      }
      SSL_free(ssl);
      ::close(c);
    }
  });
}

TlsCanary::~TlsCanary() {
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  if (thread_.joinable()) thread_.join();
  SSL_CTX_free(ctx_);
}

std::vector<std::string> python_tls_fetch(const std::string& url, const std::string& ca_file) {
  // Through the proxy with CONNECT (or, when the environment names none, straight to the
  // URL's host, port 443 unless it says otherwise), then TLS to the named host with `ca_file`
  // as the only trust anchor (its name checked): what curl and pip do.
  return {"python3", "-c",
          "import os, socket, ssl, sys\n"
          "url, ca = sys.argv[1], sys.argv[2]\n"
          "target = url.split('/')[2]\n"
          "name, _, given = target.partition(':')\n"
          "proxy = os.environ.get('https_proxy') or os.environ.get('HTTPS_PROXY')\n"
          "if proxy:\n"
          "    host, port = proxy.split('//', 1)[-1].rstrip('/').rsplit(':', 1)\n"
          "    s = socket.create_connection((host, int(port)), timeout=20)\n"
          "    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, "
          "target)).encode())\n"
          "    head = b''\n"
          "    while b'\\r\\n\\r\\n' not in head:\n"
          "        chunk = s.recv(1)\n"
          "        if not chunk:\n"
          "            sys.exit('the proxy closed: %r' % head)\n"
          "        head += chunk\n"
          "    status = head.split(b'\\r\\n')[0].decode(errors='replace')\n"
          "    if status.split(' ')[1:2] != ['200']:\n"
          "        sys.exit(status)\n"
          "else:\n"
          "    s = socket.create_connection((name, int(given or 443)), timeout=20)\n"
          "t = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname=name)\n"
          "t.sendall(('GET /%s HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n'\n"
          "          % (url.split('/', 3)[3] if url.count('/') > 2 else '', name)).encode())\n"
          "data = bytearray()\n"
          "while True:\n"
          "    try:\n"
          "        chunk = t.recv(65536)\n"
          "    except ssl.SSLEOFError:\n"
          "        break\n"
          "    if not chunk:\n"
          "        break\n"
          "    data += chunk\n"
          "head, _, body = bytes(data).partition(b'\\r\\n\\r\\n')\n"
          "if head.split(b' ')[1:2] != [b'200']:\n"
          "    sys.exit(head.split(b'\\r\\n')[0].decode(errors='replace'))\n"
          "sys.stdout.write(body.decode())\n",
          url, ca_file};
}

}  // namespace sandboxio::contract
