// JSON reading: a small owned document tree parsed by simdjson, for the protocol messages the
// machines read (Docker's responses and events, E2B's envelopes, MCP requests). Bounded: the
// text size and the nesting depth are limited, and every failure is a coded Problem.
//
//   auto doc = sandboxio::json::parse(R"({"Id":"abc","Warnings":[]})");
//   if (!doc) return doc.problem();                       // SBX_E1801 with the reason
//   std::string_view id = doc.value().string_at("Id").value_or("");
//   if (const auto* w = doc.value().find("Warnings"); w && w->is_array()) w->items().size();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sandboxio/result.hpp"

namespace sandboxio::json {

class Value {
 public:
  enum class Type : std::uint8_t { Null, Bool, Number, String, Array, Object };
  using Member = std::pair<std::string, Value>;

  Value() = default;
  static Value boolean(bool b);
  static Value number(double d, std::optional<std::int64_t> exact);
  static Value string(std::string s);
  static Value array(std::vector<Value> items);
  static Value object(std::vector<Member> members);

  [[nodiscard]] Type type() const noexcept { return type_; }
  [[nodiscard]] bool is_null() const noexcept { return type_ == Type::Null; }
  [[nodiscard]] bool is_object() const noexcept { return type_ == Type::Object; }
  [[nodiscard]] bool is_array() const noexcept { return type_ == Type::Array; }
  [[nodiscard]] bool is_string() const noexcept { return type_ == Type::String; }

  /// The text of a string (empty for other types).
  [[nodiscard]] const std::string& text() const& noexcept { return text_; }
  /// An integral number (a JSON number with no fraction that fits in 64 bits).
  [[nodiscard]] std::optional<std::int64_t> integer() const noexcept;
  [[nodiscard]] std::optional<double> real() const noexcept;
  [[nodiscard]] std::optional<bool> boolean_value() const noexcept;
  /// Array elements (empty for other types).
  [[nodiscard]] const std::vector<Value>& items() const& noexcept { return items_; }
  /// Object members in document order (empty for other types).
  [[nodiscard]] const std::vector<Member>& members() const& noexcept { return members_; }

  /// The first member with this key, or null when absent or not an object.
  [[nodiscard]] const Value* find(std::string_view key) const noexcept;
  [[nodiscard]] std::optional<std::string_view> string_at(std::string_view key) const noexcept;
  [[nodiscard]] std::optional<std::int64_t> int_at(std::string_view key) const noexcept;
  [[nodiscard]] std::optional<bool> bool_at(std::string_view key) const noexcept;

 private:
  Type type_ = Type::Null;
  bool flag_ = false;
  double real_ = 0;
  std::optional<std::int64_t> int_{};
  std::string text_{};
  std::vector<Value> items_{};
  std::vector<Member> members_{};
};

struct ParseLimits {
  std::size_t max_bytes = std::size_t{16} << 20;
  std::size_t max_depth = 64;
};

/// Parses one JSON text. Bad JSON, too large or too deep: SBX_E1801 RemoteProtocolViolation
/// (SBX_E1803 MessageTooLarge for the size), naming what was wrong.
[[nodiscard]] Result<Value> parse(std::string_view text, ParseLimits limits = {});

}  // namespace sandboxio::json
