// `sandboxio replay TRACE`: runs a recorded session's machine again, offline, checks that it
// gives what it gave when recorded, and shows what happened: a timeline, the records as JSON
// lines (byte for byte what the audit sink got), or one static HTML page.
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "sandboxio/flight_recorder.hpp"

namespace sandboxio::cli {
namespace {

/// One line of the timeline.
struct Row {
  std::int64_t at_ns = 0;  // since the session's first input
  OpId op = 0;
  std::string kind;  // "run", "stdout", "done", "failed", "record", "warning", "input"
  std::string text;
  std::string page_text{};  // for the HTML page, when it differs (output with its lines)
};

/// `bytes` with control characters escaped (newlines too, unless `lines`), at most `limit`.
std::string escaped(std::string_view bytes, std::size_t limit, bool lines = false) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && out.size() < limit; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n' && lines) {
      out += '\n';
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (out.size() >= limit) out += "... (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

std::string argv_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain =
        !a.empty() && a.find_first_of(" \t\n'\"\\$`|&;<>(){}*?") == std::string::npos;
    out += plain ? a : "'" + a + "'";
  }
  return escaped(out, 400);
}

std::string millis(std::chrono::nanoseconds d) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << static_cast<double>(d.count()) / 1e6 << " ms";
  return s.str();
}

class Collector final : public flight::ReplayObserver {
 public:
  void input(const flight::Entry& e) override {
    if (!started_) {
      started_ = true;
      first_ = e.now;
    }
    if (e.kind != flight::Kind::Submit && inputs_)
      rows.push_back(Row{since(e.now), 0, "input", describe_input(e)});
  }

  void submitted(const flight::Entry& e, std::optional<OpId> op) override {
    Row r{since(e.now), op.value_or(0), std::string(flight::to_string(e.call)), ""};
    switch (e.call) {
      case flight::Call::Run:
      case flight::Call::Stream:
        r.text = argv_text(e.command.argv) + "  (timeout " + millis(e.command.timeout) + ")";
        break;
      case flight::Call::RunCode:
        r.text = e.code.language + ": " + escaped(e.code.code, 400);
        break;
      case flight::Call::WriteFile:
        r.text = e.text + " (" + std::to_string(e.file.size()) + " bytes)";
        files.push_back(r.text + " written");
        break;
      case flight::Call::ReadFile:
        r.text = e.text;
        if (op) read_paths_[*op] = e.text;
        break;
      case flight::Call::Cancel:
        r.text = "operation " + std::to_string(e.op);
        break;
      default:
        r.text = e.text;
    }
    rows.push_back(std::move(r));
  }

  void event(const Event& ev, Instant now) override {
    const std::int64_t at = since(now);
    std::visit(
        [&](const auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, event::Output>) {
            rows.push_back(Row{at, e.op, std::string(to_string(e.chunk.stream)),
                               escaped(e.chunk.data, 2000), escaped(e.chunk.data, 8000, true)});
          } else if constexpr (std::is_same_v<E, event::Done>) {
            rows.push_back(Row{at, e.op, "done", completion(e.op, e.value)});
          } else if constexpr (std::is_same_v<E, event::Failed>) {
            rows.push_back(Row{at, e.op, "failed", e.problem.describe()});
          } else if constexpr (std::is_same_v<E, event::Cancelled>) {
            rows.push_back(Row{at, e.op, "cancelled",
                               e.possible_orphan ? "the teardown grace ran out" : "stopped"});
          } else if constexpr (std::is_same_v<E, event::Record>) {
            // the line itself arrives stamped, through record()
          } else if constexpr (std::is_same_v<E, event::Warning>) {
            rows.push_back(Row{at, 0, "warning", e.problem.describe()});
          }
        },
        ev);
  }

  void record(const OperationRecord& record) override {
    records.push_back(to_json_line(record));
    std::string line = records.back();
    if (!line.empty() && line.back() == '\n') line.pop_back();
    rows.push_back(Row{rows.empty() ? 0 : rows.back().at_ns, 0, "record", std::move(line)});
  }

  void show_inputs() { inputs_ = true; }

  std::vector<Row> rows;
  std::vector<std::string> records;  // JSON lines, as the audit sink wrote them
  std::vector<std::string> files;

 private:
  std::int64_t since(Instant t) const { return started_ ? (t - first_).count() : 0; }

  std::string describe_input(const flight::Entry& e) const {
    const std::string conn = "connection " + std::to_string(e.conn);
    switch (e.kind) {
      case flight::Kind::Connected:
        return conn + " connected";
      case flight::Kind::Reused:
        return conn + " reused";
      case flight::Kind::ConnectFailed:
        return conn + " failed: " + e.problem.describe();
      case flight::Kind::Bytes:
        return conn + " <- " + std::to_string(e.data.size() + e.kept) + " bytes" +
               (e.kept ? " (" + std::to_string(e.kept) + " offered again)" : "");
      case flight::Kind::Eof:
        return conn + " closed by its peer";
      case flight::Kind::Timeout:
        return "woken at its deadline";
      case flight::Kind::Consumed:
        return "operation " + std::to_string(e.op) + ": " + std::to_string(e.count) +
               " bytes consumed";
      case flight::Kind::WallClock:
        return "wall clock given";
      case flight::Kind::OwnersGone:
        return std::to_string(e.names.size()) + " owners gone";
      case flight::Kind::DriverFeatures:
        return e.features.pass_sockets ? "driver passes sockets" : "driver features: none";
      default:
        return "input";
    }
  }

  std::string completion(OpId op, const Completion& value) {
    return std::visit(
        [&](const auto& v) -> std::string {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, SandboxInfo>) {
            return v.backend + " sandbox " + v.id + " (" + std::string(v.tier.name()) +
                   (v.agent.empty() ? "" : ", " + v.agent) + ")";
          } else if constexpr (std::is_same_v<V, ExecResult>) {
            std::string s = "exit " + (v.exit_code ? std::to_string(*v.exit_code) : "-") + " (" +
                            std::string(to_string(v.termination)) + ") in " + millis(v.duration);
            if (!v.stdout_bytes.empty()) s += "; stdout " + escaped(v.stdout_bytes, 600);
            if (!v.stderr_bytes.empty()) s += "; stderr " + escaped(v.stderr_bytes, 600);
            if (v.error) s += "; " + v.error->name + ": " + escaped(v.error->value, 200);
            return s;
          } else if constexpr (std::is_same_v<V, Bytes>) {
            std::string s = std::to_string(v.size()) + " bytes: " + escaped(v, 200);
            files.push_back(read_paths_[op] + " (" + std::to_string(v.size()) + " bytes) read");
            return s;
          } else if constexpr (std::is_same_v<V, std::vector<FileInfo>>) {
            std::string s = std::to_string(v.size()) + " entries:";
            for (std::size_t i = 0; i < v.size() && i < 20; ++i)
              s += " " + v[i].name;
            return s;
          } else if constexpr (std::is_same_v<V, CodeContext>) {
            return "context " + v.id + " (" + v.language + ")";
          } else if constexpr (std::is_same_v<V, std::vector<ManagedSandbox>>) {
            return std::to_string(v.size()) + " managed sandboxes";
          } else {
            return "ok";
          }
        },
        value);
  }

  bool started_ = false;
  bool inputs_ = false;
  Instant first_{};
  std::map<OpId, std::string> read_paths_{};
};

std::string seconds(std::int64_t ns) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << "+" << static_cast<double>(ns) / 1e9 << "s";
  return s.str();
}

std::string html_escape(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string verdict(const flight::ReplaySummary& s) {
  std::string v = "identical to the recording: " + std::to_string(s.inputs) + " inputs, " +
                  std::to_string(s.events) + " events, " + std::to_string(s.records) + " records";
  if (s.truncated) v += " (the recording stopped at its size bound; replayed up to there)";
  if (!s.complete && !s.truncated) v += " (the trace has no end: the recorder did not close)";
  if (s.extension) v += " (backend extensions were called past the recorder)";
  return v;
}

void write_html(std::ostream& out, const flight::Header& h, const flight::ReplaySummary& s,
                const Collector& c) {
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      << "<title>sandboxio replay: " << html_escape(h.dsn) << "</title>\n"
      << "<style>\n"
         "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fbfbfd}\n"
         "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}\n"
         ".meta{color:#5a6372}.ok{color:#17803d;font-weight:600}\n"
         "table{border-collapse:collapse;width:100%;background:#fff}\n"
         "td{border-top:1px solid #e3e6ec;padding:4px 8px;vertical-align:top}\n"
         "td.t{color:#5a6372;white-space:nowrap;font-variant-numeric:tabular-nums}\n"
         "td.op{color:#5a6372;white-space:nowrap}\n"
         "td.k{font-weight:600;white-space:nowrap}\n"
         "td.x{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}\n"
         "tr.stdout td.k{color:#1f5fbf}tr.stderr td.k{color:#b4541a}\n"
         "tr.failed td.k,tr.warning td.k{color:#b3261e}tr.done td.k{color:#17803d}\n"
         "tr.record td.x{color:#5a6372;font-size:12px}\n"
         "tr.call{background:#eef3fb}\n"
         "ul{margin:0;padding-left:20px;font-family:ui-monospace,monospace}\n"
         "</style></head><body>\n";
  out << "<h1>" << html_escape(h.dsn) << "</h1>\n";
  out << "<div class=\"meta\">recorded by sandboxio " << html_escape(h.version) << "</div>\n";
  out << "<p class=\"ok\">Replayed offline: " << html_escape(verdict(s)) << "</p>\n";
  out << "<h2>Files</h2>\n<ul>\n";
  if (c.files.empty()) out << "<li>none</li>\n";
  for (const std::string& f : c.files)
    out << "<li>" << html_escape(f) << "</li>\n";
  out << "</ul>\n<h2>Timeline</h2>\n<table>\n";
  for (const Row& r : c.rows) {
    const bool call = r.kind != "stdout" && r.kind != "stderr" && r.kind != "done" &&
                      r.kind != "failed" && r.kind != "record" && r.kind != "warning" &&
                      r.kind != "cancelled" && r.kind != "input";
    out << "<tr class=\"" << (call ? "call" : html_escape(r.kind)) << "\"><td class=\"t\">"
        << seconds(r.at_ns) << "</td><td class=\"op\">" << (r.op ? "#" + std::to_string(r.op) : "")
        << "</td><td class=\"k\">" << html_escape(r.kind) << "</td><td class=\"x\">"
        << html_escape(r.page_text.empty() ? r.text : r.page_text) << "</td></tr>\n";
  }
  out << "</table>\n</body></html>\n";
}

}  // namespace

int replay(const ReplayArgs& args) {
  auto bytes = read_trace(args.trace);
  if (!bytes) {
    std::cerr << "sandboxio: " << bytes.problem().describe() << "\n";
    return 1;
  }
  flight::TraceReader trace(bytes.value());
  if (!trace.header()) {
    std::cerr << "sandboxio: " << trace.header().problem().describe() << "\n";
    return 1;
  }
  const flight::Header& header = trace.header().value();
  auto machine = machine_for_replay(header);
  if (!machine) {
    std::cerr << "sandboxio: cannot make the machine for " << header.dsn << ": "
              << machine.problem().describe() << "\n";
    return 1;
  }
  Collector collector;
  if (args.inputs) collector.show_inputs();
  auto summary = flight::replay(*machine.value(), trace, &collector);
  if (args.records) {
    for (const std::string& line : collector.records)
      std::cout << line;
  } else if (!args.quiet) {
    std::cout << "# " << header.dsn << " (recorded by sandboxio " << header.version << ")\n";
    for (const Row& r : collector.rows) {
      std::cout << seconds(r.at_ns) << "  " << (r.op ? "#" + std::to_string(r.op) : "  ") << "  "
                << r.kind << "  " << r.text << "\n";
    }
  }
  if (!summary) {
    std::cerr << "sandboxio: " << summary.problem().describe() << "\n";
    return 1;
  }
  if (!args.html.empty()) {
    std::ofstream out(args.html, std::ios::binary | std::ios::trunc);
    write_html(out, header, summary.value(), collector);
    if (!out) {
      std::cerr << "sandboxio: cannot write " << args.html << "\n";
      return 1;
    }
  }
  if (!args.records) {
    std::cerr << "sandboxio: " << verdict(summary.value()) << "\n";
    const flight::RecorderStats& moved = summary.value().recorded;
    if (summary.value().complete)
      std::cerr << "sandboxio: the session moved " << moved.bytes_in << " bytes in and "
                << moved.bytes_out << " out; its trace is " << bytes.value().size() << " bytes\n";
  }
  return 0;
}

}  // namespace sandboxio::cli
