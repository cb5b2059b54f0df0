// TlsChannel on OpenSSL memory BIOs.
#include "sandboxio/tls.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace sandboxio {

namespace {

// One TLS context per trust configuration (CA file, client certificate), made once per
// process: loading the system's CA bundle costs 19 to 35 ms of CPU, which a context per
// connection paid on every handshake. Each context keeps the session tickets its servers
// gave, up to 32 per server name and port, each used once (RFC 8446 C.4), so that the next
// connection to that server resumes instead of repeating the certificate exchange.
struct Context {
  SSL_CTX* ctx = nullptr;
  std::mutex mu;
  std::map<std::string, std::deque<SSL_SESSION*>> tickets;  // by server name and port
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() {
    for (auto& [key, q] : tickets)
      for (SSL_SESSION* s : q)
        SSL_SESSION_free(s);
    if (ctx) SSL_CTX_free(ctx);
  }
};

constexpr std::size_t kContexts = 16;  // trust configurations kept
// Tickets are used once, so a burst of connections to one server needs as many: each full
// handshake brings two (OpenSSL's and Node's default), each resumed one brings more.
constexpr std::size_t kTicketsPerServer = 32;
constexpr std::size_t kServersPerContext = 64;

}  // namespace

struct TlsChannel::State {
  std::shared_ptr<Context> context;
  SSL* ssl = nullptr;
  BIO* rbio = nullptr;  // ciphertext in (owned by ssl)
  BIO* wbio = nullptr;  // ciphertext out (owned by ssl)
  std::string name;
  std::string ticket_key;         // "name port"
  std::vector<std::string> alpn;  // offered; the server must agree to one
  std::optional<Problem> error;
  ~State() {
    if (ssl) SSL_free(ssl);
  }
};

namespace {

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("no detail from OpenSSL") : out;
}

Problem tls_problem(std::string detail, std::string hint = {}) {
  return Problem{errc::TlsError, std::move(detail), std::move(hint)};
}

bool is_ip(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// OpenSSL hands over each ticket the server sends (TLS 1.3: after the handshake): kept for
// the next connection to the same server, the oldest dropped past the bound.
int keep_ticket(SSL* ssl, SSL_SESSION* session) {
  auto* st = static_cast<TlsChannel::State*>(SSL_get_app_data(ssl));
  if (st == nullptr || !SSL_SESSION_is_resumable(session)) return 0;
  Context& c = *st->context;
  std::lock_guard lock(c.mu);
  if (!c.tickets.contains(st->ticket_key) && c.tickets.size() >= kServersPerContext) {
    for (SSL_SESSION* old : c.tickets.begin()->second)
      SSL_SESSION_free(old);
    c.tickets.erase(c.tickets.begin());
  }
  auto& q = c.tickets[st->ticket_key];
  q.push_back(session);
  if (q.size() > kTicketsPerServer) {
    SSL_SESSION_free(q.front());
    q.pop_front();
  }
  return 1;  // the reference is ours now
}

SSL_SESSION* take_ticket(Context& c, const std::string& key) {
  std::lock_guard lock(c.mu);
  auto it = c.tickets.find(key);
  if (it == c.tickets.end() || it->second.empty()) return nullptr;
  SSL_SESSION* s = it->second.back();
  it->second.pop_back();
  return s;
}

Result<std::shared_ptr<Context>> make_context(const Endpoint& endpoint) {
  auto c = std::make_shared<Context>();
  c->ctx = SSL_CTX_new(TLS_client_method());
  if (!c->ctx) return tls_problem("cannot make a TLS context: " + openssl_errors());
  SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(c->ctx, keep_ticket);
  if (!endpoint.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(c->ctx, endpoint.ca_file.c_str(), nullptr) != 1) {
      return tls_problem("cannot load the CA file " + endpoint.ca_file + ": " + openssl_errors(),
                         "Check the path (DOCKER_CERT_PATH/ca.pem for Docker) and that it holds "
                         "PEM certificates.");
    }
  } else if (SSL_CTX_set_default_verify_paths(c->ctx) != 1) {
    return tls_problem("cannot load the system CA store: " + openssl_errors(),
                       "Install ca-certificates, or set SSL_CERT_FILE.");
  }
  if (!endpoint.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(c->ctx, endpoint.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(c->ctx, endpoint.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(c->ctx) != 1) {
      return tls_problem("cannot load the client certificate " + endpoint.cert_file + " and key " +
                             endpoint.key_file + ": " + openssl_errors(),
                         "Check DOCKER_CERT_PATH: it must hold cert.pem and key.pem.");
    }
  }
  return c;
}

// The context for this endpoint's trust configuration, made on first use. A context that
// failed to load is not kept: the next connection tries again (a CA file may appear).
// The system store is read once per process, as curl and Node do: a CA bundle changed while
// the process runs is seen by the next process.
Result<std::shared_ptr<Context>> context_for(const Endpoint& endpoint) {
  static auto* mu = new std::mutex;  // never destroyed: connections may end during exit
  static auto* contexts = new std::map<std::string, std::shared_ptr<Context>>;
  const std::string key = endpoint.ca_file + '\n' + endpoint.cert_file + '\n' + endpoint.key_file;
  std::lock_guard lock(*mu);
  if (auto it = contexts->find(key); it != contexts->end()) return it->second;
  auto made = make_context(endpoint);
  if (!made) return made;
  if (contexts->size() >= kContexts) contexts->erase(contexts->begin());
  contexts->emplace(key, made.value());
  return made;
}

}  // namespace

void tls_global_init() {
  OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, nullptr);
}

TlsChannel::TlsChannel(std::unique_ptr<State> state) : state_(std::move(state)) {}
TlsChannel::~TlsChannel() = default;

Result<std::unique_ptr<TlsChannel>> TlsChannel::client(const Endpoint& endpoint) {
  auto st = std::make_unique<State>();
  ERR_clear_error();
  auto context = context_for(endpoint);
  if (!context) return context.problem();
  st->context = std::move(context).value();
  st->ssl = SSL_new(st->context->ctx);
  if (!st->ssl) return tls_problem("cannot make a TLS session: " + openssl_errors());
  SSL_set_app_data(st->ssl, st.get());
  st->rbio = BIO_new(BIO_s_mem());
  st->wbio = BIO_new(BIO_s_mem());
  if (!st->rbio || !st->wbio) {
    if (st->rbio) BIO_free(st->rbio);
    if (st->wbio) BIO_free(st->wbio);
    return tls_problem("cannot make TLS buffers");
  }
  SSL_set_bio(st->ssl, st->rbio, st->wbio);
  SSL_set_connect_state(st->ssl);
  st->name = endpoint.server_name.empty() ? endpoint.address : endpoint.server_name;
  if (is_ip(st->name)) {
    X509_VERIFY_PARAM* param = SSL_get0_param(st->ssl);
    if (X509_VERIFY_PARAM_set1_ip_asc(param, st->name.c_str()) != 1)
      return tls_problem("cannot verify the address " + st->name);
  } else {
    SSL_set_tlsext_host_name(st->ssl, st->name.c_str());
    if (SSL_set1_host(st->ssl, st->name.c_str()) != 1)
      return tls_problem("cannot verify the host name " + st->name);
  }
  if (!endpoint.alpn.empty()) {
    std::string wire;  // RFC 7301: each name with its length byte before it
    for (const std::string& protocol : endpoint.alpn) {
      if (protocol.empty() || protocol.size() > 255)
        return tls_problem("an ALPN protocol name must be 1 to 255 bytes");
      wire += static_cast<char>(protocol.size());
      wire += protocol;
    }
    // SSL_set_alpn_protos returns 0 on success, unlike most of OpenSSL.
    if (SSL_set_alpn_protos(st->ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                            static_cast<unsigned>(wire.size())) != 0)
      return tls_problem("cannot offer ALPN protocols: " + openssl_errors());
    st->alpn = endpoint.alpn;
  }
  st->ticket_key = st->name + ' ' + std::to_string(endpoint.port);
  if (SSL_SESSION* ticket = take_ticket(*st->context, st->ticket_key)) {
    SSL_set_session(st->ssl, ticket);  // a full handshake if the server declines it
    SSL_SESSION_free(ticket);          // SSL_set_session took its own reference
  }
  auto channel = std::unique_ptr<TlsChannel>(new TlsChannel(std::move(st)));
  if (auto r = channel->drive(); !r) return r.problem();  // the ClientHello
  return channel;
}

Result<void> TlsChannel::drive() {
  State& st = *state_;
  if (st.error) return *st.error;
  ERR_clear_error();
  if (!established_) {
    const int r = SSL_do_handshake(st.ssl);
    if (r == 1) {
      established_ = true;
      if (!st.alpn.empty()) {
        const unsigned char* chosen = nullptr;
        unsigned len = 0;
        SSL_get0_alpn_selected(st.ssl, &chosen, &len);
        const std::string agreed(reinterpret_cast<const char*>(chosen), chosen ? len : 0);
        if (std::find(st.alpn.begin(), st.alpn.end(), agreed) == st.alpn.end()) {
          st.error = tls_problem(
              st.name + " did not agree to " + st.alpn.front() + " by ALPN" +
                  (agreed.empty() ? std::string(" (it named none)") : " (it named " + agreed + ")"),
              "The server must speak " + st.alpn.front() +
                  " over TLS; check that the URL names the service itself, not a proxy.");
          return *st.error;
        }
        alpn_ = agreed;
      }
    } else {
      const int e = SSL_get_error(st.ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        const long verify = SSL_get_verify_result(st.ssl);
        std::string detail = "the TLS handshake with " + st.name + " failed: ";
        if (verify != X509_V_OK) {
          detail +=
              std::string("certificate verification: ") + X509_verify_cert_error_string(verify);
        } else {
          detail += openssl_errors();
        }
        st.error = tls_problem(std::move(detail),
                               "Check the server's certificate and name, and the CA given "
                               "(ca_file, SSL_CERT_FILE or DOCKER_CERT_PATH).");
        return *st.error;
      }
    }
  }
  if (!established_) return {};
  char buf[16 * 1024];
  while (!peer_closed_) {
    const int n = SSL_read(st.ssl, buf, sizeof buf);
    if (n > 0) {
      plain_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(st.ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    if (e == SSL_ERROR_ZERO_RETURN) {
      peer_closed_ = true;
      break;
    }
    st.error = tls_problem("TLS read failed: " + openssl_errors());
    return *st.error;
  }
  return {};
}

Result<void> TlsChannel::feed(std::string_view cipher) {
  State& st = *state_;
  if (st.error) return *st.error;
  while (!cipher.empty()) {
    const int n = BIO_write(st.rbio, cipher.data(), static_cast<int>(cipher.size()));
    if (n <= 0) return tls_problem("cannot buffer TLS input");
    cipher.remove_prefix(static_cast<std::size_t>(n));
  }
  return drive();
}

void TlsChannel::write(std::string plain) {
  if (!plain.empty()) pending_.push_back(std::move(plain));
}

void TlsChannel::close_notify() {
  close_requested_ = true;
}

// Encrypts the next slice of queued plaintext (then close_notify, once all of it is through).
void TlsChannel::encrypt_slice() {
  State& st = *state_;
  if (st.error || !established_) return;
  constexpr std::size_t kSlice = 256 * 1024;
  std::size_t budget = kSlice;
  ERR_clear_error();
  while (!pending_.empty() && budget > 0) {
    const std::string& front = pending_.front();
    const std::size_t n = std::min(budget, front.size() - pending_done_);
    const int w = SSL_write(st.ssl, front.data() + pending_done_, static_cast<int>(n));
    if (w <= 0) {
      st.error = tls_problem("TLS write failed: " + openssl_errors());
      return;
    }
    pending_done_ += static_cast<std::size_t>(w);
    budget -= static_cast<std::size_t>(w);
    if (pending_done_ == front.size()) {
      pending_.pop_front();
      pending_done_ = 0;
    }
  }
  if (pending_.empty() && close_requested_ && !closed_) {
    closed_ = true;
    (void)SSL_shutdown(st.ssl);
  }
}

std::string TlsChannel::take_cipher() {
  encrypt_slice();
  std::string out;
  const std::size_t n = BIO_ctrl_pending(state_->wbio);
  if (n == 0) return out;
  out.resize(n);
  const int got = BIO_read(state_->wbio, out.data(), static_cast<int>(n));
  out.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return out;
}

bool TlsChannel::resumed() const noexcept {
  return established_ && SSL_session_reused(state_->ssl) == 1;
}

std::string TlsChannel::take_plain() {
  return std::exchange(plain_, {});
}

}  // namespace sandboxio
