// The programs the fake:// shell knows, by name (dispatch's table): each is a member of the
// interpreter that takes its call and returns its exit status, writing through the
// interpreter's redirections in virtual time.
#include "interp.hpp"

namespace sandboxio::fake::detail::sh {

int Interp::network_call(const std::string& tool, const std::string& url, const Target& out,
                         const Target& err) {
  const std::string host = host_of(url);
  out_.network_attempts.push_back(host);
  clock_ += std::chrono::milliseconds(5);
  if (env_.policy != nullptr && env_.policy->allows(host)) {
    write(out.kind, "fake response from " + host + "\n", out.path);
    return 0;
  }
  if (tool == "wget") return fail(err, "wget: unable to resolve host address '" + host + "'\n", 4);
  return fail(err, "curl: (6) Could not resolve host: " + host + "\n", 6);
}

int Interp::run_sh(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& err = call.err;
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

int Interp::run_setsid(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& out = call.out;
  const Target& err = call.err;
  std::size_t skip = base == "timeout" ? 2 : 1;
  if (argv.size() <= skip) return fail(err, base + ": missing operand\n", 1);
  return dispatch(
      std::vector<std::string>(argv.begin() + static_cast<std::ptrdiff_t>(skip), argv.end()), out,
      err);
}

int Interp::run_exit(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  exited_ = true;
  if (argv.size() > 1) {
    auto v = to_int(argv[1]);
    if (!v) return fail(err, "sh: 1: exit: Illegal number: " + argv[1] + "\n", 2);
    return static_cast<int>(*v & 0xff);
  }
  return status_;
}

int Interp::run_echo(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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

int Interp::run_printf(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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

int Interp::run_sleep(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  if (argv.size() < 2) return fail(err, "sleep: missing operand\n", 1);
  auto d = to_seconds(argv[1]);
  if (!d) return fail(err, "sleep: invalid time interval '" + argv[1] + "'\n", 1);
  clock_ += *d;
  return 0;
}

int Interp::run_cat(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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

int Interp::run_head(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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
    data.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(bytes.value_or(0), 0, 1LL << 31)),
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

int Interp::run_seq(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
  std::int64_t first = 1, last = 0;
  if (argv.size() == 2) last = to_int(argv[1]).value_or(0);
  if (argv.size() >= 3) first = to_int(argv[1]).value_or(1), last = to_int(argv[2]).value_or(0);
  std::string text;
  for (std::int64_t v = first; v <= last && v - first < 1'000'000; ++v)
    text += std::to_string(v) + "\n";
  emit(text);
  return 0;
}

int Interp::run_pwd(const Call& call) {
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
  emit(env_.cwd + "\n");
  return 0;
}

int Interp::run_cd(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  const std::string path = Vfs::normalise(env_.cwd, argv.size() > 1 ? argv[1] : "/home/user");
  const Node* n = env_.fs->get(path);
  if (n == nullptr || !n->dir)
    return fail(err, "sh: 1: cd: can't cd to " + (argv.size() > 1 ? argv[1] : "") + "\n", 2);
  env_.cwd = path;
  return 0;
}

int Interp::run_env(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& out = call.out;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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

int Interp::run_export(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::size_t eq = argv[i].find('=');
    if (eq != std::string::npos) env_.env[argv[i].substr(0, eq)] = argv[i].substr(eq + 1);
  }
  return 0;
}

int Interp::run_mkdir(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
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
                "mkdir: cannot create directory '" + argv[i] + "': No such file or directory\n", 1);
    } else {
      env_.fs->make_dir(path);
    }
  }
  return rc;
}

int Interp::run_rm(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
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

int Interp::run_ls(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
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

int Interp::run_test(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& err = call.err;
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

int Interp::run_kill(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
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

int Interp::run_pgrep(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const Target& err = call.err;
  auto emit = [&](const std::string& data) { write(call.out.kind, data, call.out.path); };
  if (argv.size() < 2) return fail(err, "pgrep: no matching criteria specified\n", 2);
  const std::string& pattern = argv.back();
  std::vector<int> pids = env_.find_processes ? env_.find_processes(pattern) : std::vector<int>{};
  std::string text;
  for (int p : pids) {
    if (p != env_.pid) text += std::to_string(p) + "\n";  // pgrep never lists itself
  }
  emit(text);
  return text.empty() ? 1 : 0;
}

int Interp::run_curl(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& out = call.out;
  const Target& err = call.err;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (!argv[i].empty() && argv[i][0] != '-') return network_call(base, argv[i], out, err);
  }
  return fail(err, base + ": no URL specified\n", 2);
}

int Interp::run_python_c(const Call& call) {
  const std::vector<std::string>& argv = call.argv;
  const std::string& base = call.base;
  const Target& out = call.out;
  const Target& err = call.err;
  if (argv.size() >= 3 && argv[1] == "-c") {
    Outcome py = run_python(env_, argv[2]);
    // Each piece of output at its own time: a print after time.sleep() comes after the sleep.
    const auto began = clock_;
    for (const Step& s : py.steps) {
      clock_ = began + s.at;
      write(s.stream == StreamKind::Stdout ? out.kind : err.kind, s.data,
            s.stream == StreamKind::Stdout ? out.path : err.path);
    }
    clock_ = began + py.duration;
    for (auto& a : py.network_attempts)
      out_.network_attempts.push_back(a);
    return py.exit_code;
  }
  return fail(err, base + ": fake:// runs only 'python3 -c CODE'\n", 2);
}

int Interp::dispatch(const std::vector<std::string>& argv, const Target& out, const Target& err) {
  const std::string& name = argv[0];
  const std::string base =
      name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
  // The programs fake:// knows, by name (a path's last component).
  static constexpr std::pair<std::string_view, Builtin> kBuiltins[] = {
      {"sh", &Interp::run_sh},
      {"bash", &Interp::run_sh},
      {"dash", &Interp::run_sh},
      {"setsid", &Interp::run_setsid},
      {"nohup", &Interp::run_setsid},
      {"exec", &Interp::run_setsid},
      {"command", &Interp::run_setsid},
      {"timeout", &Interp::run_setsid},
      {"true", &Interp::run_true},
      {":", &Interp::run_true},
      {"false", &Interp::run_false},
      {"exit", &Interp::run_exit},
      {"echo", &Interp::run_echo},
      {"printf", &Interp::run_printf},
      {"sleep", &Interp::run_sleep},
      {"cat", &Interp::run_cat},
      {"head", &Interp::run_head},
      {"seq", &Interp::run_seq},
      {"pwd", &Interp::run_pwd},
      {"cd", &Interp::run_cd},
      {"env", &Interp::run_env},
      {"printenv", &Interp::run_env},
      {"export", &Interp::run_export},
      {"mkdir", &Interp::run_mkdir},
      {"rm", &Interp::run_rm},
      {"ls", &Interp::run_ls},
      {"test", &Interp::run_test},
      {"[", &Interp::run_test},
      {"kill", &Interp::run_kill},
      {"pgrep", &Interp::run_pgrep},
      {"curl", &Interp::run_curl},
      {"wget", &Interp::run_curl},
      {"python3", &Interp::run_python_c},
      {"python", &Interp::run_python_c},
  };
  for (const auto& [program, run] : kBuiltins) {
    if (program == base) return (this->*run)(Call{argv, base, out, err});
  }
  // Not a known program: a path that exists but cannot run, or nothing at all.
  if (name.find('/') != std::string::npos) {
    const Node* n = env_.fs->get(Vfs::normalise(env_.cwd, name));
    if (n != nullptr) return fail(err, "sh: 1: " + name + ": Permission denied\n", 126);
  }
  return fail(err, "sh: 1: " + name + ": not found\n", 127);
}

}  // namespace sandboxio::fake::detail::sh
