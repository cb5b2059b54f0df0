// The fake backend's mini-Python: enough to answer the calls agent tools make most (print,
// assignments of numbers and strings, sys.exit, time.sleep, exceptions) and to recognise
// network calls so that the NetworkPolicy is honoured. Anything else fails like Python would,
// with a traceback on stderr and exit code 1; script richer behaviour with World::on_code().
#include <algorithm>
#include <charconv>
#include <limits>
#include <variant>

#include "shell.hpp"

namespace sandboxio::fake::detail {
namespace {

using Value = std::variant<std::monostate, std::int64_t, std::string>;

std::string str(const Value& v) {
  if (std::holds_alternative<std::int64_t>(v)) return std::to_string(std::get<std::int64_t>(v));
  if (std::holds_alternative<std::string>(v)) return std::get<std::string>(v);
  return "None";
}

std::string repr(const Value& v) {
  if (std::holds_alternative<std::string>(v)) {
    std::string out = "'";
    for (char c : std::get<std::string>(v)) {
      if (c == '\'' || c == '\\') out.push_back('\\');
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out.push_back(c);
    }
    return out + "'";
  }
  return str(v);
}

struct PyError {
  std::string type;
  std::string message;
};

class Parser {
 public:
  Parser(std::string text, const std::map<std::string, std::string>& vars)
      : s_(std::move(text)), vars_(vars) {}

  Value expression() {
    Value v = term();
    while (true) {
      skip();
      if (peek('+')) {
        ++i_;
        v = add(v, term());
      } else if (peek('-')) {
        ++i_;
        v = arith(v, term(), '-');
      } else {
        return v;
      }
    }
  }
  bool at_end() {
    skip();
    return i_ >= s_.size();
  }
  std::optional<PyError> error;

 private:
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t'))
      ++i_;
  }
  bool peek(char c) { return i_ < s_.size() && s_[i_] == c; }
  Value add(const Value& a, const Value& b) {
    if (std::holds_alternative<std::string>(a) && std::holds_alternative<std::string>(b)) {
      return std::get<std::string>(a) + std::get<std::string>(b);
    }
    return arith(a, b, '+');
  }
  Value arith(const Value& a, const Value& b, char op) {
    if (!std::holds_alternative<std::int64_t>(a) || !std::holds_alternative<std::int64_t>(b)) {
      if (!error) error = PyError{"TypeError", "unsupported operand type(s)"};
      return {};
    }
    const std::int64_t x = std::get<std::int64_t>(a), y = std::get<std::int64_t>(b);
    // The fake's integers are 64-bit: past that it says so (signed overflow was undefined
    // behaviour here; found by fuzzing).
    std::int64_t r = 0;
    bool overflow = false;
    switch (op) {
      case '+':
        overflow = __builtin_add_overflow(x, y, &r);
        break;
      case '-':
        overflow = __builtin_sub_overflow(x, y, &r);
        break;
      case '*':
        overflow = __builtin_mul_overflow(x, y, &r);
        break;
      case '%':
      case '/':
        if (y == 0) {
          if (!error) error = PyError{"ZeroDivisionError", "integer division or modulo by zero"};
          return {};
        }
        overflow = x == std::numeric_limits<std::int64_t>::min() && y == -1;
        if (!overflow) r = op == '/' ? x / y : x % y;
        break;
      default:
        return {};
    }
    if (overflow) {
      if (!error)
        error = PyError{"OverflowError", "integer result too large for fake://'s 64-bit ints"};
      return {};
    }
    return r;
  }
  Value term() {
    Value v = factor();
    while (true) {
      skip();
      if (peek('*')) {
        ++i_;
        v = arith(v, factor(), '*');
      } else if (peek('/') && i_ + 1 < s_.size() && s_[i_ + 1] == '/') {
        i_ += 2;
        v = arith(v, factor(), '/');
      } else if (peek('%')) {
        ++i_;
        v = arith(v, factor(), '%');
      } else {
        return v;
      }
    }
  }
  Value factor() {
    skip();
    if (i_ >= s_.size()) return fail("SyntaxError", "invalid syntax");
    const char c = s_[i_];
    if (c == '(') {
      ++i_;
      Value v = expression();
      skip();
      if (!peek(')')) return fail("SyntaxError", "'(' was never closed");
      ++i_;
      return v;
    }
    if (c == '-') {
      ++i_;
      return arith(std::int64_t{0}, factor(), '-');
    }
    if (c == '\'' || c == '"') {
      const std::size_t end = s_.find(c, i_ + 1);
      if (end == std::string::npos) return fail("SyntaxError", "unterminated string literal");
      std::string text = s_.substr(i_ + 1, end - i_ - 1);
      i_ = end + 1;
      return unescape_py(text);
    }
    if (c >= '0' && c <= '9') {
      std::int64_t v = 0;
      auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
      if (ec != std::errc{}) return fail("OverflowError", "int too large");
      i_ = static_cast<std::size_t>(p - s_.data());
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i_;
      while (j < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_' || s_[j] == '.'))
        ++j;
      const std::string name = s_.substr(i_, j - i_);
      i_ = j;
      skip();
      if (peek('(')) {
        ++i_;
        Value arg = peek(')') ? Value{} : expression();
        skip();
        if (!peek(')')) return fail("SyntaxError", "'(' was never closed");
        ++i_;
        if (name == "str") return str(arg);
        if (name == "len" && std::holds_alternative<std::string>(arg)) {
          return static_cast<std::int64_t>(std::get<std::string>(arg).size());
        }
        if (name == "int" && std::holds_alternative<std::string>(arg)) {
          std::int64_t v = 0;
          const auto& t = std::get<std::string>(arg);
          auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
          if (ec != std::errc{} || p != t.data() + t.size())
            return fail("ValueError", "invalid literal for int()");
          return v;
        }
        return fail("NameError", "name '" + name + "' is not defined");
      }
      if (name == "None") return {};
      if (name == "True") return std::int64_t{1};
      if (name == "False") return std::int64_t{0};
      auto it = vars_.find(name);
      if (it == vars_.end()) return fail("NameError", "name '" + name + "' is not defined");
      return decode_var(it->second);
    }
    return fail("SyntaxError", "invalid syntax");
  }
  static std::string unescape_py(const std::string& t) {
    std::string out;
    for (std::size_t k = 0; k < t.size(); ++k) {
      if (t[k] == '\\' && k + 1 < t.size()) {
        const char n = t[++k];
        out.push_back(n == 'n' ? '\n' : n == 't' ? '\t' : n == '0' ? '\0' : n);
      } else {
        out.push_back(t[k]);
      }
    }
    return out;
  }
  Value fail(const std::string& type, const std::string& message) {
    if (!error) error = PyError{type, message};
    i_ = s_.size();
    return {};
  }

 public:
  // Variables are stored as tagged strings so a context survives as plain data.
  static std::string encode_var(const Value& v) {
    if (std::holds_alternative<std::int64_t>(v))
      return "i:" + std::to_string(std::get<std::int64_t>(v));
    if (std::holds_alternative<std::string>(v)) return "s:" + std::get<std::string>(v);
    return "n:";
  }
  static Value decode_var(const std::string& e) {
    if (e.rfind("i:", 0) == 0) {
      std::int64_t v = 0;
      std::from_chars(e.data() + 2, e.data() + e.size(), v);
      return v;
    }
    if (e.rfind("s:", 0) == 0) return e.substr(2);
    return {};
  }

 private:
  const std::string s_;  // owned: callers pass substr() temporaries
  const std::map<std::string, std::string>& vars_;
  std::size_t i_ = 0;
};

std::string trim(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::optional<std::string> first_string_literal(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"' || s[i] == '\'') {
      const std::size_t end = s.find(s[i], i + 1);
      if (end != std::string::npos) return s.substr(i + 1, end - i - 1);
    }
  }
  return std::nullopt;
}

std::string host_of(const std::string& url) {
  std::string rest = url;
  if (auto p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
  rest = rest.substr(0, rest.find_first_of("/?#:"));
  return rest;
}

}  // namespace

Outcome run_python(ShellEnv& env, const std::string& code, std::optional<std::string>* result) {
  Outcome out;
  std::map<std::string, std::string> local_vars;
  std::map<std::string, std::string>& vars =
      env.python_vars != nullptr ? *env.python_vars : local_vars;
  std::chrono::nanoseconds clock{0};
  auto emit = [&](StreamKind s, const std::string& data) {
    if (data.empty()) return;
    out.steps.push_back(Step{clock, s, data});
  };
  auto raise = [&](const std::string& type, const std::string& message) {
    const std::string traceback =
        "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n" + type +
        ": " + message + "\n";
    emit(StreamKind::Stderr, traceback);
    out.exit_code = 1;
    out.code_error = CodeError{type, message, traceback};
  };
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= code.size()) {
    std::size_t nl = code.find('\n', start);
    if (nl == std::string::npos) nl = code.size();
    std::string line = code.substr(start, nl - start);
    // ';' separates statements on one line (outside strings, good enough for the subset).
    std::size_t from = 0;
    char quote = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (quote == 0 && (line[i] == '"' || line[i] == '\''))
        quote = line[i];
      else if (quote != 0 && line[i] == quote)
        quote = 0;
      else if (quote == 0 && line[i] == '#') {
        line.resize(i);
        break;
      } else if (quote == 0 && line[i] == ';') {
        lines.push_back(trim(line.substr(from, i - from)));
        from = i + 1;
      }
    }
    lines.push_back(trim(line.substr(from)));
    start = nl + 1;
  }
  while (!lines.empty() && lines.back().empty())
    lines.pop_back();

  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::string& line = lines[n];
    if (line.empty() || line.rfind("import ", 0) == 0 || line.rfind("from ", 0) == 0) continue;
    // Network calls, wherever they appear in the statement.
    for (const char* call : {"urlopen(", "requests.get(", "requests.post(", "httpx.get(",
                             "create_connection(", "urllib.request.urlretrieve("}) {
      const std::size_t at = line.find(call);
      if (at == std::string::npos) continue;
      const auto literal = first_string_literal(line.substr(at));
      const std::string host = literal ? host_of(*literal) : std::string("unknown");
      out.network_attempts.push_back(host);
      clock += std::chrono::milliseconds(5);
      if (env.policy == nullptr || !env.policy->allows(host)) {
        raise(std::string(call).find("create_connection") != std::string::npos
                  ? "socket.gaierror"
                  : "urllib.error.URLError",
              "<urlopen error [Errno -3] Temporary failure in name resolution: '" + host + "'>");
        out.duration = clock;
        return out;
      }
    }
    if (line.find("urlopen(") != std::string::npos || line.find("requests.") != std::string::npos ||
        line.find("httpx.") != std::string::npos ||
        line.find("create_connection(") != std::string::npos) {
      const std::size_t eq = line.find('=');
      if (eq != std::string::npos && line.find('(') > eq)
        vars[trim(line.substr(0, eq))] = "s:fake response";
      continue;
    }
    if (line.rfind("time.sleep(", 0) == 0 && line.back() == ')') {
      Parser p(line.substr(11, line.size() - 12), vars);
      Value v = p.expression();
      if (std::holds_alternative<std::int64_t>(v)) {
        const std::int64_t seconds = std::get<std::int64_t>(v);
        if (seconds < 0) {
          raise("ValueError", "sleep length must be non-negative");
          out.duration = clock;
          return out;
        }
        // At most a day of virtual time per call, as the shell's sleep: far beyond any
        // timeout, and no sum of them overflows the clock.
        clock += std::chrono::seconds(std::min<std::int64_t>(seconds, 86400));
      }
      continue;
    }
    for (const char* exit_call : {"sys.exit(", "exit(", "raise SystemExit("}) {
      if (line.rfind(exit_call, 0) == 0 && line.back() == ')') {
        const std::size_t len = std::string(exit_call).size();
        Parser p(line.substr(len, line.size() - len - 1), vars);
        Value v = p.at_end() ? Value{std::int64_t{0}} : p.expression();
        if (std::holds_alternative<std::string>(v)) {
          emit(StreamKind::Stderr, std::get<std::string>(v) + "\n");
          out.exit_code = 1;
        } else {
          out.exit_code = std::holds_alternative<std::int64_t>(v)
                              ? static_cast<int>(std::get<std::int64_t>(v) & 0xff)
                              : 0;
        }
        out.duration = clock;
        return out;
      }
    }
    if (line.rfind("raise ", 0) == 0) {
      const std::string rest = line.substr(6);
      const std::size_t paren = rest.find('(');
      const std::string type = rest.substr(0, paren);
      std::string message;
      if (paren != std::string::npos && rest.back() == ')') {
        Parser p(rest.substr(paren + 1, rest.size() - paren - 2), vars);
        if (!p.at_end()) message = str(p.expression());
      }
      raise(type, message);
      out.duration = clock;
      return out;
    }
    if (line.rfind("print(", 0) == 0 && line.back() == ')') {
      std::string inner = line.substr(6, line.size() - 7);
      StreamKind stream = StreamKind::Stdout;
      if (const std::size_t f = inner.find("file=sys.stderr"); f != std::string::npos) {
        stream = StreamKind::Stderr;
        inner = trim(inner.substr(0, f));
        if (!inner.empty() && inner.back() == ',') inner.pop_back();
      }
      // Split arguments on top-level commas.
      std::vector<std::string> args;
      int depth = 0;
      char quote = 0;
      std::size_t from = 0;
      for (std::size_t i = 0; i < inner.size(); ++i) {
        const char c = inner[i];
        if (quote != 0) {
          if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
          quote = c;
        } else if (c == '(') {
          ++depth;
        } else if (c == ')') {
          --depth;
        } else if (c == ',' && depth == 0) {
          args.push_back(inner.substr(from, i - from));
          from = i + 1;
        }
      }
      if (!trim(inner).empty()) args.push_back(inner.substr(from));
      std::string text;
      for (std::size_t k = 0; k < args.size(); ++k) {
        Parser p(args[k], vars);
        Value v = p.expression();
        if (p.error || !p.at_end()) {
          const PyError e = p.error.value_or(PyError{"SyntaxError", "invalid syntax"});
          raise(e.type, e.message);
          out.duration = clock;
          return out;
        }
        text += (k ? " " : "") + str(v);
      }
      emit(stream, text + "\n");
      continue;
    }
    // NAME = EXPR
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos && eq > 0 && line[eq - 1] != '=' && line[eq - 1] != '!' &&
        (eq + 1 >= line.size() || line[eq + 1] != '=')) {
      const std::string name = trim(line.substr(0, eq));
      bool ident = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
      for (char c : name)
        ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (ident) {
        Parser p(line.substr(eq + 1), vars);
        Value v = p.expression();
        if (p.error || !p.at_end()) {
          const PyError e = p.error.value_or(PyError{"SyntaxError", "invalid syntax"});
          raise(e.type, e.message);
          out.duration = clock;
          return out;
        }
        vars[name] = Parser::encode_var(v);
        continue;
      }
    }
    // A bare expression: its value is the cell's result when it is the last statement.
    Parser p(line, vars);
    Value v = p.expression();
    if (p.error || !p.at_end()) {
      const PyError e = p.error.value_or(PyError{"SyntaxError", "invalid syntax"});
      raise(e.type, e.message);
      out.duration = clock;
      return out;
    }
    if (n + 1 == lines.size() && result != nullptr && !std::holds_alternative<std::monostate>(v)) {
      *result = repr(v);
    }
  }
  out.duration = clock;
  return out;
}

}  // namespace sandboxio::fake::detail
