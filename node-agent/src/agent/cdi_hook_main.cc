// tessera-cdi-hook apply-memory-limits --share NAME --gpu UUID --soft BYTES --hard BYTES
//   --record DIR
// The OCI state on stdin (runtime-spec state.md). Exit 0 when the partition is set and read back;
// else 1, the reason on stderr (the runtime then refuses the container). Environment, for tests:
// TESSERA_HOOK_PROC_ROOT, TESSERA_HOOK_MOUNTINFO, TESSERA_HOOK_NVML_LIBRARY.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "share/partition_hook.h"

int main(int argc, char** argv) {
  using namespace tessera::agent;
  const std::vector<std::string> args(argv + 1, argv + argc);
  tessera::Result<HookRequest> request = parse_hook_arguments(args);
  if (!request.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", kCdiHookName, request.status().message().c_str());
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  tessera::Result<OciState> state = parse_oci_state(text);
  if (!state.is_ok()) {
    std::fprintf(stderr, "%s: share %s, GPU %s: %s\n", kCdiHookName,
                 request->partition.share.c_str(), request->partition.gpu.c_str(),
                 state.status().message().c_str());
    return 1;
  }
  HookEnvironment environment;
  if (const char* value = std::getenv("TESSERA_HOOK_PROC_ROOT")) environment.proc_root = value;
  if (const char* value = std::getenv("TESSERA_HOOK_MOUNTINFO")) environment.mountinfo = value;
  if (const char* value = std::getenv("TESSERA_HOOK_NVML_LIBRARY"))
    environment.nvml_library = value;
  if (tessera::Status applied = run_apply_memory_limits(*request, *state, environment);
      !applied.is_ok()) {
    std::fprintf(stderr, "%s: share %s: %s\n", kCdiHookName, request->partition.share.c_str(),
                 applied.message().c_str());
    return 1;
  }
  return 0;
}
