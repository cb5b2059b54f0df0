// A protocol-buffers encoder and decoder for messages written by hand (OTLP spans, flight
// recorder traces; later gRPC): fields appended in order to a byte string, and read back one
// at a time. Proto3 rules: a scalar equal to its default is omitted. No reflection, no
// descriptors, no I/O.
//
//   sandboxio::protobuf::Writer kv;
//   kv.string(1, "service.name");
//   sandboxio::protobuf::Writer any;
//   any.string(1, "agent");
//   kv.message(2, any);                        // a nested message, length-delimited
//   std::string wire = std::move(kv).bytes();
//
//   sandboxio::protobuf::Reader r(wire);
//   sandboxio::protobuf::Field f;
//   while (r.next(f)) if (f.number == 1) name = f.bytes;
//   if (r.failed()) ...;                       // truncated or malformed: stop, say so
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
  /// The tag and length of a length-delimited field whose `n` bytes the caller writes next,
  /// elsewhere (a large payload goes out without being copied in here).
  void length_prefix(std::uint32_t field, std::size_t n) {
    tag(field, 2);
    raw_varint(n);
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

/// One field as read off the wire: a varint or fixed value in `value`, a length-delimited one
/// (string, bytes, nested message, packed list) as a view into the reader's input in `bytes`.
struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  std::uint64_t value = 0;
  std::string_view bytes{};
};

/// Reads the fields of one message in order. Never reads past its input and never allocates:
/// a truncated field, a varint longer than ten bytes, a field number 0, a length beyond the
/// input, or a group (wire types 3 and 4, obsolete) stop it with failed() set.
class Reader {
 public:
  explicit Reader(std::string_view in) noexcept : in_(in) {}

  /// The next field, or false at the end of the input or on malformed input (see failed()).
  bool next(Field& f) noexcept {
    if (failed_ || pos_ >= in_.size()) return false;
    std::uint64_t tag = 0;
    if (!raw_varint(tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF) return fail();
    f.number = static_cast<std::uint32_t>(tag >> 3);
    f.wire_type = static_cast<std::uint32_t>(tag & 7);
    f.value = 0;
    f.bytes = {};
    switch (f.wire_type) {
      case 0:
        return raw_varint(f.value) || fail();
      case 1:
        return little_endian(f.value, 8) || fail();
      case 5:
        return little_endian(f.value, 4) || fail();
      case 2: {
        std::uint64_t n = 0;
        if (!raw_varint(n) || n > in_.size() - pos_) return fail();
        f.bytes = in_.substr(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return true;
      }
      default:
        return fail();
    }
  }
  [[nodiscard]] bool failed() const noexcept { return failed_; }
  /// How far it has read: the offset of the next field.
  [[nodiscard]] std::size_t position() const noexcept { return pos_; }

 private:
  bool fail() noexcept {
    failed_ = true;
    return false;
  }
  bool raw_varint(std::uint64_t& v) noexcept {
    v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= in_.size()) return false;
      const auto b = static_cast<unsigned char>(in_[pos_++]);
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool little_endian(std::uint64_t& v, int bytes) noexcept {
    if (in_.size() - pos_ < static_cast<std::size_t>(bytes)) return false;
    v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace sandboxio::protobuf
