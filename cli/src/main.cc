// tessera: the command-line tool. `tessera run` confines a command to a GPU share on this machine;
// `tessera shares`, `top` and `events` show the shares of this node (`shares --cluster`: of every
// node). Exit statuses: exit_codes.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "exit_codes.h"
#include "run_command.h"
#include "tessera/log.h"
#include "tessera/version.h"
#include "views/events.h"
#include "views/local_node.h"
#include "views/shares_view.h"
#include "views/top_view.h"

namespace {

// "0.1.0 (commit 0123456789ab)", or "0.1.0" when the build had no git checkout.
std::string version_text() {
  std::string text = tessera::kVersion;
  if (*tessera::kGitCommit != '\0') text += std::string(" (commit ") + tessera::kGitCommit + ")";
  return text;
}

// `tessera version [-o text|json|yaml]`.
void add_version_command(CLI::App& app) {
  auto output = std::make_shared<std::string>("text");
  CLI::App* command = app.add_subcommand("version", "Print the version of this build");
  command->add_option("-o,--output", *output, "text, json or yaml")
      ->check(CLI::IsMember({"text", "json", "yaml"}));
  command->callback([output] {
    nlohmann::ordered_json document = {{"version", tessera::kVersion}, {"commit", nullptr}};
    if (*tessera::kGitCommit != '\0') document["commit"] = tessera::kGitCommit;
    if (*output == "json") {
      std::printf("%s\n", document.dump(2).c_str());
    } else if (*output == "yaml") {
      std::fputs(tessera::cli::json_to_yaml(document).c_str(), stdout);
    } else {
      std::printf("tessera %s\n", version_text().c_str());
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: share NVIDIA GPUs between tenants with enforced quotas"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera " + version_text());
  app.footer(
      "Exit status: 0 done; 1 the command failed; 2 a bad flag, value or command. `tessera run`: "
      "the command's own, 125 when tessera failed (a bad flag too), 126, 127, 128+N (see `tessera "
      "run --help`).");
  // Logs (not a command's output): given before or after the subcommand.
  app.fallthrough();
  int verbosity = 0;
  std::string log_format = "text";
  app.add_flag("-v", verbosity, "More detail in the log on stderr: -v debug, -vv trace");
  app.add_option("--log-format", log_format, "Log lines as text or json (one object per line)")
      ->check(CLI::Validator(
          [](const std::string& format) {
            return tessera::log::parse_format(format).status().message();
          },
          "text|json", "log format"))
      ->capture_default_str();

  tessera::cli::RunOptions run;
  auto* run_cmd = app.add_subcommand(
      "run", "Run a command under a GPU share: its CUDA processes together get at most the quota");
  run_cmd
      ->add_option("--memory", run.memory,
                   "GPU memory request, guaranteed: one size for every GPU (8Gi, 8G, 8192Mi, "
                   "bytes) or <index>=<size>,GPU-<uuid>=<size>; GPUs not named are unlimited")
      ->check(tessera::cli::refuse_empty_value);
  run_cmd
      ->add_option("--memory-limit", run.memory_limit,
                   "GPU memory limit, the wall (same syntax; at least --memory, default "
                   "--memory): bytes above the request are borrowed")
      ->check(tessera::cli::refuse_empty_value);
  run_cmd
      ->add_option("--cores", run.cores,
                   "GPU time request, guaranteed percent: one value for every GPU (30) or "
                   "<index>=<percent>,GPU-<uuid>=<percent>; 0 is best-effort (only time others "
                   "leave idle); GPUs not named are not limited")
      ->check(tessera::cli::refuse_empty_value);
  run_cmd
      ->add_option("--cores-limit,--cores-burst", run.cores_limit,
                   "Most GPU time the share may reach, percent (same syntax; at least --cores; "
                   "default --cores, or 100 for --cores 0). --cores-burst is its old name")
      ->check(tessera::cli::refuse_empty_value);
  run_cmd
      ->add_option("--priority", run.priority,
                   "high, normal or low: the share yields the GPU to active shares of higher "
                   "priority")
      ->check(tessera::cli::refuse_empty_value);
  run_cmd->add_flag("--verbose", run.verbose,
                    "Print what the share used (GPU time, gate, launches) when the command ends");
  run_cmd->add_option("--device", run.devices,
                      "GPUs the command sees (CUDA_VISIBLE_DEVICES: indices or UUIDs)");
  run_cmd->add_option("--share-dir", run.share_dir,
                      "Create (or update) the share in this directory and keep it; default: a "
                      "temporary directory removed when the command ends");
  run_cmd->add_option("--libvgpu", run.libvgpu,
                      "Path of libvgpu.so (default: found beside tessera)");
  run_cmd->add_option("command", run.command, "The command and its arguments (after --)")
      ->required();
  run_cmd->prefix_command(false);
  run_cmd->footer(tessera::cli::kRunExitStatusHelp);
  add_version_command(app);
  tessera::cli::add_shares_command(app);
  tessera::cli::add_top_command(app);

  // Without an agent, `tessera events` diffs snapshots of this user's `tessera run` shares.
  tessera::cli::add_events_command(app, [] { return tessera::cli::read_local_node({}); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    const std::vector<std::string> rest = app.remaining();
    if (app.get_subcommands().empty() && !rest.empty() && rest[0].rfind('-', 0) != 0) {
      std::string commands;
      for (const CLI::App* command : app.get_subcommands({}))
        commands += (commands.empty() ? "" : ", ") + command->get_name();
      std::fprintf(stderr, "tessera: unknown command \"%s\" (commands: %s)\n", rest[0].c_str(),
                   commands.c_str());
      return tessera::cli::kExitUsage;
    }
    std::fprintf(stderr, "tessera: %s\n", error.what());
    // `tessera run`'s status is its command's: a bad flag is tessera's own failure (125), as
    // podman run and docker run report it. The other commands: a usage error (2).
    return run_cmd->parsed() ? tessera::cli::kRunFailed : tessera::cli::kExitUsage;
  }
  tessera::log::Options logging;
  logging.logger = "tessera";
  for (const CLI::App* command : app.get_subcommands()) logging.logger += " " + command->get_name();
  logging.level = tessera::log::verbose(tessera::log::Level::kInfo, verbosity);
  logging.format = tessera::log::parse_format(log_format).value();
  logging.text_style = tessera::log::TextStyle::kCommand;
  tessera::log::configure(std::move(logging));
  if (!*run_cmd) return tessera::cli::kExitOk;
  const tessera::Result<int> status = tessera::cli::run(run);
  if (!status.is_ok()) {
    tessera::log::error(status.status().message());
    return tessera::cli::kRunFailed;
  }
  return *status;
}
