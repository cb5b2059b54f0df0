#include "sandboxio/dsn.hpp"

#include <algorithm>
#include <charconv>

#include "sandboxio/duration.hpp"
#include "text.hpp"

namespace sandboxio {
namespace {

constexpr std::string_view kDsnHint =
    "Write a DSN as scheme://target?option=value, for example docker://python:3.12-slim or "
    "fake://.";

Problem dsn_problem(std::string detail, std::string hint = std::string(kDsnHint)) {
  return Problem{errc::InvalidDsn, std::move(detail), std::move(hint)};
}

std::string at(std::size_t offset) {
  return " at byte " + std::to_string(offset);
}

bool is_scheme_start(char c) {
  return c >= 'a' && c <= 'z';
}
bool is_scheme_char(char c) {
  return is_scheme_start(c) || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
}
bool is_option_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Shows a byte safely inside an error message (the message itself must stay printable).
std::string show_byte(unsigned char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  if (c >= 0x21 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

// Decodes one component. `base` is its offset in the whole DSN, for messages.
Result<std::string> decode(std::string_view raw, std::size_t base, std::string_view what) {
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c == '%') {
      if (i + 2 >= raw.size()) {
        return dsn_problem(
            "truncated percent escape in the " + std::string(what) + at(base + i),
            "A percent escape is '%' and two hex digits; write %25 for a literal '%'.");
      }
      const int hi = hex_value(raw[i + 1]);
      const int lo = hex_value(raw[i + 2]);
      if (hi < 0 || lo < 0) {
        return dsn_problem(
            "bad percent escape in the " + std::string(what) + at(base + i),
            "A percent escape is '%' and two hex digits; write %25 for a literal '%'.");
      }
      const auto decoded = static_cast<unsigned char>(hi * 16 + lo);
      if (decoded == 0) {
        return dsn_problem("the " + std::string(what) + " decodes to a NUL byte" + at(base + i),
                           "Remove %00 from the DSN: NUL bytes are never valid in a sandbox name.");
      }
      if (decoded < 0x20 || decoded == 0x7f) {
        return dsn_problem(
            "the " + std::string(what) + " decodes to a control character" + at(base + i),
            "Remove the escaped control character from the DSN.");
      }
      out.push_back(static_cast<char>(decoded));
      i += 2;
      continue;
    }
    if (c == 0) {
      return dsn_problem("NUL byte in the " + std::string(what) + at(base + i),
                         "Remove the NUL byte: a DSN is text.");
    }
    if (c < 0x20 || c == 0x7f || c == ' ') {
      return dsn_problem(show_byte(c) + " in the " + std::string(what) + at(base + i),
                         "Percent-encode spaces and control characters (a space is %20).");
    }
    out.push_back(static_cast<char>(c));
  }
  if (!is_valid_utf8(out)) {
    return dsn_problem("the " + std::string(what) + " is not valid UTF-8" + at(base),
                       "Write the DSN in UTF-8, or percent-encode its bytes.");
  }
  return out;
}

Problem option_problem(std::string detail, std::span<const OptionSpec> specs) {
  std::string known;
  for (const OptionSpec& s : specs) {
    if (!known.empty()) known += ", ";
    known += s.name;
  }
  std::string hint = known.empty() ? "This backend takes no DSN options; remove the query part."
                                   : "Options this backend knows: " + known + ".";
  return Problem{errc::InvalidOption, std::move(detail), std::move(hint)};
}

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

}  // namespace

bool is_valid_utf8(std::string_view text) noexcept {
  for (std::size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t len = detail::utf8_sequence_length(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

Result<Dsn> parse_dsn(std::string_view text) {
  if (text.size() > kMaxDsnLength) {
    return dsn_problem("the DSN is " + std::to_string(text.size()) + " bytes long; the limit is " +
                           std::to_string(kMaxDsnLength),
                       "Pass long values through CreateOptions, not the DSN.");
  }
  if (text.empty()) return dsn_problem("the DSN is empty");

  const std::size_t sep = text.find("://");
  if (sep == std::string_view::npos) {
    return dsn_problem("no \"://\" after the scheme");
  }
  const std::string_view scheme = text.substr(0, sep);
  if (scheme.empty()) return dsn_problem("the scheme before \"://\" is empty");
  if (!is_scheme_start(scheme[0])) {
    return dsn_problem("the scheme must start with a lowercase letter, found " +
                           show_byte(static_cast<unsigned char>(scheme[0])) + at(0),
                       "Schemes are lowercase: docker://, e2b://, fake://.");
  }
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (!is_scheme_char(scheme[i])) {
      return dsn_problem("invalid character " + show_byte(static_cast<unsigned char>(scheme[i])) +
                             " in the scheme" + at(i),
                         "Schemes are lowercase letters, digits, '+', '.' and '-'.");
    }
  }

  Dsn dsn;
  dsn.scheme = std::string(scheme);
  std::string_view rest = text.substr(sep + 3);
  const std::size_t rest_base = sep + 3;
  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    return dsn_problem(
        "'#' in the DSN" + at(rest_base + hash),
        "A DSN has no fragment; percent-encode '#' as %23 if it is part of a value.");
  }
  const std::size_t q = rest.find('?');
  const std::string_view raw_target = rest.substr(0, q);
  auto target = decode(raw_target, rest_base, "target");
  if (!target) return target.problem();
  dsn.target = std::move(target).value();

  if (q == std::string_view::npos) return dsn;
  std::string_view query = rest.substr(q + 1);
  std::size_t base = rest_base + q + 1;
  if (query.empty()) {
    return dsn_problem("'?' with no options after it" + at(base - 1), "Remove the trailing '?'.");
  }
  while (true) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.empty()) {
      return Problem{errc::InvalidOption, "empty option" + at(base),
                     "Separate options with a single '&': docker://img?a=1&b=2."};
    }
    const std::size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    if (name.empty()) {
      return Problem{errc::InvalidOption, "option with no name" + at(base),
                     "Write options as name=value."};
    }
    for (std::size_t i = 0; i < name.size(); ++i) {
      if (!is_option_name_char(name[i])) {
        return Problem{errc::InvalidOption,
                       "invalid character " + show_byte(static_cast<unsigned char>(name[i])) +
                           " in an option name" + at(base + i),
                       "Option names are lowercase letters, digits, '_', '.' and '-'."};
      }
    }
    if (dsn.option(name) != nullptr) {
      return Problem{errc::InvalidOption, "option \"" + std::string(name) + "\" is given twice",
                     "Give each option once."};
    }
    if (dsn.options.size() == kMaxDsnOptions) {
      return Problem{errc::InvalidOption,
                     "more than " + std::to_string(kMaxDsnOptions) + " options in the DSN",
                     "Pass the rest through CreateOptions."};
    }
    std::string value;
    if (eq != std::string_view::npos) {
      auto decoded =
          decode(pair.substr(eq + 1), base + eq + 1, "value of option " + std::string(name));
      if (!decoded) return decoded.problem();
      value = std::move(decoded).value();
    } else {
      value = "true";  // a bare flag: docker://img?pull
    }
    dsn.options.push_back({std::string(name), std::move(value)});
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
    base += amp + 1;
  }
  return dsn;
}

const std::string* Dsn::option(std::string_view name) const noexcept {
  for (const Option& o : options) {
    if (o.name == name) return &o.value;
  }
  return nullptr;
}

Result<TypedOptions> Dsn::typed(std::span<const OptionSpec> specs) const {
  TypedOptions typed;
  for (const Option& o : options) {
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const OptionSpec& s) { return s.name == o.name; });
    if (spec == specs.end()) {
      return option_problem("unknown option \"" + o.name + "\" for " + scheme + "://", specs);
    }
    switch (spec->type) {
      case OptionType::String:
        break;
      case OptionType::Bool: {
        auto b = parse_bool(o.value);
        if (!b) {
          return option_problem("option \"" + o.name + "\" must be true or false", specs);
        }
        typed.bools_[o.name] = *b;
        break;
      }
      case OptionType::Int: {
        std::int64_t v = 0;
        const char* first = o.value.data();
        const char* last = first + o.value.size();
        auto [ptr, ec] = std::from_chars(first, last, v);
        if (ec != std::errc{} || ptr != last || o.value.empty()) {
          return option_problem("option \"" + o.name + "\" must be an integer", specs);
        }
        typed.ints_[o.name] = v;
        break;
      }
      case OptionType::Duration: {
        auto d = parse_duration(o.value, o.name);
        if (!d) return d.problem();
        typed.durations_[o.name] = d.value();
        break;
      }
    }
    typed.raw_[o.name] = o.value;
  }
  return typed;
}

std::string TypedOptions::string(std::string_view name, std::string fallback) const {
  auto it = raw_.find(name);
  return it == raw_.end() ? fallback : it->second;
}
bool TypedOptions::boolean(std::string_view name, bool fallback) const {
  auto it = bools_.find(name);
  return it == bools_.end() ? fallback : it->second;
}
std::int64_t TypedOptions::integer(std::string_view name, std::int64_t fallback) const {
  auto it = ints_.find(name);
  return it == ints_.end() ? fallback : it->second;
}
std::chrono::milliseconds TypedOptions::duration(std::string_view name,
                                                 std::chrono::milliseconds fallback) const {
  auto it = durations_.find(name);
  return it == durations_.end() ? fallback : it->second;
}

namespace {
// Appends c as %XX.
void append_escape(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out.push_back('%');
  out.push_back(kHex[c >> 4]);
  out.push_back(kHex[c & 15]);
}
}  // namespace

std::string percent_encode(std::string_view text, std::string_view keep) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (c >= 0x21 && c < 0x7f && keep.find(ch) != std::string_view::npos)) {
      out.push_back(ch);
    } else {
      append_escape(out, c);
    }
  }
  return out;
}

// Encodes only what the parser needs encoded, so that printing never makes a DSN longer than
// the text it was parsed from (the round trip holds at the length limit too).
namespace {
std::string encode_minimal(std::string_view text, std::string_view must) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f || ch == '%' || must.find(ch) != std::string_view::npos) {
      append_escape(out, c);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

}  // namespace

std::string Dsn::to_string() const {
  std::string out = scheme + "://" + encode_minimal(target, "#?");
  char sep = '?';
  for (const Option& o : options) {
    out.push_back(sep);
    out += o.name;
    out.push_back('=');
    out += encode_minimal(o.value, "#&");
    sep = '&';
  }
  return out;
}

}  // namespace sandboxio
