#include <atomic>

#include "sandboxio/fake.hpp"
#include "world_impl.hpp"

namespace sandboxio::fake {
namespace {

// The name registry lives as long as the process and is never destroyed: Worlds held in
// static storage elsewhere may be destroyed after any function-local static of this file.
std::mutex& registry_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::weak_ptr<World>>& worlds() {
  static auto* w = new std::map<std::string, std::weak_ptr<World>>;
  return *w;
}

}  // namespace

World::World(std::string name, Profile profile)
    : name_(std::move(name)), impl_(std::make_unique<Impl>()) {
  impl_->profile = profile;
}

World::~World() {
  if (replica_) return;  // registered nowhere
  std::lock_guard lock(registry_mutex());
  auto it = worlds().find(name_);
  if (it != worlds().end() && it->second.expired()) worlds().erase(it);
}

std::shared_ptr<World> World::create(Profile profile) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string name = "world" + std::to_string(++counter);
  std::shared_ptr<World> world(new World(name, profile));
  std::lock_guard lock(registry_mutex());
  worlds()[name] = world;
  return world;
}

std::shared_ptr<World> World::default_world() {
  static std::shared_ptr<World> world = [] {
    std::shared_ptr<World> w(new World("", Profile{}));
    std::lock_guard lock(registry_mutex());
    worlds()[""] = w;
    return w;
  }();
  return world;
}

std::shared_ptr<World> World::replica(std::string name, std::uint64_t next) {
  std::shared_ptr<World> world(new World(std::move(name), Profile{}));
  world->impl_->next_sandbox = next;
  world->replica_ = true;
  return world;
}

std::shared_ptr<World> World::find(const std::string& name) {
  if (name.empty()) return default_world();
  std::lock_guard lock(registry_mutex());
  auto it = worlds().find(name);
  return it == worlds().end() ? nullptr : it->second.lock();
}

Profile World::profile() const {
  std::lock_guard lock(impl_->mu);
  return impl_->profile;
}

void World::set_profile(Profile profile) {
  std::lock_guard lock(impl_->mu);
  impl_->profile = profile;
}

void World::on(std::vector<std::string> argv, Response response) {
  on_match([argv = std::move(argv)](const std::vector<std::string>& a) { return a == argv; },
           std::move(response));
}

void World::on_match(std::function<bool(const std::vector<std::string>&)> match,
                     Response response) {
  std::lock_guard lock(impl_->mu);
  impl_->rules.push_back({std::move(match), std::move(response)});
}

void World::on_code(std::string needle, Response response) {
  std::lock_guard lock(impl_->mu);
  impl_->code_rules.emplace_back(std::move(needle), std::move(response));
}

std::vector<Call> World::calls() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->calls.begin(), impl_->calls.end()};
}

std::vector<std::string> World::live_sandboxes() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [id, sb] : impl_->sandboxes) {
    if (!sb->gone) out.push_back(id);
  }
  return out;
}

std::size_t World::running_processes() const {
  std::lock_guard lock(impl_->mu);
  std::size_t n = 0;
  for (const auto& [id, sb] : impl_->sandboxes) {
    if (sb->gone) continue;
    for (const auto& p : sb->processes)
      n += p.alive_at(sb->observed) ? 1 : 0;
  }
  return n;
}

void World::Impl::locked(const std::function<void(Impl&)>& f) {
  std::lock_guard lock(mu);
  f(*this);
}

}  // namespace sandboxio::fake
