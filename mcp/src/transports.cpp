// The MCP server's transports: newline-delimited JSON-RPC on stdio, and Streamable HTTP on a
// loopback port with Host and Origin checked against DNS rebinding.
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <iostream>
#include <thread>

#include "sandboxio/codec/http.hpp"
#include "sandboxio/mcp.hpp"

namespace sandboxio::mcp {
namespace {

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int serve_stdio(const ServerOptions& options) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  Server server(io.get_executor(), options);
  bool closing = false;
  bool eof = false;
  std::size_t in_flight = 0;
  auto shutdown = [&] {
    if (closing) return;
    closing = true;
    // The sandbox's connections (its owner lease) keep the context busy: stop it once the
    // sandbox is gone.
    server.close([&] { io.stop(); });
  };
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code ec, int) {
    if (!ec) shutdown();
  });
  // stdout carries MCP messages only, one per line; everything else goes to stderr.
  auto write_line = [](std::string s) {
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  std::thread reader([&] {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      asio::post(io, [&, l = std::move(line)] {
        if (closing) return;
        ++in_flight;
        server.handle(l, Transport{}, Reply{write_line, [&](int) {
                                              if (--in_flight == 0 && eof) shutdown();
                                            }});
      });
      line.clear();
    }
    // End of input: answer what is in flight, then tear down.
    asio::post(io, [&] {
      eof = true;
      if (in_flight == 0) shutdown();
    });
  });
  io.run();
  // A signal ended the server while stdin is still open: the reader stays blocked in read.
  if (reader.joinable()) reader.detach();
  return 0;
}

namespace {

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(asio::ip::tcp::socket socket, Server& server, unsigned short port)
      : socket_(std::move(socket)), server_(server), port_(port) {}

  void start() { read(); }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(buf_), [self = shared_from_this()](std::error_code ec, std::size_t n) {
          if (ec) return;
          std::string_view data(self->buf_.data(), n);
          while (!data.empty()) {
            const std::size_t used = self->parser_.feed(data);
            data.remove_prefix(used);
            if (self->parser_.error())
              return self->respond(400, "text/plain", "bad request\n", false);
            if (self->parser_.complete()) {
              self->body_ += self->parser_.take_body();
              return self->request();
            }
            self->body_ += self->parser_.take_body();
            if (self->body_.size() > (4u << 20))
              return self->respond(413, "text/plain", "request too large\n", false);
            if (used == 0) break;
          }
          self->read();
        });
  }

  bool allowed_host(const std::string& value) const {
    const std::string p = ":" + std::to_string(port_);
    for (const char* h : {"127.0.0.1", "localhost", "[::1]"}) {
      if (value == h || value == std::string(h) + p) return true;
    }
    return false;
  }

  bool allowed_origin(const std::string& origin) const {
    for (const char* scheme : {"http://", "https://"}) {
      if (origin.rfind(scheme, 0) == 0) return allowed_host(origin.substr(std::strlen(scheme)));
    }
    return false;
  }

  void request() {
    std::string body = std::move(body_);  // taken first: an early refusal must not leak it
    body_.clear();
    Transport t;
    t.http = true;
    for (const auto& h : parser_.headers())
      t.headers[lower(h.name)] = h.value;
    const bool keep = parser_.keep_alive();
    // DNS rebinding: a browser tricked into calling us carries a foreign Host or Origin.
    auto host = t.headers.find("host");
    if (host == t.headers.end() || !allowed_host(host->second))
      return respond(403, "text/plain", "forbidden host\n", keep);
    if (auto origin = t.headers.find("origin");
        origin != t.headers.end() && !allowed_origin(origin->second))
      return respond(403, "text/plain", "forbidden origin\n", keep);
    const std::string target = parser_.target().substr(0, parser_.target().find('?'));
    if (target != "/mcp") return respond(404, "text/plain", "not found: use /mcp\n", keep);
    if (parser_.method() != "POST")
      return respond(405, "text/plain", "only POST is served (no server-initiated stream)\n", keep,
                     "Allow: POST\r\n");
    const std::string ctype = lower(t.headers["content-type"]);
    if (ctype.rfind("application/json", 0) != 0)
      return respond(415, "text/plain", "Content-Type must be application/json\n", keep);
    const std::string accept = lower(t.headers["accept"]);
    if (accept.find("application/json") == std::string::npos &&
        accept.find("*/*") == std::string::npos)
      return respond(406, "text/plain", "Accept must include application/json\n", keep);
    const bool sse = accept.find("text/event-stream") != std::string::npos;
    auto messages = std::make_shared<std::vector<std::string>>();
    auto self = shared_from_this();
    server_.handle(body, t,
                   Reply{[messages](std::string m) { messages->push_back(std::move(m)); },
                         [self, messages, keep, sse](int status) {
                           if (messages->empty()) return self->respond(status, "", "", keep);
                           if (messages->size() == 1 || !sse)
                             return self->respond(status, "application/json", messages->back(),
                                                  keep);
                           // Progress notifications then the response, as server-sent events.
                           std::string events;
                           for (const auto& m : *messages)
                             events += "event: message\ndata: " + m + "\n\n";
                           self->respond(status, "text/event-stream", events, keep);
                         }});
  }

  void respond(int status, const std::string& type, const std::string& body, bool keep,
               const std::string& extra = {}) {
    const char* reason = status == 200   ? "OK"
                         : status == 202 ? "Accepted"
                         : status == 400 ? "Bad Request"
                         : status == 403 ? "Forbidden"
                         : status == 404 ? "Not Found"
                         : status == 405 ? "Method Not Allowed"
                         : status == 406 ? "Not Acceptable"
                         : status == 413 ? "Payload Too Large"
                         : status == 415 ? "Unsupported Media Type"
                                         : "Error";
    auto out =
        std::make_shared<std::string>("HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n");
    if (!type.empty()) *out += "Content-Type: " + type + "\r\n";
    *out += "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra;
    *out += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    *out += body;
    asio::async_write(socket_, asio::buffer(*out),
                      [self = shared_from_this(), out, keep](std::error_code ec, std::size_t) {
                        if (ec || !keep) {
                          std::error_code ignored;
                          self->socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
                          return;
                        }
                        self->parser_.reset();
                        self->read();
                      });
  }

  asio::ip::tcp::socket socket_;
  Server& server_;
  unsigned short port_;
  http::RequestParser parser_;
  std::string body_;
  std::array<char, 16 * 1024> buf_{};
};

void accept_loop(asio::ip::tcp::acceptor& acceptor, Server& server, unsigned short port) {
  acceptor.async_accept([&acceptor, &server, port](std::error_code ec, asio::ip::tcp::socket s) {
    if (ec) return;
    std::make_shared<HttpConnection>(std::move(s), server, port)->start();
    accept_loop(acceptor, server, port);
  });
}

}  // namespace

int serve_http(const ServerOptions& options, const std::string& address,
               const std::function<void(unsigned short)>& ready) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "sandboxio mcp: --http wants 127.0.0.1:PORT\n";
    return 2;
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  std::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec || !ip.is_loopback()) {
    std::cerr << "sandboxio mcp: --http serves on a loopback address only (127.0.0.1 or ::1), "
                 "not \""
              << host << "\"\n";
    return 2;
  }
  const auto port = static_cast<unsigned short>(std::atoi(address.substr(colon + 1).c_str()));
  asio::io_context io;
  Server server(io.get_executor(), options);
  asio::ip::tcp::acceptor acceptor(io);
  asio::ip::tcp::endpoint ep(ip, port);
  acceptor.open(ep.protocol());
  acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  acceptor.bind(ep, ec);
  if (ec) {
    std::cerr << "sandboxio mcp: cannot listen on " << address << ": " << ec.message() << "\n";
    return 1;
  }
  acceptor.listen();
  const unsigned short bound = acceptor.local_endpoint().port();
  if (ready) ready(bound);
  accept_loop(acceptor, server, bound);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code e, int) {
    if (e) return;
    acceptor.close();
    server.close([&] { io.stop(); });
  });
  io.run();
  return 0;
}

}  // namespace sandboxio::mcp
