#include "sandboxio/registry.hpp"

#include "sandboxio/machine.hpp"

#include <algorithm>

namespace sandboxio {

Result<void> BackendRegistry::add(BackendEntry entry) {
  auto parsed = parse_dsn(entry.scheme + "://");
  if (!parsed || parsed.value().scheme != entry.scheme) {
    return Problem{errc::ConfigurationError, "\"" + entry.scheme + "\" is not a valid DSN scheme",
                   "Register a lowercase scheme such as \"mybox\"."};
  }
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const BackendEntry& e) { return e.scheme == entry.scheme; });
  if (it != entries_.end()) {
    *it = std::move(entry);
  } else {
    entries_.push_back(std::move(entry));
  }
  return {};
}

const BackendEntry* BackendRegistry::find(std::string_view scheme) const noexcept {
  for (const BackendEntry& e : entries_) {
    if (e.scheme == scheme) return &e;
  }
  return nullptr;
}

std::vector<std::string> BackendRegistry::schemes() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const BackendEntry& e : entries_)
    out.push_back(e.scheme);
  std::sort(out.begin(), out.end());
  return out;
}

Result<const BackendEntry*> BackendRegistry::resolve(const Dsn& dsn) const {
  const BackendEntry* entry = find(dsn.scheme);
  if (entry == nullptr) {
    std::string known;
    for (const std::string& s : schemes()) {
      if (!known.empty()) known += ", ";
      known += s + "://";
    }
    return Problem{errc::BackendNotFound,
                   "no backend for \"" + dsn.scheme +
                       "://\"; known schemes: " + (known.empty() ? std::string("none") : known),
                   "Use one of: " + (known.empty() ? std::string("(none registered)") : known) +
                       ", or register your own with sandboxio::registry().add()."};
  }
  if (!entry->factory) {
    return Problem{errc::BackendNotInstalled,
                   "the " + dsn.scheme + ":// backend is not built into this sandboxio",
                   entry->enable_hint.empty() ? std::string() : entry->enable_hint};
  }
  return entry;
}

Result<std::unique_ptr<Machine>> BackendEntry::make(const Dsn& dsn) const {
  if (!factory) {
    return Problem{errc::BackendNotInstalled,
                   "the " + dsn.scheme + ":// backend is not built into this sandboxio",
                   enable_hint};
  }
  auto made = factory(dsn);
  if (!made) return made.problem();
  if (!made.value()) {
    return Problem{errc::ApiMisuse, "the " + dsn.scheme + ":// factory returned no machine",
                   "A MachineFactory returns a machine or a Problem, never a null pointer."};
  }
  return guard_admission(std::move(made).value());
}

}  // namespace sandboxio
