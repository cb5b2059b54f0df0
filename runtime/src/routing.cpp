// The routing file, read with yaml-cpp. Strict: unknown keys, wrong types and dangling class
// names are errors with the line and column where they are.
#include "sandboxio/routing.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "sandboxio/dsn.hpp"
#include "sandboxio/duration.hpp"

namespace sandboxio {
namespace {

constexpr std::size_t kMaxRoutingBytes = 1 << 20;

struct Fail {
  Problem problem;
};

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const {
    const YAML::Mark m = at.Mark();
    fail_at(m.line, m.column, what);
  }
  [[noreturn]] void fail_at(int line, int column, const std::string& what) const {
    std::string where = source_;
    if (line >= 0) where += ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1);
    throw Fail{Problem{errc::InvalidRoutingFile, where + ": " + what,
                       "Fix the file at that place; `sandboxio routing check FILE` validates it "
                       "(see docs/how-to/routing.md)."}};
  }

  std::string scalar(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) fail(n, what + " must be a single value");
    return n.Scalar();
  }

  void only_keys(const YAML::Node& map, std::initializer_list<std::string_view> keys,
                 const std::string& what) const {
    if (!map.IsMap()) fail(map, what + " must be a mapping");
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      bool known = false;
      for (auto allowed : keys)
        known = known || k == allowed;
      if (!known) {
        std::string list;
        for (auto allowed : keys)
          list += (list.empty() ? "" : ", ") + std::string(allowed);
        fail(kv.first, "unknown key \"" + k + "\" in " + what + " (known: " + list + ")");
      }
    }
  }

  std::uint64_t bytes(const YAML::Node& n) const {
    const std::string text = scalar(n, "memory");
    std::size_t i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
      ++i;
    if (i == 0 || i > 15) fail(n, "memory \"" + text + "\" is not a size such as 512MiB");
    const std::uint64_t v = std::stoull(text.substr(0, i));
    const std::string unit = text.substr(i);
    std::uint64_t mult = 1;
    if (unit.empty() || unit == "B") {
      mult = 1;
    } else if (unit == "KiB" || unit == "K" || unit == "k") {
      mult = 1ULL << 10;
    } else if (unit == "MiB" || unit == "M" || unit == "m") {
      mult = 1ULL << 20;
    } else if (unit == "GiB" || unit == "G" || unit == "g") {
      mult = 1ULL << 30;
    } else {
      fail(n, "memory unit \"" + unit + "\" is not one of B, KiB, MiB, GiB");
    }
    return v * mult;
  }

  IsolationClass klass(const std::string& name, const YAML::Node& n) const {
    only_keys(n, {"backend", "min_tier", "network", "resources", "lifetime"},
              "class \"" + name + "\"");
    IsolationClass c;
    c.name = name;
    if (!n["backend"]) fail(n, "class \"" + name + "\" has no backend");
    c.backend = scalar(n["backend"], "backend");
    if (auto d = parse_dsn(c.backend); !d)
      fail(n["backend"], "backend \"" + c.backend + "\" is not a DSN: " + d.problem().detail);
    if (const auto t = n["min_tier"]) {
      const std::string s = scalar(t, "min_tier");
      if (s == "unknown") {
        c.min_tier = IsolationTier::Unknown;
      } else if (s == "container") {
        c.min_tier = IsolationTier::Container;
      } else if (s == "gvisor") {
        c.min_tier = IsolationTier::Gvisor;
      } else if (s == "microvm") {
        c.min_tier = IsolationTier::Microvm;
      } else {
        fail(t, "min_tier \"" + s + "\" is not unknown, container, gvisor or microvm");
      }
    }
    if (const auto net = n["network"]) {
      if (net.IsScalar()) {
        if (net.Scalar() == "learn") {
          c.network = NetworkPolicy::learning();
        } else if (net.Scalar() != "deny") {
          fail(net, "network must be \"deny\", \"learn\" or a list of hosts");
        }
      } else if (net.IsSequence()) {
        std::vector<std::string> hosts;
        for (const auto& h : net)
          hosts.push_back(scalar(h, "an allowed host"));
        if (hosts.empty()) fail(net, "an empty allow list: write \"deny\" instead");
        c.network = NetworkPolicy::allowing(std::move(hosts));
      } else {
        fail(net, "network must be \"deny\", \"learn\" or a list of hosts");
      }
    }
    if (const auto r = n["resources"]) {
      only_keys(r, {"cpus", "memory", "pids"}, "resources");
      if (const auto cpus = r["cpus"]) {
        const std::string s = scalar(cpus, "cpus");
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
          fail(cpus, "cpus \"" + s + "\" is not a positive number");
        c.resources.cpus = v;
      }
      if (const auto m = r["memory"]) c.resources.memory_bytes = bytes(m);
      if (const auto p = r["pids"]) {
        const std::string s = scalar(p, "pids");
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
          fail(p, "pids \"" + s + "\" is not a positive integer");
        c.resources.pids = static_cast<std::uint32_t>(std::stoul(s));
      }
      if (auto v = c.resources.validate(); !v) fail(r, v.problem().detail);
    }
    if (const auto l = n["lifetime"]) {
      auto d = parse_duration(scalar(l, "lifetime"));
      if (!d) fail(l, "lifetime: " + d.problem().detail);
      c.lifetime = std::chrono::duration_cast<std::chrono::seconds>(d.value());
      if (c.lifetime < std::chrono::seconds(1) || c.lifetime > kMaxLifetime)
        fail(l, "lifetime must be between 1s and 24h");
    }
    return c;
  }

 private:
  std::string source_;
};

}  // namespace

CreateOptions IsolationClass::create_options() const {
  CreateOptions o;
  o.lifetime = lifetime;
  o.network = network;
  o.resources = resources;
  if (min_tier && min_tier->value() != IsolationTier::Unknown) o.require_isolation = min_tier;
  return o;
}

Result<RoutingTable> RoutingTable::parse(std::string_view yaml, std::string_view source) {
  const Reader rd{std::string(source)};
  try {
    if (yaml.size() > kMaxRoutingBytes) rd.fail_at(-1, -1, "the file is larger than 1 MiB");
    YAML::Node root;
    try {
      root = YAML::Load(std::string(yaml));
    } catch (const YAML::Exception& e) {
      rd.fail_at(e.mark.line, e.mark.column, e.msg);
    }
    if (!root.IsMap())
      rd.fail_at(0, 0, "the file must be a mapping with default_class and classes");
    rd.only_keys(root, {"default_class", "classes", "routes"}, "the top level");
    if (!root["default_class"]) rd.fail_at(0, 0, "default_class is mandatory");
    const std::string def = rd.scalar(root["default_class"], "default_class");
    const YAML::Node classes = root["classes"];
    if (!classes || !classes.IsMap() || classes.size() == 0)
      rd.fail(classes ? classes : root, "classes must be a mapping with at least one class");
    RoutingTable t;
    for (const auto& kv : classes) {
      const std::string name = kv.first.Scalar();
      for (const auto& existing : t.classes_) {
        if (existing.name == name) rd.fail(kv.first, "class \"" + name + "\" is defined twice");
      }
      t.classes_.push_back(rd.klass(name, kv.second));
    }
    auto index_of = [&](const std::string& name) -> std::optional<std::size_t> {
      for (std::size_t i = 0; i < t.classes_.size(); ++i) {
        if (t.classes_[i].name == name) return i;
      }
      return std::nullopt;
    };
    const auto d = index_of(def);
    if (!d) rd.fail(root["default_class"], "default_class \"" + def + "\" is not a class");
    t.default_ = *d;
    if (const auto routes = root["routes"]) {
      if (!routes.IsSequence()) rd.fail(routes, "routes must be a list");
      for (const auto& r : routes) {
        rd.only_keys(r, {"tool", "tenant", "class"}, "a route");
        Route route;
        if (r["tool"]) route.tool = rd.scalar(r["tool"], "tool");
        if (r["tenant"]) route.tenant = rd.scalar(r["tenant"], "tenant");
        if (!r["class"]) rd.fail(r, "a route has no class");
        route.class_name = rd.scalar(r["class"], "class");
        if (!index_of(route.class_name))
          rd.fail(r["class"], "class \"" + route.class_name + "\" is not defined");
        t.routes_.push_back(std::move(route));
      }
    }
    return t;
  } catch (const Fail& f) {
    return f.problem;
  } catch (const YAML::Exception& e) {
    return Problem{errc::InvalidRoutingFile,
                   std::string(source) + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": " + e.msg,
                   {}};
  }
}

RoutingTable RoutingTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(errc::InvalidRoutingFile, "cannot read the routing file " + path,
                "Check the path given to --routing.");
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto t = parse(text.str(), path);
  if (!t) t.problem().raise();
  return std::move(t).value();
}

const IsolationClass& RoutingTable::route_for(std::string_view tool,
                                              std::string_view tenant) const {
  for (const auto& r : routes_) {
    if ((r.tool == "*" || r.tool == tool) && (r.tenant == "*" || r.tenant == tenant)) {
      for (const auto& c : classes_) {
        if (c.name == r.class_name) return c;
      }
    }
  }
  return classes_.at(default_);
}

}  // namespace sandboxio
