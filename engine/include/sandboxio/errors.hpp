// Errors are data: every SBX code, its message, hint and docs URL come from error_catalog.inc.
//
//   try { auto dsn = sandboxio::parse_dsn(text).value(); }
//   catch (const sandboxio::Error& e) { std::cerr << e.what() << '\n' << e.hint(); }
//   if (ec == sandboxio::errc::SandboxGone) { ... }   // std::error_code comparisons work too
#pragma once

#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace sandboxio {

/// Every SBX error code; the enumerator's value is the number in SBX_Ennnn.
enum class errc : int {
#define SBX_ERROR(code, name, message, hint) name = (code),
#include "sandboxio/error_catalog.inc"
#undef SBX_ERROR
};

/// One row of the catalog. All views refer to static storage.
struct ErrorInfo {
  int code{};
  std::string_view id{};  // "SBX_E1001"
  std::string_view name{};
  std::string_view message{};
  std::string_view hint{};
  std::string_view url{};
};

/// The whole catalog, ordered by code.
[[nodiscard]] std::span<const ErrorInfo> error_catalog() noexcept;
/// The catalog row for a code, or nullptr when the number is not an SBX code.
[[nodiscard]] const ErrorInfo* find_error(int code) noexcept;
/// The catalog row for a code; every errc value has one.
[[nodiscard]] const ErrorInfo& error_info(errc code) noexcept;

/// The std::error_category of SBX codes; its name() is "sandboxio".
[[nodiscard]] const std::error_category& sandbox_category() noexcept;
[[nodiscard]] std::error_code make_error_code(errc code) noexcept;

/// The one exception type of sandboxio. It carries the SBX code (as a std::error_code), a
/// message specific to this failure, the hint (the catalog's unless a more specific one was
/// given) and, optionally, the exception that caused it.
class Error : public std::system_error {
 public:
  Error(errc code, std::string detail, std::string hint = {}, std::exception_ptr cause = nullptr);

  [[nodiscard]] errc sbx_code() const noexcept { return static_cast<errc>(code().value()); }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  [[nodiscard]] const std::string& hint() const noexcept { return hint_; }
  [[nodiscard]] std::string_view url() const noexcept { return error_info(sbx_code()).url; }
  [[nodiscard]] const std::exception_ptr& cause() const noexcept { return cause_; }
  /// "SBX_E1001 InvalidDsn: <detail> Hint: <hint> (<url>)"
  [[nodiscard]] const char* what() const noexcept override { return text_.c_str(); }

 private:
  std::string detail_{};
  std::string hint_{};
  std::string text_{};
  std::exception_ptr cause_{};
};

}  // namespace sandboxio

template <>
struct std::is_error_code_enum<sandboxio::errc> : std::true_type {};
