// docker:// reaping: list the containers that carry the sandboxio labels, and remove one
// by id (only one that is managed). Neither needs a sandbox of its own.
//   list_managed:   GET /containers/json?all=1&filters={label:[...]} -> Done(managed sandboxes)
//   remove_managed: GET /containers/{id}/json (managed?) -> DELETE ...?force=1 -> Done
#include "machine.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/json_writer.hpp"

namespace sandboxio::docker::detail {

OpId DockerMachine::submit_list_managed(std::map<std::string, std::string> wanted, Instant now) {
  const OpId id = open(Operation::ListManaged, now);
  if (!alive(id)) return id;
  JsonWriter f;
  f.begin_object().key("label").begin_array();
  f.value(std::string(labels::kManaged) + "=true");
  for (const auto& [k, v] : wanted)
    f.value(k + "=" + v);
  f.end_array().end_object();
  call(id, "GET", path("/containers/json?all=1&filters=" + percent_encode(f.str())), {},
       [this, id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         if (r.value().status != 200) return void(fail(id, daemon_error(r.value()), t));
         auto doc = json::parse(r.value().body);
         if (!doc) return void(fail(id, doc.problem(), t));
         std::vector<ManagedSandbox> out;
         for (const auto& c : doc.value().items()) {
           out.push_back(managed_of(c));
         }
         complete(id, std::move(out), t);
       });
  return id;
}

OpId DockerMachine::submit_remove_managed(std::string sandbox_id, Instant now) {
  const OpId id = open(Operation::RemoveManaged, now);
  if (!alive(id)) return id;
  if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
    return fail(id, not_found(sandbox_id), now);
  call(id, "GET", path("/containers/" + sandbox_id + "/json"), {},
       [this, id, sandbox_id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         if (r.value().status == 404) return void(fail(id, not_found(sandbox_id), t));
         auto doc = json::parse(r.value().body);
         if (!doc) return void(fail(id, doc.problem(), t));
         const json::Value* cfg = doc.value().find("Config");
         const json::Value* l = cfg ? cfg->find("Labels") : nullptr;
         if (!l || l->string_at(labels::kManaged) != "true") {
           return void(fail(id,
                            Problem{errc::SandboxNotFound,
                                    "container " + sandbox_id + " is not managed by sandboxio",
                                    "sandboxio removes only what it created."},
                            t));
         }
         call(id, "DELETE", path("/containers/" + sandbox_id + "?force=1&v=1"), {},
              [this, id](Result<Reply> d, Instant t2) {
                if (!alive(id)) return;
                if (!d) return void(fail(id, d.problem(), t2));
                const int s = d.value().status;
                if (s == 204 || s == 200 || s == 404 || s == 409)
                  return void(complete(id, std::monostate{}, t2));
                fail(id, daemon_error(d.value()), t2);
              });
       });
  return id;
}

}  // namespace sandboxio::docker::detail
