// JSON reading with simdjson's DOM parser, copied into an owned tree with bounded depth.
#include "sandboxio/codec/json.hpp"

#include <simdjson.h>

namespace sandboxio::json {
namespace {

Problem bad(std::string detail) {
  return Problem{errc::RemoteProtocolViolation, "invalid JSON from the backend: " + detail, {}};
}

Result<Value> convert(simdjson::dom::element e, std::size_t depth, const ParseLimits& limits) {
  if (depth > limits.max_depth) {
    return bad("nested deeper than " + std::to_string(limits.max_depth) + " levels");
  }
  switch (e.type()) {
    case simdjson::dom::element_type::NULL_VALUE:
      return Value{};
    case simdjson::dom::element_type::BOOL:
      return Value::boolean(e.get_bool().value_unsafe());
    case simdjson::dom::element_type::INT64: {
      const std::int64_t i = e.get_int64().value_unsafe();
      return Value::number(static_cast<double>(i), i);
    }
    case simdjson::dom::element_type::UINT64: {
      const std::uint64_t u = e.get_uint64().value_unsafe();
      return Value::number(static_cast<double>(u), std::nullopt);
    }
    case simdjson::dom::element_type::DOUBLE:
      return Value::number(e.get_double().value_unsafe(), std::nullopt);
    case simdjson::dom::element_type::STRING:
      return Value::string(std::string(e.get_string().value_unsafe()));
    case simdjson::dom::element_type::ARRAY: {
      std::vector<Value> items;
      simdjson::dom::array array;
      if (e.get_array().get(array)) return bad("unreadable array");
      for (simdjson::dom::element item : array) {
        auto v = convert(item, depth + 1, limits);
        if (!v) return v.problem();
        items.push_back(std::move(v).value());
      }
      return Value::array(std::move(items));
    }
    case simdjson::dom::element_type::OBJECT: {
      std::vector<Value::Member> members;
      simdjson::dom::object object;
      if (e.get_object().get(object)) return bad("unreadable object");
      for (simdjson::dom::key_value_pair kv : object) {
        auto v = convert(kv.value, depth + 1, limits);
        if (!v) return v.problem();
        members.emplace_back(std::string(kv.key), std::move(v).value());
      }
      return Value::object(std::move(members));
    }
  }
  return bad("unknown element type");
}

}  // namespace

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::Bool;
  v.flag_ = b;
  return v;
}

Value Value::number(double d, std::optional<std::int64_t> exact) {
  Value v;
  v.type_ = Type::Number;
  v.real_ = d;
  v.int_ = exact;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::String;
  v.text_ = std::move(s);
  return v;
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v;
  v.type_ = Type::Object;
  v.members_ = std::move(members);
  return v;
}

std::optional<std::int64_t> Value::integer() const noexcept {
  if (type_ != Type::Number) return std::nullopt;
  return int_;
}

std::optional<double> Value::real() const noexcept {
  if (type_ != Type::Number) return std::nullopt;
  return real_;
}

std::optional<bool> Value::boolean_value() const noexcept {
  if (type_ != Type::Bool) return std::nullopt;
  return flag_;
}

const Value* Value::find(std::string_view key) const noexcept {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<std::string_view> Value::string_at(std::string_view key) const noexcept {
  const Value* v = find(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return std::string_view(v->text_);
}

std::optional<std::int64_t> Value::int_at(std::string_view key) const noexcept {
  const Value* v = find(key);
  return v == nullptr ? std::nullopt : v->integer();
}

std::optional<bool> Value::bool_at(std::string_view key) const noexcept {
  const Value* v = find(key);
  return v == nullptr ? std::nullopt : v->boolean_value();
}

Result<Value> parse(std::string_view text, ParseLimits limits) {
  if (text.size() > limits.max_bytes) {
    return Problem{errc::MessageTooLarge,
                   "a JSON message of " + std::to_string(text.size()) + " bytes exceeds the " +
                       std::to_string(limits.max_bytes) + "-byte limit",
                   {}};
  }
  simdjson::dom::parser parser(limits.max_bytes);
  const simdjson::padded_string padded(text);
  simdjson::dom::element root;
  if (auto error = parser.parse(padded).get(root)) {
    return bad(simdjson::error_message(error));
  }
  return convert(root, 0, limits);
}

}  // namespace sandboxio::json
