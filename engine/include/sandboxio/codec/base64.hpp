// Standard base64 (RFC 4648, with padding), as protojson writes bytes fields and Docker writes
// its path-stat header.
//
//   std::string b = sandboxio::base64_encode("hi\n");          // "aGkK"
//   std::optional<std::string> raw = sandboxio::base64_decode(b);
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxio {

[[nodiscard]] std::string base64_encode(std::string_view bytes);
/// Decodes standard base64; padding may be left out (protojson readers accept both), and
/// the URL-safe alphabet is accepted too. Nullopt for anything else.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

}  // namespace sandboxio
