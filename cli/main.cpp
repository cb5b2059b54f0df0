// sandboxio: the command line. Exit codes: 0 ok, 1 failure, 2 usage, 130 interrupted.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/errors.hpp"
#include "sandboxio/telemetry.hpp"

using sandboxio::cli::g_interrupted;

namespace {

// An option given once per value (--env A=1 --env B=2), one value per occurrence.
CLI::Option* repeatable(CLI::Option* option) {
  return option->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace

// Spans this process could not export, said once on stderr before it exits (the library itself
// never prints): a collector that is down or refuses them is not a silent loss.
void report_unexported_spans() {
  auto exporter = sandboxio::telemetry::process_exporter();
  if (!exporter) return;
  (void)exporter->flush(std::min(exporter->settings().timeout, std::chrono::milliseconds(3000)));
  const auto stats = exporter->stats();
  if (stats.dropped == 0) return;
  std::cerr << "sandboxio: warning: " << stats.dropped << " span(s) were not exported"
            << (stats.last_error.empty() ? std::string(" (the export queue was full)")
                                         : " (" + stats.last_error + ")")
            << "\n";
}

int main(int argc, char** argv) {
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  CLI::App app{"sandboxio: run AI-agent code in any sandbox, with the same API everywhere"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sandboxio 0.1.0");

  std::string backend;
  auto* demo_cmd = app.add_subcommand(
      "demo", "Create a sandbox, run, stream, probe egress, tear down; each step timed");
  demo_cmd->add_option("backend", backend, "DSN to run on (default: the best backend available)");

  sandboxio::cli::RunArgs run_args;
  auto* run_cmd = app.add_subcommand(
      "run", "Run one command in a fresh sandbox; output streams live, its exit code is ours");
  run_cmd->add_option("--backend,-b", run_args.backend, "DSN (default: the best available)");
  run_cmd->add_option("--timeout,-t", run_args.timeout_seconds, "seconds before it is killed")
      ->check(CLI::PositiveNumber);
  auto* allow_opt =
      run_cmd->add_option("--allow", run_args.allow, "a host the command may reach (repeatable)");
  repeatable(allow_opt);
  run_cmd
      ->add_flag("--learn", run_args.learn,
                 "refuse all egress and print the allow list of what the command tried")
      ->excludes(allow_opt);
  repeatable(
      run_cmd->add_option("--env,-e", run_args.env, "NAME=VALUE for the command (repeatable)"));
  repeatable(run_cmd->add_option("--file,-f", run_args.files,
                                 "LOCAL:REMOTE file to copy in (repeatable)"));
  run_cmd->add_option("--routing", run_args.routing, "routing file choosing the class")
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--tool", run_args.tool, "tool name for the routing file");
  run_cmd->add_option("--tenant", run_args.tenant, "tenant for the routing file");
  run_cmd->add_flag("--json", run_args.json, "print one JSON result instead of streaming");
  run_cmd->add_option("command", run_args.command, "the command and its arguments (after --)");

  bool json = false;
  std::string image = "python:3.12-slim";
  auto* doctor_cmd = app.add_subcommand("doctor", "Check every backend; a fix for each failure");
  doctor_cmd->add_flag("--json", json, "machine-readable verdicts");
  doctor_cmd->add_option("--image", image, "the image the Docker checks use");

  std::string mcp_backend, mcp_http, mcp_routing, mcp_tenant = "*";
  auto* mcp_cmd = app.add_subcommand(
      "mcp", "Serve the MCP tools (stdio, or Streamable HTTP on loopback) over one sandbox");
  mcp_cmd->add_option("--backend,-b", mcp_backend, "DSN (default: the best available)");
  mcp_cmd->add_option("--http", mcp_http, "serve Streamable HTTP on 127.0.0.1:PORT instead");
  mcp_cmd->add_option("--routing", mcp_routing, "routing file choosing the class")
      ->check(CLI::ExistingFile);
  mcp_cmd->add_option("--tenant", mcp_tenant, "tenant for the routing file");

  sandboxio::cli::ReapArgs reap_args;
  auto* reap_cmd = app.add_subcommand(
      "reap", "List the sandboxes sandboxio manages, stopped ones too; remove them with --kill");
  repeatable(reap_cmd->add_option(
      "--backend,-b", reap_args.backends,
      "DSN to look in (default docker://, and e2b:// when E2B_API_KEY is set)"));
  repeatable(
      reap_cmd->add_option("--label,-l", reap_args.labels, "KEY=VALUE the sandboxes must carry"));
  reap_cmd->add_option("--older-than", reap_args.older_than, "only those older than this (10m)");
  reap_cmd->add_flag("--kill", reap_args.kill, "remove them (the default is a dry run)");
  reap_cmd->add_flag("--json", reap_args.json, "machine-readable list");
  reap_cmd->add_flag("--check", reap_args.check,
                     "exit 3 when any is found: a leak check for CI (with --kill, after removing)");

  std::string routing_file;
  auto* routing_cmd = app.add_subcommand("routing", "Work with routing files");
  routing_cmd->require_subcommand(1);
  auto* check_cmd = routing_cmd->add_subcommand("check", "Validate a routing file");
  check_cmd->add_option("file", routing_file, "sandboxio-routing.yaml")->required();
  check_cmd->add_flag("--json", json, "machine-readable summary");

  sandboxio::cli::BenchArgs bench_args;
  auto* bench_cmd = app.add_subcommand(
      "bench", "Time create, run, first output, a stdout stream and kill on one backend");
  bench_cmd->add_option("backend", bench_args.backend,
                        "DSN to measure (default: the best backend available)");
  bench_cmd->add_option("--runs", bench_args.runs, "sandboxes, first outputs and streams (5)")
      ->check(CLI::Range(1, 1000));
  bench_cmd->add_option("--rounds", bench_args.rounds, "run({\"true\"}) rounds (30)")
      ->check(CLI::Range(1, 100000));
  bench_cmd->add_option("--mib", bench_args.mib, "MiB per stdout stream (64)")
      ->check(CLI::Range(1, 4096));
  bench_cmd->add_flag("--json", bench_args.json, "one JSON object: min, median, max per measure");

  sandboxio::cli::ReplayArgs replay_args;
  auto* replay_cmd = app.add_subcommand(
      "replay", "Run a recorded session again offline (SBX_RECORD=DIR) and check it is identical");
  replay_cmd->add_option("trace", replay_args.trace, "a .sbxtrace file")
      ->required()
      ->check(CLI::ExistingFile);
  replay_cmd->add_option("--html", replay_args.html, "also write one static HTML page here");
  replay_cmd->add_flag("--records", replay_args.records,
                       "print only the records, as the audit sink's JSON lines");
  replay_cmd->add_flag("--inputs", replay_args.inputs,
                       "show connections and bytes in the timeline too");
  replay_cmd->add_flag("--quiet,-q", replay_args.quiet, "print only the verdict");

  std::string shell;
  auto* completion_cmd = app.add_subcommand(
      "completion", "Print the shell completion script (source <(sandboxio completion bash))");
  completion_cmd->add_option("shell", shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));

  // Everything after the first "--" is the command, verbatim (CLI11 2.1 lets a repeatable
  // option before it swallow the separator).
  std::vector<std::string> after;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      after.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  try {
    app.parse(argc, argv);
    if (run_cmd->parsed()) {
      run_args.command.insert(run_args.command.end(), after.begin(), after.end());
      if (run_args.command.empty()) throw CLI::RequiredError("command (after --)");
    }
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    int rc = 0;
    if (demo_cmd->parsed()) rc = sandboxio::cli::demo(backend);
    if (bench_cmd->parsed()) rc = sandboxio::cli::bench(bench_args);
    if (run_cmd->parsed()) rc = sandboxio::cli::run(run_args);
    if (doctor_cmd->parsed()) rc = sandboxio::cli::doctor(json, image);
    if (reap_cmd->parsed()) rc = sandboxio::cli::reap(reap_args);
    if (mcp_cmd->parsed()) rc = sandboxio::cli::mcp(mcp_backend, mcp_http, mcp_routing, mcp_tenant);
    if (replay_cmd->parsed()) rc = sandboxio::cli::replay(replay_args);
    if (check_cmd->parsed()) rc = sandboxio::cli::routing_check(routing_file, json);
    if (completion_cmd->parsed()) rc = sandboxio::cli::completion(app, shell, std::cout);
    report_unexported_spans();
    return g_interrupted != 0 ? 130 : rc;
  } catch (const sandboxio::Error& e) {
    std::cerr << "sandboxio: " << e.what() << "\n";
    return g_interrupted != 0 ? 130 : 1;
  } catch (const std::exception& e) {
    std::cerr << "sandboxio: " << e.what() << "\n";
    return g_interrupted != 0 ? 130 : 1;
  }
}
