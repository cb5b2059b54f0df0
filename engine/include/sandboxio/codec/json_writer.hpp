// JsonWriter: builds one JSON text with correct escaping into a std::string.
//
//   sandboxio::JsonWriter w;
//   w.begin_object().key("cmd").value("echo \"hi\"").key("n").value(3).end_object();
//   w.str();   // {"cmd":"echo \"hi\"","n":3}
//
// Strings are written as valid UTF-8 whatever the input: control characters are escaped and
// each byte of an invalid UTF-8 sequence becomes U+FFFD. The writer does not check that calls
// are balanced; callers build fixed shapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sandboxio {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(double number);
  JsonWriter& value(bool flag);
  JsonWriter& null();

  [[nodiscard]] const std::string& str() const& noexcept { return out_; }
  [[nodiscard]] std::string str() && noexcept { return std::move(out_); }

 private:
  void separate();
  std::string out_{};
  bool need_comma_ = false;
};

/// Appends `text` to `out` as a quoted JSON string (the escaping JsonWriter uses).
void append_json_string(std::string& out, std::string_view text);

namespace json {
class Value;
}
/// Writes a parsed JSON value back as JSON (numbers as integers when they are).
void write_json(JsonWriter& w, const json::Value& v);
/// A parsed JSON value as compact JSON text.
[[nodiscard]] std::string to_json_text(const json::Value& v);

}  // namespace sandboxio
