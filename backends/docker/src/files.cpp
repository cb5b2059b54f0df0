// docker:// files. Through the archive API (tar over HTTP), except under tmpfs mounts and
// the runtime's own mounts (/dev, /proc, /sys), which the archive API cannot see: there, and
// for removal, through an internal exec (exec.cpp's run_internal).
//   write_file: PUT /containers/{id}/archive?path=/ (one entry, the content uncopied) -> Done
//   read_file:  GET .../archive?path=FILE: stat header (not a directory) -> tar body -> Done
//   list_files: GET .../archive?path=DIR: stat header (a directory) -> first-level entries
//   remove_file: exec `rm -rf` (exit 44: missing)
#include <algorithm>

#include "machine.hpp"

namespace sandboxio::docker::detail {

OpId DockerMachine::submit_write_file(std::string file, Bytes data, Instant now) {
  const OpId id = open(Operation::WriteFile, now, file);
  meter_in(id, data.size());
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  if (file == "/") return fail(id, Problem{errc::IsADirectory, "\"/\" is a directory", {}}, now);
  if (via_agent()) {
    agent_write(id, std::move(file), std::move(data), now);
    return id;
  }
  if (on_tmpfs(file)) {
    // The archive API cannot see tmpfs mounts: write through an exec.
    run_internal(id, {"sh", "-c", R"(mkdir -p -- "${1%/*}" && cat > "$1")", "sh", file},
                 std::move(data), [this, id, file](Result<ExecDone> r, Instant t) {
                   if (!alive(id)) return;
                   if (!r) return void(fail(id, r.problem(), t));
                   if (r.value().exit_code != 0)
                     return void(fail(id, exec_file_problem(file, r.value()), t));
                   complete(id, std::monostate{}, t);
                 });
    return id;
  }
  // One archive whose entry carries the whole path, extracted at "/": the daemon makes the
  // missing parent directories. The content goes to the link as it is, never copied.
  tar::Entry e;
  e.name = file.substr(1);
  e.size = data.size();
  e.mode = 0644;
  auto problem =
      put_archive(id, {}, e, std::move(data), [this, id, file](Result<Reply> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return void(fail(id, r.problem(), t));
        const int s = r.value().status;
        if (s == 200) return void(complete(id, std::monostate{}, t));
        fail(id, archive_problem(file, r.value()), t);
      });
  if (problem) fail(id, std::move(*problem), now);
  return id;
}

std::optional<Problem> DockerMachine::put_archive(OpId op, const std::vector<tar::Entry>& dirs,
                                                  const tar::Entry& file, Bytes content, Then then,
                                                  std::string_view at) {
  Bytes heads;
  for (const auto& d : dirs) {
    auto h = tar::header(d);
    if (!h) return h.problem();
    heads += h.value();
  }
  auto h = tar::header(file);
  if (!h) return h.problem();
  heads += h.value();
  const std::string tail = tar::padding(content.size()) + tar::end();
  http::Request req;
  req.method = "PUT";
  req.target = path("/containers/" + container_ + "/archive?path=" + percent_encode(at));
  req.headers.push_back({"Content-Type", "application/x-tar"});
  auto wire = http::write_request_head(req, "docker", heads.size() + content.size() + tail.size());
  if (!wire) return wire.problem();
  std::vector<Bytes> pieces;
  pieces.push_back(std::move(wire).value() + heads);
  pieces.push_back(std::move(content));
  pieces.push_back(tail);
  send_wire(op, "PUT", req.target, std::move(pieces), std::move(then));
  return std::nullopt;
}

OpId DockerMachine::submit_read_file(std::string file, Instant now) {
  const OpId id = open(Operation::ReadFile, now, file);
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  if (via_agent()) {
    agent::PathRequest request;
    request.path = file;
    agent_file(id, AgentCall::Kind::Read, agent::Type::ReadFile, request, now);
    return id;
  }
  if (on_tmpfs(file)) {
    run_internal(
        id,
        {"sh", "-c", R"([ -d "$1" ] && { echo "is a directory" >&2; exit 21; }; exec cat -- "$1")",
         "sh", file},
        {},
        [this, id, file](Result<ExecDone> r, Instant t) {
          if (!alive(id)) return;
          if (!r) return void(fail(id, r.problem(), t));
          if (r.value().exit_code != 0)
            return void(fail(id, exec_file_problem(file, r.value()), t));
          complete(id, std::move(r.value().out), t);
        },
        kReadFileLimit);
    return id;
  }
  struct ReadState {
    Bytes content{};
    int entries = 0;
  };
  auto state = std::make_shared<ReadState>();
  get_archive(
      id, file, /*directory=*/false,
      [state](const tar::Entry& e) {
        // One allocation for the content (address space only until written: a size that
        // lies costs nothing resident, and the limit below still holds).
        if (++state->entries == 1)
          state->content.reserve(
              static_cast<std::size_t>(std::min<std::uint64_t>(e.size, kReadFileLimit)));
      },
      [state, file](std::string_view data) -> std::optional<Problem> {
        if (state->entries == 1) state->content.append(data);
        if (state->content.size() > kReadFileLimit) {
          return Problem{errc::MessageTooLarge, "\"" + file + "\" is larger than read_file() keeps",
                         "Stream it with run({\"cat\", path}) instead."};
        }
        return std::nullopt;
      },
      [this, id, state](Instant t) { complete(id, std::move(state->content), t); });
  return id;
}

OpId DockerMachine::submit_list_files(std::string dir, Instant now) {
  const OpId id = open(Operation::ListFiles, now, dir);
  if (!alive(id)) return id;
  if (auto p = file_checks(dir, now)) return fail(id, std::move(*p), now);
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  if (via_agent()) {
    agent::PathRequest request;
    request.path = dir;
    agent_file(id, AgentCall::Kind::List, agent::Type::ListDir, request, now);
    return id;
  }
  if (on_tmpfs(dir)) {
    run_internal(id, {"sh", "-c", std::string(kListScript), "sh", dir}, {},
                 [this, id, dir](Result<ExecDone> r, Instant t) {
                   if (!alive(id)) return;
                   if (!r) return void(fail(id, r.problem(), t));
                   if (r.value().exit_code != 0)
                     return void(fail(id, exec_file_problem(dir, r.value()), t));
                   complete(id, parse_exec_listing(dir, r.value().out), t);
                 });
    return id;
  }
  struct ListState {
    std::string root{};
    std::vector<FileInfo> files{};
  };
  auto state = std::make_shared<ListState>();
  get_archive(
      id, dir, /*directory=*/true,
      [state, dir](const tar::Entry& e) {
        std::string name = e.name;
        while (!name.empty() && name.back() == '/')
          name.pop_back();
        if (state->root.empty()) {  // the directory itself comes first
          state->root = name;
          return;
        }
        if (name.size() <= state->root.size() + 1 ||
            name.compare(0, state->root.size() + 1, state->root + "/") != 0)
          return;
        const std::string rest = name.substr(state->root.size() + 1);
        if (rest.find('/') != std::string::npos) return;  // deeper: not listed
        if (state->files.size() >= 100000) return;
        FileInfo f;
        f.name = rest;
        f.path = (dir == "/" ? "" : dir) + "/" + rest;
        f.type = e.type;
        f.size = e.size;
        f.mode = e.mode;
        f.mtime_unix = e.mtime;
        f.link_target = e.link_target;
        state->files.push_back(std::move(f));
      },
      {}, [this, id, state](Instant t) { complete(id, std::move(state->files), t); });
  return id;
}

OpId DockerMachine::submit_remove_file(std::string file, Instant now) {
  const OpId id = open(Operation::RemoveFile, now, file);
  if (!alive(id)) return id;
  if (auto p = file_checks(file, now)) return fail(id, std::move(*p), now);
  if (via_agent()) {
    agent::PathRequest request;
    request.path = file;
    request.flags = agent::PathRequest::kRecursive;
    agent_file(id, AgentCall::Kind::Remove, agent::Type::Remove, request, now);
    return id;
  }
  run_internal(
      id, {"sh", "-c", R"([ -e "$1" ] || [ -L "$1" ] || exit 44; exec rm -rf -- "$1")", "sh", file},
      {}, [this, id, file](Result<ExecDone> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return void(fail(id, r.problem(), t));
        if (r.value().exit_code == 44) return void(fail(id, missing_file(file), t));
        if (r.value().exit_code != 0) return void(fail(id, exec_file_problem(file, r.value()), t));
        complete(id, std::monostate{}, t);
      });
  return id;
}

Problem DockerMachine::archive_problem(const std::string& file, const Reply& r) const {
  const std::string msg = r.message();
  if (r.status == 404) {
    if (msg.find("No such container") != std::string::npos) return gone_problem();
    return missing_file(file);
  }
  if (msg.find("not a directory") != std::string::npos)
    return Problem{errc::NotADirectory, "a parent of \"" + file + "\" is not a directory", {}};
  if (msg.find("read-only") != std::string::npos ||
      msg.find("ermission denied") != std::string::npos)
    return Problem{errc::FilePermissionDenied, "cannot write \"" + file + "\": " + msg,
                   "The root filesystem is read-only: write under a tmpfs= mount."};
  return Problem{errc::FilesystemError, "the archive API refused \"" + file + "\": " + msg, {}};
}

std::optional<Problem> DockerMachine::file_checks(const std::string& file, Instant now) const {
  if (auto p = need_sandbox(now)) return p;
  return backend::check_path(file);
}

// True for a path the archive API cannot see: under a tmpfs= mount, or under the mounts
// the runtime makes in every container (/dev with /dev/shm, /proc, /sys). The daemon would
// read or write the root filesystem's layer beneath them instead, and say it succeeded.
bool DockerMachine::on_tmpfs(const std::string& file) const {
  const auto under = [&file](std::string_view m) {
    return file == m || (file.size() > m.size() && file.compare(0, m.size(), m) == 0 &&
                         (m == "/" || file[m.size()] == '/'));
  };
  for (std::string_view m : {"/dev", "/proc", "/sys"}) {
    if (under(m)) return true;
  }
  for (const auto& m : config_.tmpfs) {
    if (under(m)) return true;
  }
  return false;
}

// GET /containers/{id}/archive for `target`, read as a tar stream as it arrives: the stat
// header must say directory (or not, for a file) before any content is taken; entries and
// content go to the callbacks; `done` runs once the archive ended cleanly. Every failure
// fails the operation with its code.
void DockerMachine::get_archive(OpId id, const std::string& target, bool directory,
                                std::function<void(const tar::Entry&)> on_entry,
                                std::function<std::optional<Problem>(std::string_view)> on_data,
                                std::function<void(Instant)> done) {
  auto reader = std::make_shared<tar::Reader>();
  auto data_problem = std::make_shared<std::optional<Problem>>();
  const ConnId conn = call(
      id, "GET", path("/containers/" + container_ + "/archive?path=" + percent_encode(target, "/")),
      {}, [this, id, target, reader, done = std::move(done)](Result<Reply> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return void(fail(id, r.problem(), t));
        if (r.value().status != 200) return void(fail(id, archive_problem(target, r.value()), t));
        reader->feed_eof();
        if (reader->error()) return void(fail(id, *reader->error(), t));
        done(t);
      });
  backend::Exchange& x = *http_.find(conn);
  x.on_head = [target, directory](const http::ResponseParser& p,
                                  Instant) -> std::optional<Problem> {
    if (p.status() != 200) return std::nullopt;
    const auto stat = path_stat(p);
    if (!stat || (stat->type == FileType::Directory) == directory) return std::nullopt;
    return directory ? Problem{errc::NotADirectory, "\"" + target + "\" is not a directory", {}}
                     : Problem{errc::IsADirectory, "\"" + target + "\" is a directory", {}};
  };
  x.on_body = [reader, data_problem, on_entry = std::move(on_entry), on_data = std::move(on_data)](
                  std::string_view piece, Instant) -> std::optional<Problem> {
    reader->feed(piece, on_entry, [&](std::string_view d) {
      if (on_data && !*data_problem) *data_problem = on_data(d);
    });
    if (reader->error()) return *reader->error();
    return *data_problem;
  };
}

}  // namespace sandboxio::docker::detail
