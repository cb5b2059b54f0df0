// The fake backend's built-in shell. It is deliberately small: enough POSIX behaviour that
// agent tools and the contract suite see what a real sandbox would show (exit codes, separate
// streams, binary output, env, working directory, timeouts over virtual time), and nothing
// that touches the host.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "shell.hpp"

namespace sandboxio::fake::detail {
namespace {

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

bool is_op_char(char c) {
  return c == ';' || c == '&' || c == '|' || c == '\n' || c == '<' || c == '>';
}

// Splits a script into simple commands. Returns false (with a message) on a syntax error.
bool parse_script(const std::string& s, std::vector<Simple>& out, std::string& error) {
  Simple current;
  Redir* pending = nullptr;
  std::size_t i = 0;
  auto finish = [&](const std::string& op) {
    if (pending != nullptr) {
      error = "syntax error: redirection without a target";
      return false;
    }
    if (current.words.empty()) {
      if (op == ";" && current.redirs.empty()) return true;  // empty statement
      error = "syntax error near unexpected token `" + op + "'";
      return false;
    }
    current.op_after = op;
    out.push_back(std::move(current));
    current = Simple{};
    return true;
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t') {
      ++i;
      continue;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n')
        ++i;
      continue;
    }
    if (c == '\n' || c == ';') {
      if (!finish(";")) return false;
      ++i;
      continue;
    }
    if (c == '&' && i + 1 < s.size() && s[i + 1] == '&') {
      if (!finish("&&")) return false;
      i += 2;
      continue;
    }
    if (c == '|' && i + 1 < s.size() && s[i + 1] == '|') {
      if (!finish("||")) return false;
      i += 2;
      continue;
    }
    if (c == '&' && !(i > 0 && s[i - 1] == '>')) {
      if (!finish("&")) return false;
      ++i;
      continue;
    }
    if (c == '|') {
      if (!finish("|")) return false;
      ++i;
      continue;
    }
    // Redirections: [n]> [n]>> [n]>&m <
    const bool digit_redir =
        (c >= '0' && c <= '2') && i + 1 < s.size() && (s[i + 1] == '>' || s[i + 1] == '<');
    if (c == '>' || c == '<' || digit_redir) {
      Redir r;
      if (digit_redir) {
        r.fd = c - '0';
        ++i;
      } else {
        r.fd = s[i] == '<' ? 0 : 1;
      }
      if (s[i] == '<') {
        r.op = "<";
        ++i;
      } else if (i + 1 < s.size() && s[i + 1] == '>') {
        r.op = ">>";
        i += 2;
      } else if (i + 1 < s.size() && s[i + 1] == '&') {
        r.op = ">&";
        i += 2;
      } else {
        r.op = ">";
        ++i;
      }
      current.redirs.push_back(std::move(r));
      pending = &current.redirs.back();
      continue;
    }
    // A word.
    const std::size_t word_start = i;
    Word word;
    std::string literal;
    auto flush = [&](bool expand) {
      if (!literal.empty()) word.push_back(Part{literal, expand});
      literal.clear();
    };
    while (i < s.size() && s[i] != ' ' && s[i] != '\t' && !is_op_char(s[i])) {
      const char ch = s[i];
      if (ch == '\'') {
        flush(true);
        const std::size_t end = s.find('\'', i + 1);
        if (end == std::string::npos) {
          error = "unterminated quoted string";
          return false;
        }
        word.push_back(Part{s.substr(i + 1, end - i - 1), false});
        if (end == i + 1) word.push_back(Part{"", false});
        i = end + 1;
      } else if (ch == '"') {
        flush(true);
        ++i;
        bool closed = false;
        bool any = false;
        while (i < s.size()) {
          if (s[i] == '"') {
            closed = true;
            ++i;
            break;
          }
          if (s[i] == '\\' && i + 1 < s.size() &&
              (s[i + 1] == '"' || s[i + 1] == '\\' || s[i + 1] == '$')) {
            flush(true);
            word.push_back(Part{std::string(1, s[i + 1]), false});
            i += 2;
            any = true;
            continue;
          }
          literal.push_back(s[i++]);
          any = true;
        }
        if (!closed) {
          error = "unterminated quoted string";
          return false;
        }
        flush(true);
        if (!any) word.push_back(Part{"", false});
      } else if (ch == '\\' && i + 1 < s.size()) {
        flush(true);
        if (s[i + 1] != '\n') word.push_back(Part{std::string(1, s[i + 1]), false});
        i += 2;
      } else {
        literal.push_back(ch);
        ++i;
      }
    }
    flush(true);
    if (i == word_start) {  // an operator where a word must be (`>&&`, `>>&+`): nothing read
      error = std::string("syntax error near unexpected token `") + s[i] + "'";
      return false;
    }
    if (pending != nullptr) {
      pending->target = std::move(word);
      pending = nullptr;
    } else {
      current.words.push_back(std::move(word));
    }
  }
  if (pending != nullptr) {
    error = "syntax error: redirection without a target";
    return false;
  }
  if (!current.words.empty()) {
    current.op_after = ";";
    out.push_back(std::move(current));
  } else if (!current.redirs.empty()) {
    error = "syntax error: redirection without a command";
    return false;
  } else if (!out.empty() && out.back().op_after != ";" && out.back().op_after != "&") {
    error = "syntax error: unexpected end of file";
    return false;
  }
  return true;
}

std::optional<std::int64_t> to_int(std::string_view text) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

std::optional<nanoseconds> to_seconds(const std::string& text) {
  // "1", "0.5", "2s"; at most a day of virtual time.
  std::string t = text;
  if (!t.empty() && t.back() == 's') t.pop_back();
  if (t.empty() || t.size() > 16) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || p != t.data() + t.size() || !(v >= 0) || v > 86400) return std::nullopt;
  return nanoseconds(static_cast<std::int64_t>(std::llround(v * 1e9)));
}

std::string host_of(const std::string& url) {
  std::string rest = url;
  if (auto p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest[0] == '[') return rest.substr(1, rest.find(']') - 1);
  return rest.substr(0, rest.find(':'));
}

// printf's and echo -e's escapes.
std::string unescape(const std::string& in, bool* stop = nullptr) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 >= in.size()) {
      out.push_back(in[i]);
      continue;
    }
    const char n = in[++i];
    switch (n) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'c':
        if (stop != nullptr) *stop = true;
        return out;
      case 'x': {
        int v = 0, k = 0;
        while (k < 2 && i + 1 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1]))) {
          const char h = in[++i];
          v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          ++k;
        }
        out.push_back(static_cast<char>(v));
        break;
      }
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7': {
        int v = n - '0', k = 1;
        while (k < 3 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7') {
          v = v * 8 + (in[++i] - '0');
          ++k;
        }
        out.push_back(static_cast<char>(v & 0xff));
        break;
      }
      default:
        out.push_back('\\');
        out.push_back(n);
    }
  }
  return out;
}

class Interp {
 public:
  Interp(ShellEnv& env, Outcome& out, nanoseconds start, std::vector<std::string> args = {})
      : env_(env), out_(out), clock_(start), args_(std::move(args)) {}

  int status() const { return status_; }
  bool exited() const { return exited_; }
  nanoseconds clock() const { return clock_; }

  int run_script(const std::string& script) {
    std::vector<Simple> cmds;
    std::string error;
    if (!parse_script(script, cmds, error)) {
      write(TargetKind::Stderr, "sh: 1: " + error + "\n");
      return status_ = 2;
    }
    std::string captured;
    bool have_pipe_input = false;
    std::string prev_op = ";";
    for (Simple& cmd : cmds) {
      if (exited_) break;
      const bool skip = (prev_op == "&&" && status_ != 0) || (prev_op == "||" && status_ == 0);
      prev_op = cmd.op_after;
      if (skip) continue;
      if (cmd.op_after == "&") {
        run_background(cmd);
        status_ = 0;
        continue;
      }
      Bytes saved_stdin;
      if (have_pipe_input) {
        saved_stdin = std::exchange(env_.stdin_data, captured);
        captured.clear();
      }
      capture_ = cmd.op_after == "|";
      status_ = run_simple(cmd);
      if (have_pipe_input) env_.stdin_data = std::move(saved_stdin);
      have_pipe_input = capture_;
      if (capture_) captured = std::exchange(capture_buffer_, {});
      capture_ = false;
    }
    return status_;
  }

  int run_argv(const std::vector<std::string>& argv) {
    Target out{TargetKind::Stdout, {}}, err{TargetKind::Stderr, {}};
    return status_ = dispatch(argv, out, err);
  }

 private:
  std::string expand(const Word& word) {
    std::string out;
    for (const Part& part : word) {
      if (!part.expand) {
        out += part.text;
        continue;
      }
      const std::string& t = part.text;
      for (std::size_t i = 0; i < t.size(); ++i) {
        if (t[i] != '$' || i + 1 >= t.size()) {
          out.push_back(t[i]);
          continue;
        }
        const char n = t[i + 1];
        if (n == '$') {
          out += std::to_string(env_.pid);
          ++i;
        } else if (n == '?') {
          out += std::to_string(status_);
          ++i;
        } else if (n >= '0' && n <= '9') {
          const std::size_t k = static_cast<std::size_t>(n - '0');
          if (k < args_.size()) out += args_[k];
          ++i;
        } else if (n == '{') {
          const std::size_t end = t.find('}', i + 2);
          if (end == std::string::npos) {
            out.push_back('$');
            continue;
          }
          out += lookup(t.substr(i + 2, end - i - 2));
          i = end;
        } else if (std::isalpha(static_cast<unsigned char>(n)) || n == '_') {
          std::size_t j = i + 1;
          while (j < t.size() && (std::isalnum(static_cast<unsigned char>(t[j])) || t[j] == '_'))
            ++j;
          out += lookup(t.substr(i + 1, j - i - 1));
          i = j - 1;
        } else {
          out.push_back('$');
        }
      }
    }
    return out;
  }

  std::string lookup(const std::string& name) {
    if (name == "PWD") return env_.cwd;
    auto it = env_.env.find(name);
    return it == env_.env.end() ? std::string() : it->second;
  }

  void write(TargetKind kind, std::string_view data, const std::string& path = {}) {
    if (data.empty()) return;
    switch (kind) {
      case TargetKind::Null:
        return;
      case TargetKind::Capture:
        capture_buffer_.append(data);
        return;
      case TargetKind::File: {
        const Node* n = env_.fs->get(path);
        Bytes content = n != nullptr ? n->data : Bytes{};
        content.append(data);
        env_.fs->put_file(path, std::move(content), n != nullptr ? n->mode : 0644);
        return;
      }
      case TargetKind::Stdout:
      case TargetKind::Stderr: {
        const StreamKind s = kind == TargetKind::Stdout ? StreamKind::Stdout : StreamKind::Stderr;
        if (!out_.steps.empty() && out_.steps.back().at == clock_ &&
            out_.steps.back().stream == s) {
          out_.steps.back().data.append(data);
        } else {
          out_.steps.push_back(Step{clock_, s, Bytes(data)});
        }
        return;
      }
    }
  }

  // Resolves redirections into targets; false (and a message) when a target is bad.
  bool resolve(const Simple& cmd, Target& out, Target& err) {
    out = Target{capture_ ? TargetKind::Capture : TargetKind::Stdout, {}};
    err = Target{TargetKind::Stderr, {}};
    for (const Redir& r : cmd.redirs) {
      const std::string target = expand(r.target);
      if (r.op == "<") {
        const std::string path = Vfs::normalise(env_.cwd, target);
        const Node* n = env_.fs->get(path);
        if (n == nullptr || n->dir) {
          write(TargetKind::Stderr, "sh: 1: cannot open " + target + ": No such file\n");
          return false;
        }
        env_.stdin_data = n->data;
        continue;
      }
      Target& t = r.fd == 2 ? err : out;
      if (r.op == ">&") {
        t = target == "2" ? err : target == "1" ? out : t;
        if (target == "2" && r.fd == 1) t = err;
        continue;
      }
      if (target == "/dev/null") {
        t = Target{TargetKind::Null, {}};
        continue;
      }
      const std::string path = Vfs::normalise(env_.cwd, target);
      const Node* n = env_.fs->get(path);
      if ((n != nullptr && n->dir) || !env_.fs->parent_is_dir(path)) {
        write(TargetKind::Stderr, "sh: 1: cannot create " + target + ": " +
                                      (n != nullptr ? "Is a directory" : "Directory nonexistent") +
                                      "\n");
        return false;
      }
      if (r.op == ">" || n == nullptr) env_.fs->put_file(path, {}, n != nullptr ? n->mode : 0644);
      t = Target{TargetKind::File, path};
    }
    return true;
  }

  int run_simple(const Simple& cmd) {
    std::vector<std::string> argv;
    for (const Word& w : cmd.words)
      argv.push_back(expand(w));
    // Leading assignments: NAME=value cmd, or bare NAME=value.
    std::map<std::string, std::string> assigned;
    while (!argv.empty()) {
      const std::size_t eq = argv[0].find('=');
      if (eq == std::string::npos || eq == 0 ||
          !std::all_of(
              argv[0].begin(), argv[0].begin() + static_cast<std::ptrdiff_t>(eq),
              [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; })) {
        break;
      }
      assigned[argv[0].substr(0, eq)] = argv[0].substr(eq + 1);
      argv.erase(argv.begin());
    }
    if (argv.empty()) {
      for (auto& [k, v] : assigned)
        env_.env[k] = v;
      return 0;
    }
    Target out, err;
    if (!resolve(cmd, out, err)) return 2;
    auto saved = env_.env;
    for (auto& [k, v] : assigned)
      env_.env[k] = v;
    const int rc = dispatch(argv, out, err);
    if (!assigned.empty()) env_.env = std::move(saved);
    return rc;
  }

  // True when the command sends fd away from the exec's streams (> file, >/dev/null, 2>&1
  // after stdout went away).
  static bool redirects(const Simple& cmd, int fd) {
    bool away = false, out_away = false;
    for (const Redir& r : cmd.redirs) {
      const bool to_file = r.op == ">" || r.op == ">>";
      if (r.fd == 1 && to_file) out_away = true;
      if (r.fd == fd && to_file) away = true;
      if (fd == 2 && r.fd == 2 && r.op == ">&" && out_away) away = true;
    }
    return away;
  }

  void run_background(const Simple& cmd) {
    Outcome child;
    Interp sub(env_, child, clock_, args_);
    Simple fg = cmd;
    fg.op_after = ";";
    sub.run_simple_public(fg);
    std::string what;
    for (const Word& w : cmd.words)
      what += (what.empty() ? "" : " ") + sub.expand(w);
    // A background child that still writes to the exec's streams keeps them open, as a real
    // one does; one whose output goes elsewhere is detached and outlives a normal exit.
    bool holds_stream = false;
    for (Step& s : child.steps) {
      holds_stream = true;
      out_.steps.push_back(std::move(s));
    }
    std::stable_sort(out_.steps.begin(), out_.steps.end(),
                     [](const Step& a, const Step& b) { return a.at < b.at; });
    const nanoseconds end = sub.clock();
    if (holds_stream || !(redirects(cmd, 1) && redirects(cmd, 2))) {
      background_hold_ = std::max(background_hold_, end);
    }
    out_.background.push_back(Background{end, what});
    for (auto& a : child.network_attempts)
      out_.network_attempts.push_back(a);
  }

 public:
  int run_simple_public(const Simple& cmd) { return status_ = run_simple(cmd); }
  nanoseconds background_hold() const { return background_hold_; }

 private:
  int fail(const Target& err, const std::string& message, int code) {
    write(err.kind, message, err.path);
    return code;
  }

  int network_call(const std::string& tool, const std::string& url, const Target& out,
                   const Target& err) {
    const std::string host = host_of(url);
    out_.network_attempts.push_back(host);
    clock_ += std::chrono::milliseconds(5);
    if (env_.policy != nullptr && env_.policy->allows(host)) {
      write(out.kind, "fake response from " + host + "\n", out.path);
      return 0;
    }
    if (tool == "wget")
      return fail(err, "wget: unable to resolve host address '" + host + "'\n", 4);
    return fail(err, "curl: (6) Could not resolve host: " + host + "\n", 6);
  }

  int dispatch(const std::vector<std::string>& argv, const Target& out, const Target& err) {
    const std::string& name = argv[0];
    const std::string base =
        name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    auto emit = [&](const std::string& data) { write(out.kind, data, out.path); };

    if (base == "sh" || base == "bash" || base == "dash") {
      if (argv.size() >= 3 && argv[1] == "-c") {
        std::vector<std::string> args(argv.begin() + 3, argv.end());
        args.insert(args.begin(), argv.size() > 3 ? argv[3] : base);
        if (argv.size() > 3) args.erase(args.begin() + 1);
        Interp sub(env_, out_, clock_, args);
        sub.capture_ = false;
        const int rc = sub.run_script(argv[2]);
        clock_ = std::max(sub.clock(), clock_);
        background_hold_ = std::max(background_hold_, sub.background_hold());
        if (sub.signal_) signal_ = sub.signal_, exited_ = true;
        return rc;
      }
      if (argv.size() == 1 && !env_.stdin_data.empty()) {
        Interp sub(env_, out_, clock_, {base});
        const int rc = sub.run_script(env_.stdin_data);
        clock_ = std::max(sub.clock(), clock_);
        return rc;
      }
      return fail(err, base + ": only '-c SCRIPT' is supported by fake://\n", 2);
    }
    if (base == "setsid" || base == "nohup" || base == "exec" || base == "command" ||
        base == "timeout") {
      std::size_t skip = base == "timeout" ? 2 : 1;
      if (argv.size() <= skip) return fail(err, base + ": missing operand\n", 1);
      return dispatch(
          std::vector<std::string>(argv.begin() + static_cast<std::ptrdiff_t>(skip), argv.end()),
          out, err);
    }
    if (base == "true" || base == ":") return 0;
    if (base == "false") return 1;
    if (base == "exit") {
      exited_ = true;
      if (argv.size() > 1) {
        auto v = to_int(argv[1]);
        if (!v) return fail(err, "sh: 1: exit: Illegal number: " + argv[1] + "\n", 2);
        return static_cast<int>(*v & 0xff);
      }
      return status_;
    }
    if (base == "echo") {
      std::size_t i = 1;
      bool newline = true, escapes = false;
      for (; i < argv.size() && (argv[i] == "-n" || argv[i] == "-e"); ++i) {
        if (argv[i] == "-n") newline = false;
        if (argv[i] == "-e") escapes = true;
      }
      std::string text;
      for (std::size_t k = i; k < argv.size(); ++k)
        text += (k > i ? " " : "") + argv[k];
      bool stop = false;
      if (escapes) text = unescape(text, &stop);
      emit(text + (newline && !stop ? "\n" : ""));
      return 0;
    }
    if (base == "printf") {
      if (argv.size() < 2) return fail(err, "printf: usage: printf format [arguments]\n", 2);
      std::size_t next = 2;
      std::string result;
      // The format is used again while arguments remain, as long as it takes some: one that
      // takes none is printed once (it looped forever on `printf x y`; found by fuzzing).
      std::size_t before = 0;
      do {
        before = next;
        const std::string& fmt = argv[1];
        for (std::size_t i = 0; i < fmt.size(); ++i) {
          if (fmt[i] == '%' && i + 1 < fmt.size()) {
            const char spec = fmt[++i];
            if (spec == '%') {
              result.push_back('%');
            } else if (spec == 's' || spec == 'b') {
              const std::string arg = next < argv.size() ? argv[next++] : "";
              result += spec == 'b' ? unescape(arg) : arg;
            } else if (spec == 'd' || spec == 'i') {
              const std::string arg = next < argv.size() ? argv[next++] : "0";
              result += std::to_string(to_int(arg).value_or(0));
            } else {
              result.push_back('%');
              result.push_back(spec);
            }
          } else if (fmt[i] == '\\') {
            std::size_t j = i + 1;
            std::string esc = "\\";
            if (j < fmt.size()) {
              esc.push_back(fmt[j]);
              if (fmt[j] == 'x' || (fmt[j] >= '0' && fmt[j] <= '7')) {
                for (std::size_t k = 0; k < 2 && j + 1 < fmt.size() &&
                                        std::isxdigit(static_cast<unsigned char>(fmt[j + 1]));
                     ++k) {
                  esc.push_back(fmt[++j]);
                }
              }
            }
            result += unescape(esc);
            i = j;
          } else {
            result.push_back(fmt[i]);
          }
        }
      } while (next < argv.size() && next > before);
      emit(result);
      return 0;
    }
    if (base == "sleep") {
      if (argv.size() < 2) return fail(err, "sleep: missing operand\n", 1);
      auto d = to_seconds(argv[1]);
      if (!d) return fail(err, "sleep: invalid time interval '" + argv[1] + "'\n", 1);
      clock_ += *d;
      return 0;
    }
    if (base == "cat") {
      if (argv.size() == 1) {
        emit(env_.stdin_data);
        return 0;
      }
      int rc = 0;
      for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string path = Vfs::normalise(env_.cwd, argv[i]);
        const Node* n = env_.fs->get(path);
        if (n == nullptr) {
          rc = fail(err, "cat: " + argv[i] + ": No such file or directory\n", 1);
        } else if (n->dir) {
          rc = fail(err, "cat: " + argv[i] + ": Is a directory\n", 1);
        } else {
          emit(n->data);
        }
      }
      return rc;
    }
    if (base == "head") {
      std::optional<std::int64_t> bytes, lines;
      std::string file;
      for (std::size_t i = 1; i < argv.size(); ++i) {
        if ((argv[i] == "-c" || argv[i] == "-n") && i + 1 < argv.size()) {
          (argv[i] == "-c" ? bytes : lines) = to_int(argv[i + 1]);
          ++i;
        } else {
          file = argv[i];
        }
      }
      Bytes data;
      if (file == "/dev/zero") {
        data.assign(
            static_cast<std::size_t>(std::clamp<std::int64_t>(bytes.value_or(0), 0, 1LL << 31)),
            '\0');
      } else if (file == "/dev/urandom" || file == "/dev/random") {
        std::uint64_t x = 0x9E3779B97F4A7C15ULL;  // deterministic, by design
        const auto n =
            static_cast<std::size_t>(std::clamp<std::int64_t>(bytes.value_or(0), 0, 1LL << 31));
        data.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          data[i] = static_cast<char>(x & 0xff);
        }
      } else {
        Bytes src = env_.stdin_data;
        if (!file.empty()) {
          const Node* node = env_.fs->get(Vfs::normalise(env_.cwd, file));
          if (node == nullptr || node->dir)
            return fail(err, "head: cannot open '" + file + "' for reading\n", 1);
          src = node->data;
        }
        if (bytes) {
          data = src.substr(0, static_cast<std::size_t>(std::max<std::int64_t>(*bytes, 0)));
        } else {
          std::int64_t want = lines.value_or(10);
          std::size_t pos = 0;
          while (want-- > 0 && pos < src.size()) {
            const std::size_t nl = src.find('\n', pos);
            pos = nl == std::string::npos ? src.size() : nl + 1;
          }
          data = src.substr(0, pos);
        }
      }
      emit(data);
      return 0;
    }
    if (base == "seq") {
      std::int64_t first = 1, last = 0;
      if (argv.size() == 2) last = to_int(argv[1]).value_or(0);
      if (argv.size() >= 3) first = to_int(argv[1]).value_or(1), last = to_int(argv[2]).value_or(0);
      std::string text;
      for (std::int64_t v = first; v <= last && v - first < 1'000'000; ++v)
        text += std::to_string(v) + "\n";
      emit(text);
      return 0;
    }
    if (base == "pwd") {
      emit(env_.cwd + "\n");
      return 0;
    }
    if (base == "cd") {
      const std::string path = Vfs::normalise(env_.cwd, argv.size() > 1 ? argv[1] : "/home/user");
      const Node* n = env_.fs->get(path);
      if (n == nullptr || !n->dir)
        return fail(err, "sh: 1: cd: can't cd to " + (argv.size() > 1 ? argv[1] : "") + "\n", 2);
      env_.cwd = path;
      return 0;
    }
    if (base == "env" || base == "printenv") {
      if (base == "printenv" && argv.size() > 1) {
        auto it = env_.env.find(argv[1]);
        if (it == env_.env.end()) return 1;
        emit(it->second + "\n");
        return 0;
      }
      if (base == "env" && argv.size() > 1) {
        return dispatch(std::vector<std::string>(argv.begin() + 1, argv.end()), out, err);
      }
      std::string text;
      for (const auto& [k, v] : env_.env)
        text += k + "=" + v + "\n";
      emit(text);
      return 0;
    }
    if (base == "export") {
      for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::size_t eq = argv[i].find('=');
        if (eq != std::string::npos) env_.env[argv[i].substr(0, eq)] = argv[i].substr(eq + 1);
      }
      return 0;
    }
    if (base == "mkdir") {
      bool parents = false;
      int rc = 0;
      for (std::size_t i = 1; i < argv.size(); ++i) {
        if (argv[i] == "-p") {
          parents = true;
          continue;
        }
        const std::string path = Vfs::normalise(env_.cwd, argv[i]);
        const Node* n = env_.fs->get(path);
        if (n != nullptr) {
          if (!parents || !n->dir)
            rc = fail(err, "mkdir: cannot create directory '" + argv[i] + "': File exists\n", 1);
        } else if (parents) {
          env_.fs->make_dirs(path);
        } else if (!env_.fs->parent_is_dir(path)) {
          rc = fail(err,
                    "mkdir: cannot create directory '" + argv[i] + "': No such file or directory\n",
                    1);
        } else {
          env_.fs->make_dir(path);
        }
      }
      return rc;
    }
    if (base == "rm") {
      bool recursive = false, force = false;
      int rc = 0;
      for (std::size_t i = 1; i < argv.size(); ++i) {
        if (argv[i].size() > 1 && argv[i][0] == '-') {
          recursive = recursive || argv[i].find('r') != std::string::npos ||
                      argv[i].find('R') != std::string::npos;
          force = force || argv[i].find('f') != std::string::npos;
          continue;
        }
        const std::string path = Vfs::normalise(env_.cwd, argv[i]);
        const Node* n = env_.fs->get(path);
        if (n == nullptr) {
          if (!force)
            rc = fail(err, "rm: cannot remove '" + argv[i] + "': No such file or directory\n", 1);
        } else if (n->dir && !recursive) {
          rc = fail(err, "rm: cannot remove '" + argv[i] + "': Is a directory\n", 1);
        } else {
          env_.fs->remove(path, true);
        }
      }
      return rc;
    }
    if (base == "ls") {
      std::vector<std::string> paths;
      for (std::size_t i = 1; i < argv.size(); ++i) {
        if (argv[i][0] != '-') paths.push_back(argv[i]);
      }
      if (paths.empty()) paths.push_back(".");
      int rc = 0;
      for (const std::string& p : paths) {
        const std::string path = Vfs::normalise(env_.cwd, p);
        const Node* n = env_.fs->get(path);
        if (n == nullptr) {
          rc = fail(err, "ls: cannot access '" + p + "': No such file or directory\n", 2);
          continue;
        }
        if (!n->dir) {
          emit(p + "\n");
          continue;
        }
        std::string text;
        for (const std::string& c : env_.fs->children(path))
          text += c.substr(c.rfind('/') + 1) + "\n";
        emit(text);
      }
      return rc;
    }
    if (base == "test" || base == "[") {
      std::vector<std::string> a(argv.begin() + 1, argv.end());
      if (base == "[" && (a.empty() || a.back() != "]")) return fail(err, "[: missing ]\n", 2);
      if (base == "[") a.pop_back();
      if (a.size() == 2 && (a[0] == "-f" || a[0] == "-d" || a[0] == "-e")) {
        const Node* n = env_.fs->get(Vfs::normalise(env_.cwd, a[1]));
        if (a[0] == "-e") return n != nullptr ? 0 : 1;
        return (n != nullptr && n->dir == (a[0] == "-d")) ? 0 : 1;
      }
      if (a.size() == 2 && (a[0] == "-n" || a[0] == "-z"))
        return (a[1].empty() == (a[0] == "-z")) ? 0 : 1;
      if (a.size() == 3 && (a[1] == "=" || a[1] == "!="))
        return ((a[0] == a[2]) == (a[1] == "=")) ? 0 : 1;
      if (a.size() == 1) return a[0].empty() ? 1 : 0;
      return fail(err, base + ": unsupported expression\n", 2);
    }
    if (base == "kill") {
      std::size_t i = 1;
      int sig = 15;
      if (i < argv.size() && argv[i] == "-s" && i + 1 < argv.size()) {
        sig = argv[i + 1] == "KILL" ? 9 : argv[i + 1] == "INT" ? 2 : 15;
        i += 2;
      } else if (i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-') {
        const std::string s = argv[i].substr(1);
        sig = s == "KILL" || s == "9"    ? 9
              : s == "INT" || s == "2"   ? 2
              : s == "TERM" || s == "15" ? 15
                                         : to_int(s).value_or(15);
        ++i;
      }
      for (; i < argv.size(); ++i) {
        if (to_int(argv[i]) == env_.pid) {
          signal_ = sig;
          exited_ = true;
          return 128 + sig;
        }
      }
      return 0;
    }
    if (base == "pgrep") {
      if (argv.size() < 2) return fail(err, "pgrep: no matching criteria specified\n", 2);
      const std::string& pattern = argv.back();
      std::vector<int> pids =
          env_.find_processes ? env_.find_processes(pattern) : std::vector<int>{};
      std::string text;
      for (int p : pids) {
        if (p != env_.pid) text += std::to_string(p) + "\n";  // pgrep never lists itself
      }
      emit(text);
      return text.empty() ? 1 : 0;
    }
    if (base == "curl" || base == "wget") {
      for (std::size_t i = 1; i < argv.size(); ++i) {
        if (!argv[i].empty() && argv[i][0] != '-') return network_call(base, argv[i], out, err);
      }
      return fail(err, base + ": no URL specified\n", 2);
    }
    if (base == "python3" || base == "python") {
      if (argv.size() >= 3 && argv[1] == "-c") {
        Outcome py = run_python(env_, argv[2]);
        for (Step& s : py.steps) {
          s.at += clock_;
          write(s.stream == StreamKind::Stdout ? out.kind : err.kind, s.data,
                s.stream == StreamKind::Stdout ? out.path : err.path);
        }
        clock_ += py.duration;
        for (auto& a : py.network_attempts)
          out_.network_attempts.push_back(a);
        return py.exit_code;
      }
      return fail(err, base + ": fake:// runs only 'python3 -c CODE'\n", 2);
    }
    // Not a known program: a path that exists but cannot run, or nothing at all.
    if (name.find('/') != std::string::npos) {
      const Node* n = env_.fs->get(Vfs::normalise(env_.cwd, name));
      if (n != nullptr) return fail(err, "sh: 1: " + name + ": Permission denied\n", 126);
    }
    return fail(err, "sh: 1: " + name + ": not found\n", 127);
  }

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

}  // namespace

Outcome run_argv(ShellEnv& env, const std::vector<std::string>& argv) {
  Outcome out;
  if (argv.empty() || argv[0].empty()) {
    out.steps.push_back(
        Step{nanoseconds(0), StreamKind::Stderr, "sandboxio-fake: empty command\n"});
    out.exit_code = 127;
    return out;
  }
  Interp interp(env, out, nanoseconds(0));
  out.exit_code = interp.run_argv(argv);
  out.signal = interp.signal_;
  out.duration = std::max(interp.clock(), interp.background_hold());
  for (const Step& s : out.steps)
    out.duration = std::max(out.duration, s.at);
  return out;
}

}  // namespace sandboxio::fake::detail
