#include "sandboxio/redact.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace sandboxio {
namespace {

using Range = std::pair<std::size_t, std::size_t>;  // [first, last)

char upper(char c) {
  return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}
bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool is_ident(char c) {
  return is_alnum(c) || c == '_';
}
bool is_space(char c) {
  return c == ' ' || c == '\t';
}
bool is_token_char(char c) {
  return is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' ||
         c == '=';
}
bool ends_with_upper(std::string_view ident, std::string_view suffix) {
  if (ident.size() < suffix.size()) return false;
  const std::string_view tail = ident.substr(ident.size() - suffix.size());
  for (std::size_t i = 0; i < suffix.size(); ++i) {
    if (upper(tail[i]) != suffix[i]) return false;
  }
  return true;
}
bool starts_with_icase(std::string_view text, std::size_t at, std::string_view word) {
  if (at + word.size() > text.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (upper(text[at + i]) != upper(word[i])) return false;
  }
  return true;
}

constexpr std::array<std::string_view, 6> kSecretSuffixes{"API_KEY", "APIKEY",   "TOKEN",
                                                          "SECRET",  "PASSWORD", "PASSWD"};

void find_bearer(std::string_view text, std::vector<Range>& out) {
  for (std::size_t i = 0; i + 6 < text.size(); ++i) {
    if (!starts_with_icase(text, i, "bearer")) continue;
    if (i > 0 && is_ident(text[i - 1])) continue;
    std::size_t j = i + 6;
    if (j >= text.size() || !is_space(text[j])) continue;
    while (j < text.size() && is_space(text[j]))
      ++j;
    std::size_t k = j;
    while (k < text.size() && is_token_char(text[k]))
      ++k;
    if (k > j) out.emplace_back(j, k);
    i = k > i ? k - 1 : i;
  }
}

void find_e2b_keys(std::string_view text, std::vector<Range>& out) {
  for (std::size_t i = 0; i + 4 < text.size(); ++i) {
    if (!starts_with_icase(text, i, "e2b_")) continue;
    if (i > 0 && is_ident(text[i - 1])) continue;
    std::size_t k = i + 4;
    while (k < text.size() && is_alnum(text[k]))
      ++k;
    if (k - (i + 4) >= 20) {
      out.emplace_back(i + 4, k);
      i = k - 1;
    }
  }
}

void find_assignments(std::string_view text, std::vector<Range>& out) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (!is_ident(text[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && is_ident(text[end]))
      ++end;
    const std::string_view ident = text.substr(i, end - i);
    i = end;
    if (std::none_of(kSecretSuffixes.begin(), kSecretSuffixes.end(),
                     [&](std::string_view s) { return ends_with_upper(ident, s); })) {
      continue;
    }
    std::size_t j = end;
    if (j < text.size() && (text[j] == '"' || text[j] == '\'')) ++j;  // closing quote of a key
    while (j < text.size() && is_space(text[j]))
      ++j;
    if (j >= text.size() || (text[j] != '=' && text[j] != ':')) continue;
    ++j;
    while (j < text.size() && is_space(text[j]))
      ++j;
    char quote = 0;
    if (j < text.size() && (text[j] == '"' || text[j] == '\'')) quote = text[j++];
    std::size_t k = j;
    if (quote != 0) {
      while (k < text.size() && text[k] != quote && text[k] != '\n')
        ++k;
    } else {
      while (k < text.size() && static_cast<unsigned char>(text[k]) > 0x20 && text[k] != '&' &&
             text[k] != ',' && text[k] != ';' && text[k] != '}' && text[k] != '"' &&
             text[k] != '\'') {
        ++k;
      }
    }
    if (k > j) out.emplace_back(j, k);
    i = k;
  }
}

void find_url_credentials(std::string_view text, std::vector<Range>& out) {
  std::size_t from = 0;
  while (true) {
    const std::size_t sep = text.find("://", from);
    if (sep == std::string_view::npos) return;
    const std::size_t start = sep + 3;
    std::size_t end = start;
    while (end < text.size() && text[end] != '/' && text[end] != '?' && text[end] != '#' &&
           !is_space(text[end]) && text[end] != '\n' && text[end] != '"' && text[end] != '\'') {
      ++end;
    }
    const std::string_view authority = text.substr(start, end - start);
    const std::size_t at = authority.rfind('@');
    if (at != std::string_view::npos && at > 0) {
      const std::size_t colon = authority.substr(0, at).find(':');
      if (colon != std::string_view::npos) {
        if (at > colon + 1) out.emplace_back(start + colon + 1, start + at);
      } else {
        out.emplace_back(start, start + at);  // a bare token as the user name
      }
    }
    from = end > sep ? end : sep + 3;
  }
}

}  // namespace

void Redactor::add_secret(std::string value) {
  if (value.empty()) return;
  if (std::find(secrets_.begin(), secrets_.end(), value) != secrets_.end()) return;
  secrets_.push_back(std::move(value));
  std::stable_sort(secrets_.begin(), secrets_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

std::string Redactor::redact(std::string_view text) const {
  std::vector<Range> ranges;
  for (const std::string& secret : secrets_) {
    for (std::size_t pos = text.find(secret); pos != std::string_view::npos;
         pos = text.find(secret, pos + secret.size())) {
      ranges.emplace_back(pos, pos + secret.size());
    }
  }
  find_bearer(text, ranges);
  find_e2b_keys(text, ranges);
  find_assignments(text, ranges);
  find_url_credentials(text, ranges);
  if (ranges.empty()) return std::string(text);

  std::sort(ranges.begin(), ranges.end());
  std::string out;
  out.reserve(text.size());
  std::size_t cursor = 0;
  std::size_t i = 0;
  while (i < ranges.size()) {
    std::size_t first = ranges[i].first;
    std::size_t last = ranges[i].second;
    for (++i; i < ranges.size() && ranges[i].first <= last; ++i) {
      last = std::max(last, ranges[i].second);
    }
    first = std::max(first, cursor);
    out.append(text.substr(cursor, first - cursor));
    out.append(kRedacted);
    cursor = last;
  }
  out.append(text.substr(cursor));
  return out;
}

}  // namespace sandboxio
