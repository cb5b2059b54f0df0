// fake:// configuration: the DSN's options (tier, declared capabilities, virtual delays) and
// the registry entry. Outside the machine's objects, which the purity gate checks.
#include <cstdlib>
#include <sstream>

#include "machine.hpp"
#include "sandboxio/backend/identity.hpp"
#include "world_impl.hpp"

namespace sandboxio::fake {
namespace {

const OptionSpec kOptions[] = {
    {"tier", OptionType::String, "isolation tier to declare: unknown, container, gvisor, microvm"},
    {"caps", OptionType::String, "comma-separated capabilities to declare"},
    {"create_delay", OptionType::Duration,
     "virtual time that create() takes (the sandbox exists halfway)"},
    {"teardown_delay", OptionType::Duration,
     "virtual time that tearing down a half-made sandbox takes"},
};

}  // namespace

Result<std::unique_ptr<Machine>> make_machine(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  std::shared_ptr<World> world;
  if (backend::ambient_replaying()) {
    // A replay runs in a world of its own, numbered on from where the recorded one was.
    const std::string next = backend::ambient("fake.next", [] { return std::string("1"); });
    world = World::replica(dsn.target, std::strtoull(next.c_str(), nullptr, 10));
  } else {
    world = World::find(dsn.target);
  }
  if (!world) {
    return Problem{
        errc::InvalidDsn, "no fake world named \"" + dsn.target + "\"",
        "Use fake:// for the default world, or World::create()->dsn() for a private one."};
  }
  (void)backend::ambient("fake.next", [&] {
    std::uint64_t next = 1;
    world->impl().locked([&](World::Impl& impl) { next = impl.next_sandbox; });
    return std::to_string(next);
  });
  Profile profile = world->profile();
  {
    // What the world declared when the session was recorded: a replay's replica has the
    // default profile, and takes the recorded one from here.
    const std::string caps = backend::ambient("fake.caps", [&] {
      std::string list;
      for (Capability c : kAllCapabilities)
        if (profile.capabilities.contains(c))
          list += std::string(list.empty() ? "" : ",") + std::string(to_string(c));
      return list;
    });
    const std::string tier =
        backend::ambient("fake.tier", [&] { return std::string(profile.tier.name()); });
    if (backend::ambient_replaying()) {
      CapabilitySet declared;
      std::stringstream names(caps);
      for (std::string name; std::getline(names, name, ',');)
        if (auto c = parse_capability(name)) declared.insert(*c);
      profile.capabilities = declared;
      profile.tier = IsolationTier::parse(tier).value_or(profile.tier);
    }
  }
  const TypedOptions& o = typed.value();
  if (o.has("tier")) {
    auto tier = IsolationTier::parse(o.string("tier"));
    if (!tier)
      return Problem{errc::InvalidOption, "tier \"" + o.string("tier") + "\" is not a tier",
                     "Use unknown, container, gvisor or microvm."};
    profile.tier = *tier;
  }
  if (o.has("caps")) {
    CapabilitySet caps;
    std::stringstream list(o.string("caps"));
    std::string name;
    while (std::getline(list, name, ',')) {
      if (name.empty()) continue;
      auto c = parse_capability(name);
      if (!c)
        return Problem{errc::InvalidOption, "\"" + name + "\" is not a capability",
                       "See docs/reference/capabilities.md."};
      caps.insert(*c);
    }
    profile.capabilities = caps;
  }
  const auto delay =
      std::chrono::duration_cast<std::chrono::nanoseconds>(o.duration("create_delay"));
  const auto teardown =
      std::chrono::duration_cast<std::chrono::nanoseconds>(o.duration("teardown_delay"));
  return std::unique_ptr<Machine>(
      std::make_unique<impl::FakeMachine>(std::move(world), profile, delay, teardown));
}

BackendEntry backend_entry() {
  return BackendEntry{"fake",
                      "deterministic in-process sandbox for offline tests",
                      &make_machine,
                      {},
                      std::vector<OptionSpec>(std::begin(kOptions), std::end(kOptions))};
}

}  // namespace sandboxio::fake
