// Redaction: removes secrets from text before it leaves the process (records, logs, errors).
//
//   sandboxio::Redactor r;
//   r.add_secret(api_key);
//   r.redact("curl -H 'Authorization: Bearer abc123' https://u:pw@host");
//   // -> "curl -H 'Authorization: Bearer ***' https://u:***@host"
//
// Besides the registered secret values it recognises, without being told: bearer tokens,
// E2B-style keys (e2b_ followed by 20+ alphanumerics), assignments whose name ends in
// API_KEY, TOKEN, SECRET or PASSWORD (NAME=value, NAME: value, "NAME": "value"), and the
// password part of URL credentials. Redaction is linear in the input and never throws on odd
// bytes (NUL, invalid UTF-8).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandboxio {

inline constexpr std::string_view kRedacted = "***";

class Redactor {
 public:
  /// Registers a value to remove wherever it appears. Empty values are ignored.
  void add_secret(std::string value);
  void add_secrets(const std::vector<std::string>& values) {
    for (const std::string& v : values)
      add_secret(v);
  }
  [[nodiscard]] std::string redact(std::string_view text) const;

 private:
  std::vector<std::string> secrets_{};  // longest first, so a secret containing another goes first
};

}  // namespace sandboxio
