// The compute-burn samples' command lines. Parsed with CLI11 in burn_cli.cc alone, compiled once
// into tessera_samples_burn: the mains (compute-burn-runtime's twice, for its -ptsz build) do not
// include CLI11, the costliest header of the samples.
#pragma once

#include <optional>
#include <string>

#include "burn_plan.h"
#include "common/common_options.h"

namespace tessera::samples {

// compute-burn: the device, the entry-point resolution, the burn options and --launch (a driver
// launch path).
struct ComputeBurnOptions {
  CommonOptions common;
  BurnOptions burn;
  std::string launch = "kernel";
};

// compute-burn-runtime: --device, the burn options, --launch (a runtime launch path) and
// --stream (created or default).
struct ComputeBurnRuntimeOptions {
  int device = 0;
  BurnOptions burn;
  std::string launch = "chevron";
  std::string stream = "created";
};

// Each fills `options` from the command line. The exit status when the command line ends the
// program (--help: 0; a usage error, already printed: its code); nullopt when the sample runs.
std::optional<int> parse_compute_burn_command_line(int argc, char** argv,
                                                   ComputeBurnOptions& options);
std::optional<int> parse_compute_burn_runtime_command_line(int argc, char** argv,
                                                           ComputeBurnRuntimeOptions& options);

}  // namespace tessera::samples
