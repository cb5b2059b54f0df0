#include "sandboxio/codec/base64.hpp"

#include <array>
#include <cstdint>

namespace sandboxio {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<std::int8_t, 256> kValues = [] {
  std::array<std::int8_t, 256> v{};
  v.fill(-1);
  for (int i = 0; i < 64; ++i)
    v[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  v['-'] = 62;  // URL-safe alphabet
  v['_'] = 63;
  return v;
}();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                            static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1]))
                                << 8 |
                            static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kAlphabet[n >> 18]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(kAlphabet[(n >> 6) & 63]);
    out.push_back(kAlphabet[n & 63]);
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[n >> 18]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=')
    text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.resize(text.size() / 4 * 3 + 3);
  char* w = out.data();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  // Four characters to three bytes at a time; an invalid character anywhere fails the whole.
  for (; i + 4 <= text.size(); i += 4) {
    const int a = kValues[p[i]], b = kValues[p[i + 1]], c = kValues[p[i + 2]],
              d = kValues[p[i + 3]];
    if ((a | b | c | d) < 0) return std::nullopt;
    const auto n = static_cast<std::uint32_t>(a << 18 | b << 12 | c << 6 | d);
    *w++ = static_cast<char>(n >> 16);
    *w++ = static_cast<char>((n >> 8) & 0xFF);
    *w++ = static_cast<char>(n & 0xFF);
  }
  out.resize(static_cast<std::size_t>(w - out.data()));
  text.remove_prefix(i);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = kValues[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace sandboxio
