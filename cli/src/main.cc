// tessera: the command-line tool. `tessera run` confines a command to a GPU share on this machine.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "run_command.h"
#include "views/shares_view.h"
#include "views/top_view.h"

namespace {
// tessera's own failures, as `env`, `timeout` and `docker run` report them.
constexpr int kCannotRun = 125;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: share NVIDIA GPUs between tenants with enforced quotas"};
  app.require_subcommand(1);

  tessera::cli::RunOptions run;
  auto* run_cmd = app.add_subcommand(
      "run", "Run a command under a GPU share: its CUDA processes together get at most the quota");
  run_cmd->add_option("--memory", run.memory,
                      "GPU memory: one size for every GPU (8Gi, 8G, 8192Mi, bytes) or "
                      "<index>=<size>,GPU-<uuid>=<size>; GPUs not named are unlimited");
  run_cmd->add_option("--cores", run.cores,
                      "GPU time, percent: one value for every GPU (30) or <index>=<percent>,"
                      "GPU-<uuid>=<percent>; GPUs not named are not limited");
  run_cmd->add_option("--cores-burst", run.burst,
                      "Percent the share may use while no other process uses the GPU (same "
                      "syntax; at least --cores)");
  run_cmd->add_option("--priority", run.priority,
                      "high, normal or low: the share yields the GPU to active shares of higher "
                      "priority");
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
  tessera::cli::add_shares_command(app);
  tessera::cli::add_top_command(app);

  CLI11_PARSE(app, argc, argv);
  if (!*run_cmd) return 0;
  const tessera::Result<int> status = tessera::cli::run(run);
  if (!status.is_ok()) {
    std::fprintf(stderr, "tessera run: %s\n", status.status().message().c_str());
    return kCannotRun;
  }
  return *status;
}
