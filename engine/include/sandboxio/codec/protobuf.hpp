// A protocol-buffers encoder for messages written by hand (OTLP spans; later gRPC): fields
// appended in order to a byte string. Proto3 rules: a scalar equal to its default is omitted.
// No reflection, no descriptors, no I/O.
//
//   sandboxio::protobuf::Writer kv;
//   kv.string(1, "service.name");
//   sandboxio::protobuf::Writer any;
//   any.string(1, "agent");
//   kv.message(2, any);                        // a nested message, length-delimited
//   std::string wire = std::move(kv).bytes();
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sandboxio::protobuf {

class Writer {
 public:
  /// uint32, uint64, int32 (non-negative), enum, bool: a varint; 0 omitted.
  void varint(std::uint32_t field, std::uint64_t value) {
    if (value == 0) return;
    tag(field, 0);
    raw_varint(value);
  }
  /// int64 and negative int32: two's complement as a varint (ten bytes when negative).
  void int64(std::uint32_t field, std::int64_t value) {
    varint(field, static_cast<std::uint64_t>(value));
  }
  void boolean(std::uint32_t field, bool value) { varint(field, value ? 1 : 0); }
  void fixed64(std::uint32_t field, std::uint64_t value) {
    if (value == 0) return;
    tag(field, 1);
    little_endian(value, 8);
  }
  void fixed32(std::uint32_t field, std::uint32_t value) {
    if (value == 0) return;
    tag(field, 5);
    little_endian(value, 4);
  }
  void float64(std::uint32_t field, double value) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    fixed64(field, bits);
  }
  /// string and bytes; empty omitted.
  void string(std::uint32_t field, std::string_view value) {
    if (value.empty()) return;
    length_delimited(field, value);
  }
  /// A oneof member or a field with presence: written even when it holds the default.
  void varint_present(std::uint32_t field, std::uint64_t value) {
    tag(field, 0);
    raw_varint(value);
  }
  void string_present(std::uint32_t field, std::string_view value) {
    length_delimited(field, value);
  }
  /// A nested message, written even when empty (its presence can mean something).
  void message(std::uint32_t field, const Writer& inner) { length_delimited(field, inner.out_); }

  [[nodiscard]] const std::string& view() const& noexcept { return out_; }
  [[nodiscard]] std::string bytes() && { return std::move(out_); }

 private:
  void tag(std::uint32_t field, std::uint32_t wire_type) {
    raw_varint((static_cast<std::uint64_t>(field) << 3) | wire_type);
  }
  void raw_varint(std::uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void little_endian(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      out_.push_back(static_cast<char>(v & 0xff));
      v >>= 8;
    }
  }
  void length_delimited(std::uint32_t field, std::string_view value) {
    tag(field, 2);
    raw_varint(value.size());
    out_.append(value);
  }

  std::string out_{};
};

}  // namespace sandboxio::protobuf
