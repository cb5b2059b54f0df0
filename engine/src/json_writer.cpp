#include "sandboxio/codec/json_writer.hpp"

#include <charconv>
#include <cmath>

#include "sandboxio/codec/json.hpp"
#include "text.hpp"

namespace sandboxio {

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t len = detail::utf8_sequence_length(text, i);
      if (len == 0) {
        out.append("\xEF\xBF\xBD");  // U+FFFD for each invalid byte
        ++i;
      } else {
        out.append(text.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

void JsonWriter::separate() {
  if (need_comma_) out_.push_back(',');
  need_comma_ = true;
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_.push_back('{');
  need_comma_ = false;
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_.push_back('}');
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  separate();
  out_.push_back('[');
  need_comma_ = false;
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_.push_back(']');
  need_comma_ = true;
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  append_json_string(out_, name);
  out_.push_back(':');
  need_comma_ = false;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view text) {
  separate();
  append_json_string(out_, text);
  return *this;
}
JsonWriter& JsonWriter::value(std::int64_t number) {
  separate();
  out_.append(std::to_string(number));
  return *this;
}
JsonWriter& JsonWriter::value(std::uint64_t number) {
  separate();
  out_.append(std::to_string(number));
  return *this;
}
JsonWriter& JsonWriter::value(double number) {
  separate();
  if (!std::isfinite(number)) {
    out_.append("null");  // JSON has no NaN or infinity
    return *this;
  }
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, number);  // shortest round trip
  out_.append(buf, result.ptr);
  return *this;
}
JsonWriter& JsonWriter::value(bool flag) {
  separate();
  out_.append(flag ? "true" : "false");
  return *this;
}
JsonWriter& JsonWriter::null() {
  separate();
  out_.append("null");
  return *this;
}

void write_json(JsonWriter& w, const json::Value& v) {
  switch (v.type()) {
    case json::Value::Type::Null:
      w.null();
      break;
    case json::Value::Type::Bool:
      w.value(v.boolean_value().value_or(false));
      break;
    case json::Value::Type::Number:
      if (auto i = v.integer()) {
        w.value(*i);
      } else {
        w.value(v.real().value_or(0));
      }
      break;
    case json::Value::Type::String:
      w.value(v.text());
      break;
    case json::Value::Type::Array:
      w.begin_array();
      for (const auto& item : v.items())
        write_json(w, item);
      w.end_array();
      break;
    case json::Value::Type::Object:
      w.begin_object();
      for (const auto& [k, item] : v.members()) {
        w.key(k);
        write_json(w, item);
      }
      w.end_object();
      break;
  }
}

std::string to_json_text(const json::Value& v) {
  JsonWriter w;
  write_json(w, v);
  return std::move(w).str();
}

}  // namespace sandboxio
