// The memory-fill samples' command lines. Parsed with CLI11 in fill_cli.cc alone, compiled once
// into tessera_samples_fill: the mains (memory-fill-runtime's twice, for its -ptsz build) do not
// include CLI11, the costliest header of the samples.
#pragma once

#include <optional>
#include <string>

#include "common/common_options.h"
#include "fill_plan.h"

namespace tessera::samples {

// memory-fill: the device, the entry-point resolution, --api (a driver allocation API) and the
// fill options.
struct MemoryFillOptions {
  CommonOptions common;
  std::string api = "alloc";
  FillOptions fill;
};

// memory-fill-runtime: --device, --api (a runtime allocation call) and the fill options.
struct MemoryFillRuntimeOptions {
  int device = 0;
  std::string api = "cudaMalloc";
  FillOptions fill;
};

// Each fills `options` from the command line. The exit status when the command line ends the
// program (--help: 0; a usage error, already printed: its code); nullopt when the sample runs.
std::optional<int> parse_memory_fill_command_line(int argc, char** argv,
                                                  MemoryFillOptions& options);
std::optional<int> parse_memory_fill_runtime_command_line(int argc, char** argv,
                                                          MemoryFillRuntimeOptions& options);

}  // namespace tessera::samples
