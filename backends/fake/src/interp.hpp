// The fake:// shell's interpreter, shared by its parts: shell.cpp (parsing, expansion,
// redirections, pipelines in virtual time) and builtins.cpp (the programs it knows, by name).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

#include "shell.hpp"

namespace sandboxio::fake::detail::sh {

using std::chrono::nanoseconds;

struct Part {
  std::string text;
  bool expand = true;  // $-expansion applies (unquoted or double-quoted)
};
using Word = std::vector<Part>;

struct Redir {
  int fd = 1;      // 0, 1 or 2
  std::string op;  // ">", ">>", "<", ">&"
  Word target;     // a path, or the fd number for ">&"
};

struct Simple {
  std::vector<Word> words;
  std::vector<Redir> redirs;
  std::string op_after = ";";  // ";", "&&", "||", "&", "|"
};

enum class TargetKind { Stdout, Stderr, File, Capture, Null };
struct Target {
  TargetKind kind = TargetKind::Stdout;
  std::string path;
};

bool is_op_char(char c);
bool parse_script(const std::string& s, std::vector<Simple>& out, std::string& error);
std::optional<std::int64_t> to_int(std::string_view text);
std::optional<nanoseconds> to_seconds(const std::string& text);
std::string host_of(const std::string& url);
std::string unescape(const std::string& in, bool* stop = nullptr);

class Interp {
 public:
  Interp(ShellEnv& env, Outcome& out, nanoseconds start, std::vector<std::string> args = {})
      : env_(env), out_(out), clock_(start), args_(std::move(args)) {}

  int status() const { return status_; }
  bool exited() const { return exited_; }
  nanoseconds clock() const { return clock_; }

  int run_script(const std::string& script);

  int run_argv(const std::vector<std::string>& argv) {
    Target out{TargetKind::Stdout, {}}, err{TargetKind::Stderr, {}};
    return status_ = dispatch(argv, out, err);
  }

 private:
  std::string expand(const Word& word);

  std::string lookup(const std::string& name);

  void write(TargetKind kind, std::string_view data, const std::string& path = {});

  // Resolves redirections into targets; false (and a message) when a target is bad.
  bool resolve(const Simple& cmd, Target& out, Target& err);

  int run_simple(const Simple& cmd);

  // True when the command sends fd away from the exec's streams (> file, >/dev/null, 2>&1
  // after stdout went away).
  static bool redirects(const Simple& cmd, int fd);

  void run_background(const Simple& cmd);

 public:
  int run_simple_public(const Simple& cmd) { return status_ = run_simple(cmd); }
  nanoseconds background_hold() const { return background_hold_; }

 private:
  int fail(const Target& err, const std::string& message, int code) {
    write(err.kind, message, err.path);
    return code;
  }

  int network_call(const std::string& tool, const std::string& url, const Target& out,
                   const Target& err);

  // One call of a built-in program: its arguments, its name without a path, where its output goes.
  struct Call {
    const std::vector<std::string>& argv;
    const std::string& base;
    const Target& out;
    const Target& err;
  };
  using Builtin = int (Interp::*)(const Call&);

  int run_sh(const Call& call);

  int run_setsid(const Call& call);

  int run_true(const Call&) { return 0; }

  int run_false(const Call&) { return 1; }

  int run_exit(const Call& call);

  int run_echo(const Call& call);

  int run_printf(const Call& call);

  int run_sleep(const Call& call);

  int run_cat(const Call& call);

  int run_head(const Call& call);

  int run_seq(const Call& call);

  int run_pwd(const Call& call);

  int run_cd(const Call& call);

  int run_env(const Call& call);

  int run_export(const Call& call);

  int run_mkdir(const Call& call);

  int run_rm(const Call& call);

  int run_ls(const Call& call);

  int run_test(const Call& call);

  int run_kill(const Call& call);

  int run_pgrep(const Call& call);

  int run_curl(const Call& call);

  int run_python_c(const Call& call);

  int dispatch(const std::vector<std::string>& argv, const Target& out, const Target& err);

  ShellEnv& env_;
  Outcome& out_;
  nanoseconds clock_;
  std::vector<std::string> args_;
  int status_ = 0;
  bool exited_ = false;
  bool capture_ = false;
  std::string capture_buffer_;
  nanoseconds background_hold_{0};

 public:
  std::optional<int> signal_;
};

}  // namespace sandboxio::fake::detail::sh
