// `tessera run`: runs a command under a GPU share on this machine, without Kubernetes. It creates a
// share directory (limits page) the way the node agent does for a claim, preloads libvgpu into
// the command, forwards signals to it and returns its exit status.
#pragma once

#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::cli {

struct RunOptions {
  std::string memory;     // --memory, TESSERA_MEMORY_LIMIT syntax
  std::string cores;      // --cores, TESSERA_CORES_LIMIT syntax (percent of GPU time)
  std::string burst;      // --cores-burst, the same syntax
  std::string priority;   // --priority: high, normal, low (empty: normal)
  bool verbose = false;   // --verbose: print the share's usage when the command ends
  std::string devices;    // --device: CUDA_VISIBLE_DEVICES for the command
  std::string share_dir;  // --share-dir: keep the share here (kept afterwards); default: temporary
  std::string libvgpu;    // --libvgpu: path of libvgpu.so; default: found next to this program
  std::vector<std::string> command;
};

// The command's exit status (128 + signal when it was killed), or why tessera itself could not
// start it (main.cc prints the message and exits 125, as `env`, `timeout` and `docker run` do).
Result<int> run(const RunOptions& options);

// Where libvgpu.so is when not given: $TESSERA_LIBVGPU, then <prefix>/lib/libvgpu.so for an
// installed <prefix>/bin/tessera, then the build tree's <build>/libvgpu/libvgpu.so.
Result<std::string> find_libvgpu(const std::string& executable_dir);

}  // namespace tessera::cli
