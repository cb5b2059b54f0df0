// modal:// files, as Modal's SDKs move them: an exec of modal-sandbox-fs-tools inside the
// sandbox with one JSON argument ({"ReadFile":{"path":P}}, WriteFile, ListFiles, Remove). A
// file's bytes go to its stdin (TaskExecStdinWriteStream) or come from its stdout; a failure is
// a non-zero exit with {"error_kind": ..., "message": ...} on stderr, mapped here to SBX_E17xx.
#include "machine.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/json_writer.hpp"

namespace sandboxio::modal::detail {
namespace {

std::string fs_command(std::string_view op, const std::string& path,
                       std::optional<std::pair<std::string_view, bool>> flag = std::nullopt) {
  JsonWriter w;
  w.begin_object().key(op).begin_object().key("path").value(path);
  if (flag) w.key(flag->first).value(flag->second);
  w.end_object().end_object();
  return std::move(w).str();
}

FileInfo file_info(const json::Value& e) {
  FileInfo f;
  f.path = std::string(e.string_at("path").value_or(""));
  f.name = std::string(e.string_at("name").value_or(""));
  const std::string_view type = e.string_at("type").value_or("file");
  f.type = type == "directory" ? FileType::Directory
           : type == "symlink" ? FileType::Symlink
                               : FileType::File;
  f.size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.int_at("size").value_or(0)));
  f.mode = static_cast<std::uint32_t>(e.int_at("mode").value_or(0)) & 07777;
  if (auto m = e.int_at("modified_time")) f.mtime_unix = *m;
  f.link_target = std::string(e.string_at("symlink_target").value_or(""));
  return f;
}

}  // namespace

OpId ModalMachine::submit_write_file(std::string path, Bytes data, Instant now) {
  const std::string arg = fs_command("WriteFile", path);
  return file_op(Operation::WriteFile, std::move(path), "WriteFile", arg, now, std::move(data));
}

OpId ModalMachine::submit_read_file(std::string path, Instant now) {
  const std::string arg = fs_command("ReadFile", path);
  return file_op(Operation::ReadFile, std::move(path), "ReadFile", arg, now);
}

OpId ModalMachine::submit_list_files(std::string path, Instant now) {
  const std::string arg = fs_command("ListFiles", path);
  return file_op(Operation::ListFiles, std::move(path), "ListFiles", arg, now);
}

OpId ModalMachine::submit_remove_file(std::string path, Instant now) {
  const std::string arg =
      fs_command("Remove", path, std::pair{std::string_view("recursive"), true});
  return file_op(Operation::RemoveFile, std::move(path), "Remove", arg, now);
}

OpId ModalMachine::file_op(Operation operation, std::string path, std::string fs_op,
                           std::string json_arg, Instant now, Bytes data) {
  const OpId id = open(operation, now);
  meter_in(id, data.size());
  if (!alive(id)) return id;
  if (auto p = backend::check_path(path)) return fail(id, std::move(*p), now);
  if (auto p = need_sandbox()) return fail(id, std::move(*p), now);
  Op& op = *find_op(id);
  op.kind = OpState::Kind::File;
  op.path = std::move(path);
  op.fs_op = std::move(fs_op);
  op.stdin_data = std::move(data);
  start_exec(id, {std::string(kFsTools), std::move(json_arg)}, Env{}, {}, std::nullopt, now);
  return id;
}

void ModalMachine::file_done(OpId id, Instant now) {
  Op& op = *find_op(id);
  grpc_.cancel_op(id);
  if (!op.exit || op.exit->code != 0) return void(fail(id, fs_problem(op), now));
  if (op.fs_op == "ReadFile") return complete(id, std::move(op.fs_out), now);
  if (op.fs_op == "ListFiles") {
    auto doc = json::parse(op.fs_out);
    if (!doc || !doc.value().is_array())
      return void(fail(id,
                       Problem{errc::RemoteProtocolViolation,
                               "modal-sandbox-fs-tools listed " + op.path +
                                   " in something that is not a JSON array",
                               {}},
                       now));
    std::vector<FileInfo> files;
    for (const auto& e : doc.value().items())
      files.push_back(file_info(e));
    return complete(id, std::move(files), now);
  }
  complete(id, std::monostate{}, now);
}

// fs-tools' error kinds, as the SDKs map them, in our codes.
Problem ModalMachine::fs_problem(const Op& op) const {
  std::string kind, message;
  if (auto doc = json::parse(op.fs_err); doc && doc.value().is_object()) {
    kind = std::string(doc.value().string_at("error_kind").value_or(""));
    message = std::string(doc.value().string_at("message").value_or(""));
  }
  const std::string detail =
      op.fs_op + " " + op.path + ": " +
      (kind.empty() ? "modal-sandbox-fs-tools exited with " +
                          std::to_string(op.exit && op.exit->code ? *op.exit->code : -1)
                    : kind + (message.empty() ? "" : " (" + message + ")"));
  if (kind == "NotFound") return Problem{errc::FileNotFound, detail, {}};
  if (kind == "IsDirectory") return Problem{errc::IsADirectory, detail, {}};
  if (kind == "NotDirectory" || kind == "IsFile") return Problem{errc::NotADirectory, detail, {}};
  if (kind == "PermissionDenied") return Problem{errc::FilePermissionDenied, detail, {}};
  if (kind == "FileTooLarge") return Problem{errc::MessageTooLarge, detail, {}};
  return Problem{errc::FilesystemError, detail, {}};
}

}  // namespace sandboxio::modal::detail
