#include "sandboxio/errors.hpp"

#include <algorithm>
#include <array>

#include "sandboxio/result.hpp"

namespace sandboxio {
namespace {

// Where an error's page is: SANDBOXIO_ERROR_URL_BASE + "SBX_E1234" + SANDBOXIO_ERROR_URL_SUFFIX,
// a build setting (CMake cache variables of the same names). The default points at the page in
// the repository, docs/errors/SBX_E1234.md; a build that publishes the docs as a site sets the
// site's address.
#ifndef SANDBOXIO_ERROR_URL_BASE
#define SANDBOXIO_ERROR_URL_BASE "docs/errors/"
#endif
#ifndef SANDBOXIO_ERROR_URL_SUFFIX
#define SANDBOXIO_ERROR_URL_SUFFIX ".md"
#endif

constexpr std::array kCatalog{
#define SBX_ERROR(code, name, message, hint) \
  ErrorInfo{(code), "SBX_E" #code,           \
            #name,  message,                 \
            hint,   SANDBOXIO_ERROR_URL_BASE "SBX_E" #code SANDBOXIO_ERROR_URL_SUFFIX},
#include "sandboxio/error_catalog.inc"
#undef SBX_ERROR
};

constexpr bool catalog_is_sorted_and_unique() {
  for (std::size_t i = 1; i < kCatalog.size(); ++i) {
    if (kCatalog[i - 1].code >= kCatalog[i].code) return false;
  }
  return true;
}
static_assert(catalog_is_sorted_and_unique(),
              "error_catalog.inc must list codes in increasing order");

class SandboxCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sandboxio"; }
  std::string message(int code) const override {
    const ErrorInfo* info = find_error(code);
    if (info == nullptr) return "unknown sandboxio error " + std::to_string(code);
    return std::string(info->id) + " " + std::string(info->name) + ": " +
           std::string(info->message);
  }
};

std::string compose(errc code, const std::string& detail, const std::string& hint) {
  const ErrorInfo& info = error_info(code);
  std::string text;
  text.reserve(info.id.size() + info.name.size() + detail.size() + hint.size() + info.url.size() +
               16);
  text.append(info.id).append(" ").append(info.name).append(": ");
  text.append(detail.empty() ? std::string(info.message) : detail);
  text.append(" Hint: ").append(hint);
  text.append(" (").append(info.url).append(")");
  return text;
}

}  // namespace

std::span<const ErrorInfo> error_catalog() noexcept {
  return kCatalog;
}

const ErrorInfo* find_error(int code) noexcept {
  auto it = std::lower_bound(kCatalog.begin(), kCatalog.end(), code,
                             [](const ErrorInfo& e, int c) { return e.code < c; });
  if (it == kCatalog.end() || it->code != code) return nullptr;
  return &*it;
}

const ErrorInfo& error_info(errc code) noexcept {
  const ErrorInfo* info = find_error(static_cast<int>(code));
  // Every errc enumerator comes from the catalog, so this only fails for a forged value.
  return info != nullptr ? *info : kCatalog.front();
}

const std::error_category& sandbox_category() noexcept {
  // A function-local static, not a namespace-scope object: the engine has no global constructors.
  static const SandboxCategory category;
  return category;
}

std::error_code make_error_code(errc code) noexcept {
  return {static_cast<int>(code), sandbox_category()};
}

Error::Error(errc code, std::string detail, std::string hint, std::exception_ptr cause)
    : std::system_error(make_error_code(code), detail),
      detail_(std::move(detail)),
      hint_(hint.empty() ? std::string(error_info(code).hint) : std::move(hint)),
      text_(compose(code, detail_, hint_)),
      cause_(std::move(cause)) {}

std::string_view Problem::effective_hint() const noexcept {
  return hint.empty() ? error_info(code).hint : std::string_view(hint);
}

std::string Problem::describe() const {
  const ErrorInfo& info = error_info(code);
  std::string text(info.id);
  text.append(" ").append(info.name).append(": ");
  text.append(detail.empty() ? std::string(info.message) : detail);
  text.append(" Hint: ").append(effective_hint());
  return text;
}

}  // namespace sandboxio
