#include "sandboxio/codec/shell.hpp"

namespace sandboxio {

std::string shell_quote(std::string_view arg) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  };
  bool simple = !arg.empty();
  for (char c : arg)
    simple = simple && plain(c);
  if (simple) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out.push_back(' ');
    out += shell_quote(a);
  }
  return out;
}

}  // namespace sandboxio
