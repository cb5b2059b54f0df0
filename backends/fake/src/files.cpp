// fake:// files: the sandbox's in-memory filesystem, with the path rules every backend shares.
#include "machine.hpp"

namespace sandboxio::fake::impl {

OpId FakeMachine::submit_write_file(std::string path, Bytes data, Instant now) {
  const OpId id = open(Operation::WriteFile, now, path);
  meter_in(id, data.size());
  const auto found = begin_file_op(id, Operation::WriteFile, path, now);
  if (!found) return id;
  const std::string& norm = *found;
  const detail::Node* n = sandbox_->fs.get(norm);
  if (n != nullptr && n->dir)
    return fail(id, Problem{errc::IsADirectory, path + " is a directory", {}}, now);
  // Like the archive APIs: missing parent directories are created.
  const std::size_t slash = norm.rfind('/');
  if (slash > 0) {
    const std::string parent = norm.substr(0, slash);
    const detail::Node* pn = sandbox_->fs.get(parent);
    if (pn != nullptr && !pn->dir)
      return fail(id, Problem{errc::NotADirectory, parent + " is not a directory", {}}, now);
    sandbox_->fs.make_dirs(parent);
  }
  sandbox_->fs.put_file(norm, std::move(data));
  complete(id, std::monostate{}, now);
  return id;
}

OpId FakeMachine::submit_read_file(std::string path, Instant now) {
  const OpId id = open(Operation::ReadFile, now, path);
  const auto found = begin_file_op(id, Operation::ReadFile, path, now);
  if (!found) return id;
  const std::string& norm = *found;
  const detail::Node* n = sandbox_->fs.get(norm);
  if (n == nullptr) return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
  if (n->dir) return fail(id, Problem{errc::IsADirectory, path + " is a directory", {}}, now);
  complete(id, Bytes(n->data), now);
  return id;
}

OpId FakeMachine::submit_list_files(std::string path, Instant now) {
  const OpId id = open(Operation::ListFiles, now, path);
  const auto found = begin_file_op(id, Operation::ListFiles, path, now);
  if (!found) return id;
  const std::string& norm = *found;
  const detail::Node* n = sandbox_->fs.get(norm);
  if (n == nullptr) return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
  if (!n->dir) return fail(id, Problem{errc::NotADirectory, path + " is not a directory", {}}, now);
  std::vector<FileInfo> out;
  for (const std::string& child : sandbox_->fs.children(norm)) {
    const detail::Node* c = sandbox_->fs.get(child);
    out.push_back(FileInfo{child,
                           child.substr(child.rfind('/') + 1),
                           c->dir ? FileType::Directory : FileType::File,
                           c->data.size(),
                           c->mode,
                           {},
                           {}});
  }
  complete(id, std::move(out), now);
  return id;
}

OpId FakeMachine::submit_remove_file(std::string path, Instant now) {
  const OpId id = open(Operation::RemoveFile, now, path);
  const auto found = begin_file_op(id, Operation::RemoveFile, path, now);
  if (!found) return id;
  const std::string& norm = *found;
  if (!sandbox_->fs.remove(norm, true)) {
    return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
  }
  complete(id, std::monostate{}, now);
  return id;
}

std::optional<Problem> FakeMachine::file_checks(const std::string& path, Instant now) {
  if (auto p = need_sandbox(now)) return p;
  if (!profile_.capabilities.contains(Capability::Filesystem))
    return unsupported(Capability::Filesystem, "file operations");
  return backend::check_path(path);
}

// The common start of a file operation: admission, checks, the recorded call. Returns the
// normalised path, or nullopt when the operation already failed (its events are queued).
std::optional<std::string> FakeMachine::begin_file_op(OpId id, Operation operation,
                                                      const std::string& path, Instant now) {
  if (ops_.count(id) == 0) return std::nullopt;  // refused: too many operations in flight
  if (auto p = file_checks(path, now); p) {
    fail(id, std::move(*p), now);
    return std::nullopt;
  }
  std::string norm = detail::Vfs::normalise("/", path);
  Call call = base_call(operation);
  call.path = norm;
  record_call(std::move(call));
  return norm;
}

}  // namespace sandboxio::fake::impl
