// ustar + PAX, written and read in 512-byte blocks.
#include "sandboxio/codec/tar.hpp"

#include <algorithm>
#include <cstring>

namespace sandboxio::tar {
namespace {

constexpr std::size_t kBlock = 512;

void put_octal(char* field, std::size_t width, std::uint64_t value) {
  // width-1 octal digits, zero padded, then NUL.
  std::memset(field, '0', width - 1);
  field[width - 1] = '\0';
  for (std::size_t i = width - 1; i > 0 && value != 0; --i) {
    field[i - 1] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
}

bool fits_octal(std::uint64_t value, std::size_t width) {
  return width - 1 >= 22 || value < (std::uint64_t{1} << (3 * (width - 1)));
}

void put_string(char* field, std::size_t width, std::string_view s) {
  if (!s.empty()) std::memcpy(field, s.data(), std::min(width, s.size()));
}

std::uint32_t checksum(const char* block) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    sum += in_field ? ' ' : static_cast<unsigned char>(block[i]);
  }
  return sum;
}

std::string pax_record(std::string_view key, std::string_view value) {
  // "LEN key=value\n" where LEN counts the whole record including its own digits.
  const std::size_t body = 1 + key.size() + 1 + value.size() + 1;
  std::size_t len = body + 1;
  while (std::to_string(len).size() + body != len)
    ++len;
  std::string out = std::to_string(len);
  out += ' ';
  out += key;
  out += '=';
  out += value;
  out += '\n';
  return out;
}

char type_flag(FileType t) {
  switch (t) {
    case FileType::Directory:
      return '5';
    case FileType::Symlink:
      return '2';
    case FileType::File:
    case FileType::Other:
      break;
  }
  return '0';
}

std::string raw_header(std::string_view name, char flag, std::uint64_t size, const Entry& e,
                       std::string_view link) {
  std::string block(kBlock, '\0');
  char* b = block.data();
  put_string(b + 0, 100, name);
  put_octal(b + 100, 8, e.mode & 07777);
  put_octal(b + 108, 8, fits_octal(e.uid, 8) ? e.uid : 0);
  put_octal(b + 116, 8, fits_octal(e.gid, 8) ? e.gid : 0);
  put_octal(b + 124, 12, size);
  put_octal(b + 136, 12, static_cast<std::uint64_t>(std::max<std::int64_t>(e.mtime, 0)));
  b[156] = flag;
  put_string(b + 157, 100, link);
  std::memcpy(b + 257, "ustar", 6);
  std::memcpy(b + 263, "00", 2);
  const std::uint32_t sum = checksum(b);
  put_octal(b + 148, 7, sum);  // six digits and a NUL
  b[155] = ' ';
  return block;
}

std::optional<std::uint64_t> parse_number(const char* field, std::size_t width) {
  const auto first = static_cast<unsigned char>(field[0]);
  if (first & 0x80) {                       // base-256 (GNU): big-endian, first byte's high bit set
    if (first & 0x40) return std::nullopt;  // negative
    std::uint64_t v = first & 0x3f;
    for (std::size_t i = 1; i < width; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | static_cast<unsigned char>(field[i]);
    }
    return v;
  }
  std::uint64_t v = 0;
  std::size_t i = 0;
  while (i < width && field[i] == ' ')
    ++i;
  bool any = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + static_cast<std::uint64_t>(field[i] - '0');
    any = true;
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  if (!any) return 0;
  return v;
}

std::string field_string(const char* field, std::size_t width) {
  const void* nul = std::memchr(field, '\0', width);
  return std::string(field, nul ? static_cast<const char*>(nul) - field : width);
}

}  // namespace

Result<std::string> header(const Entry& e) {
  if (e.name.empty() || e.name.find('\0') != std::string::npos ||
      e.link_target.find('\0') != std::string::npos) {
    return Problem{errc::InvalidPath, "a tar entry name is empty or contains a NUL byte", {}};
  }
  const std::uint64_t size = e.type == FileType::File ? e.size : 0;
  std::string pax;
  if (e.name.size() > 100) pax += pax_record("path", e.name);
  if (e.link_target.size() > 100) pax += pax_record("linkpath", e.link_target);
  if (!fits_octal(size, 12)) pax += pax_record("size", std::to_string(size));
  std::string out;
  if (!pax.empty()) {
    Entry x;
    x.mode = 0644;
    out += raw_header("PaxHeader", 'x', pax.size(), x, {});
    out += pax;
    out += padding(pax.size());
  }
  out += raw_header(std::string_view(e.name).substr(0, 100), type_flag(e.type),
                    fits_octal(size, 12) ? size : 0, e,
                    std::string_view(e.link_target).substr(0, 100));
  return out;
}

std::string padding(std::uint64_t content_size) {
  return std::string((kBlock - content_size % kBlock) % kBlock, '\0');
}

std::string end() {
  return std::string(2 * kBlock, '\0');
}

void Reader::fail(std::string detail) {
  if (!error_) error_ = Problem{errc::RemoteProtocolViolation, "bad tar archive: " + detail, {}};
}

bool Reader::feed(std::string_view data, const OnEntry& on_entry, const OnData& on_data) {
  while (!data.empty() && !error_) {
    if (finished_) return true;  // bytes after the end marker are ignored (padding)
    if (remaining_ > 0) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
      if (content_ == Content::File) {
        if (on_data) on_data(data.substr(0, n));
      } else {
        meta_.append(data.substr(0, n));
      }
      remaining_ -= n;
      data.remove_prefix(n);
      if (remaining_ == 0 && content_ != Content::File) {
        // Apply the collected metadata to the next entry.
        if (content_ == Content::LongName) {
          next_name_ = field_string(meta_.data(), meta_.size());
        } else if (content_ == Content::LongLink) {
          next_link_ = field_string(meta_.data(), meta_.size());
        } else if (content_ == Content::Skip) {
          // a global PAX header: nothing sandboxio uses
        } else {
          std::string_view rest = meta_;
          while (!rest.empty()) {
            const std::size_t sp = rest.find(' ');
            std::size_t len = 0;
            for (std::size_t i = 0; i < sp && i < rest.size(); ++i) {
              const char c = rest[i];
              if (c < '0' || c > '9' || len > rest.size()) {
                len = 0;
                break;
              }
              len = len * 10 + static_cast<std::size_t>(c - '0');
            }
            if (sp == std::string_view::npos || len <= sp + 1 || len > rest.size() ||
                rest[len - 1] != '\n') {
              fail("malformed PAX record");
              return false;
            }
            const std::string_view rec = rest.substr(sp + 1, len - sp - 2);
            rest.remove_prefix(len);
            const std::size_t eq = rec.find('=');
            if (eq == std::string_view::npos) {
              fail("PAX record without '='");
              return false;
            }
            const std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
            if (key == "path") next_name_ = std::string(value);
            if (key == "linkpath") next_link_ = std::string(value);
            if (key == "size") {
              std::uint64_t v = 0;
              for (char c : value) {
                if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) {
                  fail("bad PAX size");
                  return false;
                }
                v = v * 10 + static_cast<std::uint64_t>(c - '0');
              }
              next_size_ = v;
            }
          }
        }
        meta_.clear();
        content_ = Content::File;
      }
      continue;
    }
    if (pad_ > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(pad_, data.size()));
      pad_ -= n;
      data.remove_prefix(n);
      continue;
    }
    const std::size_t need = kBlock - block_.size();
    const std::size_t n = std::min(need, data.size());
    block_.append(data.substr(0, n));
    data.remove_prefix(n);
    if (block_.size() == kBlock) {
      on_block(on_entry);
      block_.clear();
    }
  }
  return !error_;
}

void Reader::on_block(const OnEntry& on_entry) {
  const char* b = block_.data();
  if (std::all_of(block_.begin(), block_.end(), [](char c) { return c == '\0'; })) {
    if (zero_block_seen_) finished_ = true;
    zero_block_seen_ = true;
    return;
  }
  zero_block_seen_ = false;
  const auto stored = parse_number(b + 148, 8);
  if (!stored || *stored != checksum(b)) {
    // Some writers sum signed chars; accept that too.
    std::int64_t signed_sum = 0;
    for (std::size_t i = 0; i < kBlock; ++i)
      signed_sum += (i >= 148 && i < 156) ? ' ' : static_cast<signed char>(b[i]);
    if (!stored || static_cast<std::int64_t>(*stored) != signed_sum) {
      fail("header checksum mismatch");
      return;
    }
  }
  auto size = parse_number(b + 124, 12);
  if (!size) {
    fail("bad size field");
    return;
  }
  const char flag = b[156];
  const std::uint64_t padded = *size + (kBlock - *size % kBlock) % kBlock;
  if (flag == 'x' || flag == 'g' || flag == 'L' || flag == 'K') {
    if (*size > limits_.max_pax_bytes) {
      fail("an extended header of " + std::to_string(*size) + " bytes is too large");
      return;
    }
    content_ = flag == 'x'   ? Content::Pax
               : flag == 'L' ? Content::LongName
               : flag == 'K' ? Content::LongLink
                             : Content::Pax;
    remaining_ = *size;
    pad_ = padded - *size;
    if (flag == 'g') content_ = Content::Skip;  // global headers: read and drop
    if (remaining_ == 0) content_ = Content::File;
    return;
  }
  Entry e;
  e.name = field_string(b, 100);
  if (std::memcmp(b + 257, "ustar", 5) == 0) {
    const std::string prefix = field_string(b + 345, 155);
    if (!prefix.empty()) e.name = prefix + "/" + e.name;
  }
  if (next_name_) e.name = std::move(*next_name_);
  e.link_target = next_link_ ? std::move(*next_link_) : field_string(b + 157, 100);
  if (next_size_) size = next_size_;
  next_name_.reset();
  next_link_.reset();
  next_size_.reset();
  e.mode = static_cast<std::uint32_t>(parse_number(b + 100, 8).value_or(0) & 07777);
  e.uid = static_cast<std::uint32_t>(parse_number(b + 108, 8).value_or(0));
  e.gid = static_cast<std::uint32_t>(parse_number(b + 116, 8).value_or(0));
  e.mtime = static_cast<std::int64_t>(parse_number(b + 136, 12).value_or(0) & 0x7fffffffffff);
  switch (flag) {
    case '0':
    case '\0':
    case '7':
      e.type = FileType::File;
      break;
    case '5':
      e.type = FileType::Directory;
      break;
    case '2':
      e.type = FileType::Symlink;
      break;
    default:
      e.type = FileType::Other;
      break;
  }
  // Only regular files (and unknown types, whose content is skipped) carry content.
  const bool has_content = e.type == FileType::File || e.type == FileType::Other;
  e.size = has_content ? *size : 0;
  if (has_content && flag != '1') {
    remaining_ = *size;
    pad_ = (kBlock - *size % kBlock) % kBlock;
  }
  content_ = Content::File;
  if (on_entry) on_entry(e);
}

void Reader::feed_eof() {
  if (finished_ || error_) return;
  if (remaining_ > 0 || pad_ > 0 || !block_.empty() || content_ != Content::File) {
    fail("the archive ends inside an entry");
    return;
  }
  finished_ = true;  // ended between entries, without the end marker: accepted
}

}  // namespace sandboxio::tar
