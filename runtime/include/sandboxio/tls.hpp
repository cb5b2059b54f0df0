// TlsChannel: a TLS client over memory buffers (OpenSSL with memory BIOs). The transports own
// the socket; this owns the cryptography, so the blocking and the Asio transports share one
// TLS implementation: ciphertext from the socket goes in through feed(), plaintext for the
// machine comes out of take_plain(); plaintext from the machine goes in through write(), and
// ciphertext for the socket comes out of take_cipher().
//
//   auto tls = sandboxio::TlsChannel::client(endpoint).value();
//   send(socket, tls->take_cipher());               // ClientHello
//   tls->feed(bytes_from_socket);                   // handshake, then application data
//   if (tls->established()) machine.handle_connected(...);
//
// Trust: Endpoint::ca_file when set, else SSL_CERT_FILE / SSL_CERT_DIR, else the system store,
// loaded once per process for each trust configuration (not per connection).
// The peer's certificate must match Endpoint::server_name (or address); SNI is sent for names.
// A client certificate is presented when Endpoint::cert_file and key_file are set.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "sandboxio/machine.hpp"

namespace sandboxio {

/// Initialises OpenSSL now (it also happens on first use). A program that joins its I/O
/// threads during static destruction calls this before starting them, so that OpenSSL's exit
/// handler runs after those threads ended and their per-thread state is released.
void tls_global_init();

class TlsChannel {
 public:
  /// Loads trust anchors and the client certificate: SBX_E1805 TlsError when a file is missing
  /// or unreadable.
  [[nodiscard]] static Result<std::unique_ptr<TlsChannel>> client(const Endpoint& endpoint);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  /// Ciphertext read from the socket. A handshake or record failure is SBX_E1805 with the
  /// reason (certificate verification errors name the check that failed). Sticky.
  [[nodiscard]] Result<void> feed(std::string_view cipher);
  /// Plaintext to send, queued as it is (not copied): it is encrypted a slice at a time by
  /// take_cipher(), once the handshake is done, so a large body is never held twice.
  void write(std::string plain);
  /// Sends close_notify (after the queued plaintext): the TLS form of a half-close.
  void close_notify();
  /// Ciphertext waiting to be written to the socket: handshake records, and the next slice
  /// (about 256 KiB) of queued plaintext. Call again as the socket drains while
  /// has_queued_plain() holds.
  [[nodiscard]] std::string take_cipher();
  /// Queued plaintext (or a close_notify) that take_cipher() has not encrypted yet.
  [[nodiscard]] bool has_queued_plain() const noexcept {
    return !pending_.empty() || (close_requested_ && !closed_);
  }
  /// Plaintext received.
  [[nodiscard]] std::string take_plain();
  [[nodiscard]] bool established() const noexcept { return established_; }
  /// The handshake resumed a session this process had with the same server (name and port)
  /// under the same trust: no certificate was exchanged. Tickets are kept per process, a few
  /// per server, each used once.
  [[nodiscard]] bool resumed() const noexcept;
  /// The protocol the server agreed to by ALPN (Endpoint::alpn), once the handshake is done;
  /// empty when none was offered.
  [[nodiscard]] const std::string& alpn() const noexcept { return alpn_; }
  /// The peer sent close_notify: no more plaintext will come.
  [[nodiscard]] bool peer_closed() const noexcept { return peer_closed_; }

  struct State;

 private:
  explicit TlsChannel(std::unique_ptr<State> state);
  Result<void> drive();
  void encrypt_slice();
  std::unique_ptr<State> state_;
  std::deque<std::string> pending_;  // plaintext not encrypted yet, the first from pending_done_
  std::size_t pending_done_ = 0;
  std::string plain_;
  std::string alpn_;
  bool established_ = false;
  bool peer_closed_ = false;
  bool close_requested_ = false;
  bool closed_ = false;
};

}  // namespace sandboxio
