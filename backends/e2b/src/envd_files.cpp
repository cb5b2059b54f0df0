// e2b:// files: GET and POST /files on envd for content, the filesystem RPCs for the rest.
//   write_file: POST /files?path=FILE (multipart, the content uncopied) -> Done
//   read_file:  GET /files?path=FILE -> Done(bytes)
//   list_files: filesystem.Filesystem/ListDir (depth 1) -> Done(entries)
//   remove_file: filesystem.Filesystem/Stat (exists?) -> filesystem.Filesystem/Remove -> Done
#include "machine.hpp"
#include "sandboxio/codec/json_writer.hpp"

namespace sandboxio::e2b::detail {

OpId E2bMachine::submit_write_file(std::string file, Bytes data, Instant now) {
  const OpId id = open(Operation::WriteFile, now, file);
  meter_in(id, data.size());
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  http::Request req = envd_request("POST", "/files?path=" + percent_encode(file, "/"), kEnvdPort);
  req.headers.push_back({"Content-Type", "application/octet-stream"});
  req.body = std::move(data);
  send(id, envd_origin(kEnvdPort), std::move(req), [this, id, file](Result<Reply> r, Instant t) {
    if (!alive(id)) return;
    if (!r) return void(fail(id, r.problem(), t));
    if (r.value().status == 200) return void(complete(id, std::monostate{}, t));
    fail(id, files_problem(file, r.value()), t);
  });
  return id;
}

OpId E2bMachine::submit_read_file(std::string file, Instant now) {
  const OpId id = open(Operation::ReadFile, now, file);
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  const ConnId conn =
      send(id, envd_origin(kEnvdPort),
           envd_request("GET", "/files?path=" + percent_encode(file, "/"), kEnvdPort),
           [this, id, file](Result<Reply> r, Instant t) {
             if (!alive(id)) return;
             if (!r) return void(fail(id, r.problem(), t));
             if (r.value().status == 200) return void(complete(id, std::move(r.value().body), t));
             fail(id, files_problem(file, r.value()), t);
           });
  http_.find(conn)->body_limit = kReadFileLimit;
  return id;
}

OpId E2bMachine::submit_list_files(std::string dir, Instant now) {
  const OpId id = open(Operation::ListFiles, now, dir);
  if (!alive(id)) return id;
  if (auto p = file_checks(dir, now)) return fail(id, std::move(*p), now);
  JsonWriter w;
  w.begin_object().key("path").value(dir).key("depth").value(1).end_object();
  rpc(id, "filesystem.Filesystem/ListDir", std::move(w).str(),
      [this, id, dir](Result<Reply> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return void(fail(id, r.problem(), t));
        if (r.value().status != 200) return void(fail(id, rpc_file_problem(dir, r.value()), t));
        auto doc = json::parse(r.value().body);
        if (!doc) return void(fail(id, doc.problem(), t));
        std::vector<FileInfo> files;
        if (const json::Value* entries = doc.value().find("entries")) {
          for (const json::Value& e : entries->items())
            files.push_back(file_info(e));
        }
        complete(id, std::move(files), t);
      });
  return id;
}

OpId E2bMachine::submit_remove_file(std::string file, Instant now) {
  const OpId id = open(Operation::RemoveFile, now, file);
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  JsonWriter w;
  w.begin_object().key("path").value(file).end_object();
  rpc(id, "filesystem.Filesystem/Remove", std::move(w).str(),
      [this, id, file](Result<Reply> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return void(fail(id, r.problem(), t));
        if (r.value().status != 200) return void(fail(id, rpc_file_problem(file, r.value()), t));
        complete(id, std::monostate{}, t);
      });
  return id;
}

Problem E2bMachine::files_problem(const std::string& file, const Reply& r) const {
  const std::string msg = r.message();
  if (r.status == 502) return gone_problem();
  if (r.status == 404) return missing_file(file);
  if (msg.find("is a directory") != std::string::npos)
    return Problem{errc::IsADirectory, "\"" + file + "\" is a directory", {}};
  if (msg.find("not a directory") != std::string::npos)
    return Problem{errc::NotADirectory, "a parent of \"" + file + "\" is not a directory", {}};
  if (r.status == 401 || r.status == 403 || msg.find("ermission denied") != std::string::npos)
    return Problem{errc::FilePermissionDenied, "\"" + file + "\": " + msg, {}};
  return Problem{errc::FilesystemError,
                 "envd answered " + std::to_string(r.status) + " for \"" + file + "\": " + msg,
                 {}};
}

Problem E2bMachine::rpc_file_problem(const std::string& file, const Reply& r) const {
  const std::string code = connect_code(r);
  const std::string msg = r.message();
  if (r.status == 502) return gone_problem();
  if (code == "not_found") return missing_file(file);
  if (msg.find("not a directory") != std::string::npos)
    return Problem{errc::NotADirectory, "\"" + file + "\" is not a directory", {}};
  if (code == "permission_denied")
    return Problem{errc::FilePermissionDenied, "\"" + file + "\": " + msg, {}};
  return Problem{errc::FilesystemError,
                 "envd answered " + (code.empty() ? std::to_string(r.status) : code) + " for \"" +
                     file + "\": " + msg,
                 {}};
}

std::optional<Problem> E2bMachine::file_checks(const std::string& file, Instant now) const {
  if (auto p = need_sandbox(now)) return p;
  return backend::check_path(file);
}

}  // namespace sandboxio::e2b::detail
