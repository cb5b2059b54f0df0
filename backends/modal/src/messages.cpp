// The protobuf messages modal:// sends and reads, by hand on the engine's protobuf codec: the
// subset Modal's SDKs use, with the field numbers of modal@0.11.1 (../shared/modal-protocol).
// Readers skip fields they do not know, as protobuf does, and never read past their input.
#include <cmath>
#include <cstring>

#include "machine.hpp"
#include "sandboxio/codec/protobuf.hpp"

namespace sandboxio::modal::detail::msg {
namespace {

using protobuf::Field;
using protobuf::Reader;
using protobuf::Writer;

void float32(Writer& w, std::uint32_t field, float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  w.fixed32(field, bits);
}

// A StringMap's entries (map<string, string> = repeated {key = 1, value = 2}).
Writer string_map(const Env& env) {
  Writer map;
  for (const auto& var : env.vars()) {
    Writer entry;
    entry.string_present(1, var.name);
    entry.string_present(2, var.value);
    map.message(1, entry);
  }
  return map;
}

// SecretSource{env = 2 StringMap}: how the SDKs hand environment variables over.
Writer env_source(const Env& env) {
  Writer source;
  source.message(2, string_map(env));
  return source;
}

}  // namespace

std::string app_get_or_create(const std::string& app, const std::string& environment) {
  Writer w;
  w.string(1, app);
  w.string(2, environment);
  w.varint(3, 1);  // CREATE_IF_MISSING
  return std::move(w).bytes();
}

std::string environment_get_or_create(const std::string& environment) {
  Writer w;
  w.string(1, environment);
  return std::move(w).bytes();
}

std::string image_get_or_create(const std::string& app_id, const std::string& image,
                                const std::string& builder_version) {
  Writer spec;
  spec.string(6, "FROM " + image);  // dockerfile_commands, as images.fromRegistry() makes
  Writer w;
  w.message(2, spec);
  w.string(4, app_id);
  w.string(9, builder_version);
  return std::move(w).bytes();
}

std::string sandbox_create(const std::string& app_id, const std::string& image_id,
                           const CreateOptions& options) {
  Writer sandbox;
  sandbox.string(3, image_id);
  Writer resources;
  if (options.resources.memory_bytes) {
    const auto mb = static_cast<std::uint64_t>(
        std::ceil(static_cast<double>(*options.resources.memory_bytes) / (1 << 20)));
    resources.varint(2, mb);  // memory_mb: what it gets
    resources.varint(5, mb);  // memory_mb_max: and no more
  }
  if (options.resources.cpus) {
    const auto milli = static_cast<std::uint64_t>(std::ceil(*options.resources.cpus * 1000));
    resources.varint(3, milli);
    resources.varint(7, milli);
  }
  if (!resources.view().empty()) sandbox.message(5, resources);
  sandbox.varint(7, static_cast<std::uint64_t>(options.lifetime.count()));  // timeout_secs
  if (!options.workdir.empty()) sandbox.string_present(8, options.workdir);
  Writer network;
  if (options.network.allow.empty()) {
    network.varint(1, 2);  // BLOCKED
  } else {
    network.varint(1, 3);  // ALLOWLIST (admission refuses it today: not declared)
    for (const auto& host : options.network.allow)
      network.string_present(3, host);
  }
  sandbox.message(22, network);
  Writer w;
  w.string(1, app_id);
  w.message(2, sandbox);
  if (!options.env.empty()) w.message(6, env_source(options.env));
  return std::move(w).bytes();
}

std::string by_sandbox(const std::string& sandbox_id) {
  Writer w;
  w.string(1, sandbox_id);
  return std::move(w).bytes();
}

std::string sandbox_wait(const std::string& sandbox_id, float timeout) {
  Writer w;
  w.string(1, sandbox_id);
  float32(w, 2, timeout);
  return std::move(w).bytes();
}

std::string router_access(const std::string& sandbox_id, const std::string& task_id) {
  Writer w;
  w.string(1, sandbox_id);
  w.string(2, task_id);
  return std::move(w).bytes();
}

std::string exec_start(const std::string& task_id, const std::string& exec_id,
                       const std::vector<std::string>& argv, const Env& env,
                       const std::string& workdir, std::optional<std::uint32_t> timeout_secs) {
  Writer w;
  w.string(1, task_id);
  w.string(2, exec_id);
  for (const auto& arg : argv)
    w.string_present(3, arg);
  w.varint(4, 1);  // stdout: PIPE
  w.varint(5, 1);  // stderr: PIPE
  if (timeout_secs) w.varint_present(6, *timeout_secs);
  if (!workdir.empty()) w.string_present(7, workdir);
  if (!env.empty()) w.message(13, env_source(env));
  return std::move(w).bytes();
}

std::string exec_ref(const std::string& task_id, const std::string& exec_id) {
  Writer w;
  w.string(1, task_id);
  w.string(2, exec_id);
  return std::move(w).bytes();
}

std::string stdio_read(const std::string& task_id, const std::string& exec_id, std::uint64_t offset,
                       int fd) {
  Writer w;
  w.string(1, task_id);
  w.string(2, exec_id);
  w.varint(3, offset);
  w.varint(4, static_cast<std::uint64_t>(fd));
  return std::move(w).bytes();
}

std::string stdin_write(const std::string& task_id, const std::string& exec_id,
                        std::uint64_t offset, std::string_view data, bool eof) {
  Writer w;
  w.string(1, task_id);
  w.string(2, exec_id);
  w.varint(3, offset);
  w.string(4, data);
  w.boolean(5, eof);
  return std::move(w).bytes();
}

std::string stdin_stream_start(const std::string& task_id, const std::string& exec_id) {
  Writer start;
  start.string(1, task_id);
  start.string(2, exec_id);
  Writer w;
  w.message(1, start);
  return std::move(w).bytes();
}

std::string stdin_stream_data(std::string_view data) {
  Writer w;
  w.string_present(2, data);
  return std::move(w).bytes();
}

std::string stdin_stream_end() {
  Writer w;
  w.message(3, Writer{});
  return std::move(w).bytes();
}

std::string string_field(std::string_view message, std::uint32_t field) {
  Reader r(message);
  Field f;
  while (r.next(f))
    if (f.number == field && f.wire_type == 2) return std::string(f.bytes);
  return {};
}

std::optional<std::string_view> message_field(std::string_view message, std::uint32_t field) {
  Reader r(message);
  Field f;
  while (r.next(f))
    if (f.number == field && f.wire_type == 2) return f.bytes;
  return std::nullopt;
}

std::optional<GenericResult> generic_result(std::string_view message) {
  Reader r(message);
  Field f;
  GenericResult g;
  while (r.next(f)) {
    if (f.number == 1 && f.wire_type == 0) g.status = static_cast<int>(f.value);
    if (f.number == 2 && f.wire_type == 2) g.exception = std::string(f.bytes);
    if (f.number == 3 && f.wire_type == 0) g.exitcode = static_cast<int>(f.value);
  }
  if (r.failed()) return std::nullopt;
  return g;
}

std::optional<CreateReply> create_reply(std::string_view message) {
  Reader r(message);
  Field f;
  CreateReply c;
  while (r.next(f)) {
    if (f.wire_type != 2) continue;
    if (f.number == 1) c.sandbox_id = std::string(f.bytes);
    if (f.number == 3) c.task_id = std::string(f.bytes);
    if (f.number == 5) {
      c.router_jwt = string_field(f.bytes, 1);
      c.router_url = string_field(f.bytes, 2);
    }
  }
  if (r.failed() || c.sandbox_id.empty()) return std::nullopt;
  return c;
}

std::optional<ExecExit> exec_exit(std::string_view message) {
  Reader r(message);
  Field f;
  ExecExit e;
  while (r.next(f)) {
    if (f.number == 1 && f.wire_type == 0)
      e.code = static_cast<int>(static_cast<std::int32_t>(f.value));
    if (f.number == 2 && f.wire_type == 0) e.signal = static_cast<int>(f.value);
  }
  if (r.failed()) return std::nullopt;
  return e;
}

std::optional<std::string_view> stdio_data(std::string_view message) {
  Reader r(message);
  Field f;
  std::string_view data;
  while (r.next(f))
    if (f.number == 1 && f.wire_type == 2) data = f.bytes;
  if (r.failed()) return std::nullopt;
  return data;
}

}  // namespace sandboxio::modal::detail::msg
