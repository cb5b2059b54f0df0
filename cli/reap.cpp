// sandboxio reap: the sandboxes sandboxio manages, stopped ones too; a dry run unless --kill.
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::cli {

int reap(const ReapArgs& a) {
  std::map<std::string, std::string> labels;
  for (const auto& kv : a.labels) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "sandboxio: --label wants KEY=VALUE, not \"" << kv << "\"\n";
      return 2;
    }
    labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::optional<std::chrono::milliseconds> older_than;
  if (!a.older_than.empty()) {
    auto d = parse_duration(a.older_than);
    if (!d) {
      std::cerr << "sandboxio: --older-than: " << d.problem().detail << "\n";
      return 2;
    }
    older_than = d.value();
  }
  std::vector<std::string> backends = a.backends;
  if (backends.empty()) {
    backends = {"docker://"};
    if (const char* key = std::getenv("E2B_API_KEY"); key && *key) backends.push_back("e2b://");
  }
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  struct Row {
    std::string dsn;
    ManagedSandbox m;
    std::string outcome;
  };
  std::vector<Row> rows;
  std::vector<std::string> problems;
  std::vector<std::string> stale;  // listed by the backend, gone when asked to remove them
  bool failed = false;
  for (const auto& dsn : backends) {
    std::vector<ManagedSandbox> found;
    try {
      found = sync::list_managed(dsn, labels);
    } catch (const Error& e) {
      problems.push_back(dsn + ": " + e.what());
      failed = true;
      continue;
    }
    for (auto& m : found) {
      if (older_than && now - m.created_unix <
                            std::chrono::duration_cast<std::chrono::seconds>(*older_than).count())
        continue;
      Row r{dsn, std::move(m), a.kill ? "removed" : "would remove (dry run)"};
      if (a.kill) {
        try {
          sync::remove_managed(dsn, r.m.id);
        } catch (const Error& e) {
          if (e.code() == errc::SandboxNotFound) {
            // Listed, yet not there: a stale entry in the engine's listing (dockerd 20.10
            // keeps one when a removal races its own restore after a restart). Nothing is left.
            stale.push_back(r.m.id);
            continue;
          }
          r.outcome = std::string("failed: ") + e.what();
          failed = true;
        }
      }
      rows.push_back(std::move(r));
    }
  }
  // --check: finding any is a failure of its own (exit 3), after --kill removed them.
  const int verdict = failed ? 1 : (a.check && !rows.empty()) ? 3 : 0;
  if (a.json) {
    JsonWriter w;
    w.begin_object().key("dry_run").value(!a.kill).key("sandboxes").begin_array();
    for (const auto& r : rows) {
      w.begin_object().key("backend").value(r.m.backend).key("id").value(r.m.id);
      w.key("state").value(to_string(r.m.state)).key("owner").value(r.m.owner);
      w.key("created_unix").value(r.m.created_unix);
      w.key("lifetime_s").value(static_cast<std::int64_t>(r.m.lifetime.count()));
      w.key("expired").value(r.m.expired_at(now)).key("outcome").value(r.outcome);
      w.end_object();
    }
    w.end_array().key("errors").begin_array();
    for (const auto& p : problems)
      w.value(p);
    w.end_array().end_object();
    std::cout << w.str() << "\n";
    return verdict;
  }
  const Style out = style_for(stdout);
  for (const auto& p : problems)
    std::cerr << out.bad("error") << ": " << p << "\n";
  for (const auto& id : stale)
    std::cerr << "listed but already gone (a stale entry of the engine's listing): " << id << "\n";
  if (rows.empty()) {
    std::cout << "nothing to reap\n";
    return verdict;
  }
  for (const auto& r : rows) {
    const std::string id = r.m.backend == "docker" ? r.m.id.substr(0, 12) : r.m.id;
    std::cout << r.m.backend << " " << id << "  " << to_string(r.m.state) << "  owner "
              << (r.m.owner.empty() ? "?" : r.m.owner) << "  age "
              << (r.m.created_unix ? std::to_string(now - r.m.created_unix) + "s" : "?")
              << (r.m.expired_at(now) ? out.bad("  past its lifetime") : "") << "  "
              << (a.kill ? out.ok(r.outcome) : out.dim(r.outcome)) << "\n";
  }
  if (!a.kill) std::cout << out.dim("dry run: add --kill to remove them") << "\n";
  if (a.check) std::cerr << out.bad("leak check") << ": " << rows.size() << " sandbox(es) left\n";
  return verdict;
}

}  // namespace sandboxio::cli
