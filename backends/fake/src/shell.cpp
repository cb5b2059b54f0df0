// The fake backend's built-in shell. It is deliberately small: enough POSIX behaviour that
// agent tools and the contract suite see what a real sandbox would show (exit codes, separate
// streams, binary output, env, working directory, timeouts over virtual time), and nothing
// that touches the host.
#include "interp.hpp"

namespace sandboxio::fake::detail {
namespace sh {

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
std::string unescape(const std::string& in, bool* stop) {
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

int Interp::run_script(const std::string& script) {
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

std::string Interp::expand(const Word& word) {
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

std::string Interp::lookup(const std::string& name) {
  if (name == "PWD") return env_.cwd;
  auto it = env_.env.find(name);
  return it == env_.env.end() ? std::string() : it->second;
}

void Interp::write(TargetKind kind, std::string_view data, const std::string& path) {
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
      if (!out_.steps.empty() && out_.steps.back().at == clock_ && out_.steps.back().stream == s) {
        out_.steps.back().data.append(data);
      } else {
        out_.steps.push_back(Step{clock_, s, Bytes(data)});
      }
      return;
    }
  }
}

// Resolves redirections into targets; false (and a message) when a target is bad.
bool Interp::resolve(const Simple& cmd, Target& out, Target& err) {
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

int Interp::run_simple(const Simple& cmd) {
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
bool Interp::redirects(const Simple& cmd, int fd) {
  bool away = false, out_away = false;
  for (const Redir& r : cmd.redirs) {
    const bool to_file = r.op == ">" || r.op == ">>";
    if (r.fd == 1 && to_file) out_away = true;
    if (r.fd == fd && to_file) away = true;
    if (fd == 2 && r.fd == 2 && r.op == ">&" && out_away) away = true;
  }
  return away;
}

void Interp::run_background(const Simple& cmd) {
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

}  // namespace sh

Outcome run_argv(ShellEnv& env, const std::vector<std::string>& argv) {
  Outcome out;
  if (argv.empty() || argv[0].empty()) {
    out.steps.push_back(
        Step{sh::nanoseconds(0), StreamKind::Stderr, "sandboxio-fake: empty command\n"});
    out.exit_code = 127;
    return out;
  }
  sh::Interp interp(env, out, sh::nanoseconds(0));
  out.exit_code = interp.run_argv(argv);
  out.signal = interp.signal_;
  out.duration = std::max(interp.clock(), interp.background_hold());
  for (const Step& s : out.steps)
    out.duration = std::max(out.duration, s.at);
  return out;
}

}  // namespace sandboxio::fake::detail
