// The driver's wall under the agent (docs/driver-partitions.md): on a node whose driver holds
// per-cgroup memory partitions (R615, cgroup v2), each share's containers get soft = the share's
// memory request and hard = its memory limit on their own cgroup, from a CDI hook Tessera ships
// (tessera-cdi-hook apply-memory-limits, installed beside the shim). The runtime runs it as a
// createRuntime hook: in the runtime namespace, after the container's cgroup exists and its init
// process is in it, before the user's program starts. It fails closed: a partition that cannot be
// set (and read back) is a non-zero exit naming the GPU, the cgroup and the value, and the runtime
// refuses the container; nothing is left half-set (apply_partitions undoes).
//
// Each applied partition is recorded under the agent's state folder (never in the share folder,
// which tenants write): <record dir>/<claim UID>/<share>.<container id>.<gpu>.json. The agent's
// partition check re-reads and repairs what the records name, and unprepare zeroes the soft limit
// of the recorded cgroups that still exist.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/share_spec.h"
#include "tessera/nvml.h"
#include "tessera/status.h"

namespace tessera::agent {

inline constexpr char kCdiHookName[] = "tessera-cdi-hook";
inline constexpr char kApplyMemoryLimits[] = "apply-memory-limits";

// What the agent's CDI specs need to carry the hook: set only where the capability was detected.
struct PartitionHookConfig {
  std::string path;            // the hook binary on the host (the runtime namespace)
  std::string record_dir;      // <state>/partitions
  std::set<std::string> gpus;  // the GPUs whose probe succeeded
};

// One GPU's partition on one container's cgroup, as the hook is told it and as it records it.
struct PartitionRecord {
  std::string share;         // ShareSpec::name()
  std::string container_id;  // the OCI state's id ("" in the hook's arguments)
  std::string cgroup;        // the cgroup v2 directory ("" in the hook's arguments)
  std::string gpu;           // UUID
  uint64_t soft = 0;         // bytes: the memory request
  uint64_t hard = 0;         // bytes: the memory limit
  bool operator==(const PartitionRecord&) const = default;
};

// The share's (soft, hard) from its limits: hard = the memory limit, soft = the request capped
// by it (as `tessera run`). nullopt when the share has no memory limit (nothing to wall).
std::optional<std::pair<uint64_t, uint64_t>> partition_bytes(uint64_t memory_request,
                                                             uint64_t memory_limit);

// What the share's containers get on its GPU (share, gpu, soft, hard), or nullopt without a
// memory limit.
std::optional<PartitionRecord> share_partition(const ShareSpec& share);

// The hook's argv after the program name: apply-memory-limits --share NAME --gpu UUID
// --soft BYTES --hard BYTES --record DIR (what build_cdi_spec writes).
std::vector<std::string> hook_arguments(const PartitionRecord& partition,
                                        const std::string& record_dir);

struct HookRequest {
  PartitionRecord partition;  // share, gpu, soft, hard
  std::string record_dir;     // <state>/partitions/<claim UID>
};
// Parses the arguments after the program name; kInvalidArgument naming the argument and value.
Result<HookRequest> parse_hook_arguments(const std::vector<std::string>& args);

// The fields of the OCI state (runtime-spec state.md) the hook needs.
struct OciState {
  std::string id;
  int pid = 0;
  std::string status;
  std::string bundle;
};
// Parses the state JSON a runtime writes on a hook's stdin; kInvalidArgument saying what is
// missing (a state without a pid: the hook was put where no process exists yet).
Result<OciState> parse_oci_state(const std::string& text);

struct HookEnvironment {
  std::string proc_root = "/proc";                   // the container's pid is the host's
  std::string mountinfo = "/proc/self/mountinfo";    // where the cgroup2 hierarchy is mounted
  std::string nvml_library = nvml::kDefaultLibrary;  // libnvidia-ml.so.1
};

// The hook: resolves the container's cgroup (the pid's 0:: line under a cgroup2 mount), applies
// soft and hard on its GPU (set, then read back), records it. Every error names the GPU, the
// cgroup and the value. A record that cannot be written undoes the partition.
Status run_apply_memory_limits(const HookRequest& request, const OciState& state,
                               const HookEnvironment& environment);

// The record file of a partition, and every record under <record dir>/<claim UID>. Unreadable
// records are skipped (named in `problems` when given).
std::string partition_record_path(const std::string& claim_record_dir,
                                  const PartitionRecord& record);
std::string partition_record_json(const PartitionRecord& record);
Result<PartitionRecord> parse_partition_record(const std::string& text);
std::vector<PartitionRecord> read_partition_records(const std::string& claim_record_dir,
                                                    std::vector<std::string>* problems = nullptr);

}  // namespace tessera::agent
