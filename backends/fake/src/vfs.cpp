#include "shell.hpp"

namespace sandboxio::fake::detail {

Vfs::Vfs() {
  for (const char* d :
       {"/", "/tmp", "/home", "/home/user", "/etc", "/bin", "/usr", "/usr/bin", "/dev"}) {
    nodes_[d] = Node{true, {}, 0755};
  }
  nodes_["/etc/hostname"] = Node{false, "sandbox\n", 0644};
  nodes_["/etc/os-release"] = Node{false, "NAME=\"sandboxio fake\"\nID=fake\n", 0644};
}

std::string Vfs::normalise(const std::string& cwd, const std::string& path) {
  const std::string joined = (!path.empty() && path[0] == '/') ? path : cwd + "/" + path;
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= joined.size()) {
    std::size_t j = joined.find('/', i);
    if (j == std::string::npos) j = joined.size();
    const std::string part = joined.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts)
    out += "/" + p;
  return out.empty() ? "/" : out;
}

const Node* Vfs::get(const std::string& path) const {
  auto it = nodes_.find(path);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool Vfs::parent_is_dir(const std::string& path) const {
  if (path == "/") return true;
  const std::size_t slash = path.rfind('/');
  const std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  const Node* n = get(parent);
  return n != nullptr && n->dir;
}

void Vfs::put_file(const std::string& path, Bytes data, std::uint32_t mode) {
  nodes_[path] = Node{false, std::move(data), mode};
}

void Vfs::make_dir(const std::string& path) {
  nodes_[path] = Node{true, {}, 0755};
}

void Vfs::make_dirs(const std::string& path) {
  std::string current;
  std::size_t i = 1;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    current += "/" + path.substr(i, j - i);
    if (get(current) == nullptr) make_dir(current);
    i = j + 1;
  }
}

bool Vfs::remove(const std::string& path, bool recursive) {
  auto it = nodes_.find(path);
  if (it == nodes_.end() || path == "/") return false;
  if (recursive) {
    const std::string prefix = path + "/";
    for (auto c = nodes_.lower_bound(prefix);
         c != nodes_.end() && c->first.rfind(prefix, 0) == 0;) {
      c = nodes_.erase(c);
    }
  }
  nodes_.erase(path);
  return true;
}

bool Vfs::has_children(const std::string& path) const {
  return !children(path).empty();
}

std::vector<std::string> Vfs::children(const std::string& path) const {
  std::vector<std::string> out;
  const std::string prefix = path == "/" ? "/" : path + "/";
  for (auto it = nodes_.lower_bound(prefix); it != nodes_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    const std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) out.push_back(it->first);
  }
  return out;
}

std::uint64_t Vfs::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [path, node] : nodes_)
    total += node.data.size();
  return total;
}

}  // namespace sandboxio::fake::detail
