// MIG in the node's ResourceSlices (docs/resource-model.md, "MIG"), chosen by --mig-strategy:
// - none: every GPU is one device gpu-<minor> (MIG is not looked at);
// - static: a GPU in MIG mode is published as its existing GPU instances, one device
//   gpu-<minor>-mig-gi<GIID> each (those with a compute instance); a GPU not in MIG mode whole;
// - dynamic: a MIG-capable GPU is published whole (gpu-<minor>) and as one device per profile and
//   placement, gpu-<minor>-mig-<profile>-<start>, created at prepare; all of them consume the
//   GPU's counter set gpu-<minor>-counters (KEP-4815): memory-slice-0..7 (1 each), multiprocessors
//   and memory (the largest profile's), the whole GPU all of it, a MIG device its slices, SMs and
//   memory. A placement overlapping an instance Tessera did not create is left out (as is the
//   whole GPU then).
// Every device has the type attribute ("gpu" or "mig"); MIG devices the profile, parentUUID,
// placementStart, placementSize, uuid (static) and the parent's productName, architecture,
// cudaComputeCapability, driverVersion and pciBusID; capacities memory (the instance's) and cores
// (100 = all the instance's SMs' time) with the whole GPU's request policies, so shares work
// inside an instance.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mig/mig_inventory.h"
#include "model/node_device.h"
#include "tessera/gpu_info.h"
#include "tessera/status.h"

namespace tessera::agent {

enum class MigStrategy { kNone, kStatic, kDynamic };
std::optional<MigStrategy> parse_mig_strategy(const std::string& text);  // none|static|dynamic
const char* to_string(MigStrategy strategy);

// Where the counter sets go (mig-facts.md §4.2): kCombined, in each GPU's slice with its devices
// (Kubernetes 1.34); kSplit, in slices of their own, at most 8 sets each, the devices in others
// (1.35 and later: a slice holds devices or counters, never both). kAuto: from the API server's
// version.
enum class SliceShape { kAuto, kCombined, kSplit };
std::optional<SliceShape> parse_slice_shape(const std::string& text);  // auto|combined|split
const char* to_string(SliceShape shape);
// The API server's /version gitVersion ("v1.35.2", "v1.36.0-gke.100") -> kSplit from 1.35, else
// kCombined; kInvalidArgument naming the text when it is not a version.
Result<SliceShape> slice_shape_for_version(const std::string& git_version);

inline constexpr size_t kMaxCounterSetsPerSlice = 8;  // ResourceSliceMaxCounterSets (1.35+)

struct MigPublication {
  MigStrategy strategy = MigStrategy::kNone;
  SliceShape shape = SliceShape::kSplit;  // resolved (not kAuto)
  std::vector<MigGpu> gpus;               // NVML's MIG view of each GPU, by uuid
  // (parent UUID, GPU instance ID) of the instances Tessera created (dynamic): not foreign.
  std::set<std::pair<std::string, unsigned>> tessera_instances;
  const MigGpu* gpu(const std::string& uuid) const;
};

// One device as it is published, and how it consumes the GPU's counters.
struct PlannedDevice {
  NodeDevice node;
  bool whole_gpu = false;
  bool consumes_counters = false;  // dynamic: a MIG device its share, the whole GPU all of them
};

struct CounterSetPlan {
  std::string name;  // gpu-<minor>-counters
  unsigned memory_slices = 0;
  unsigned multiprocessors = 0;
  uint64_t memory_bytes = 0;
};

struct PlannedGpu {
  std::vector<PlannedDevice> devices;
  std::optional<CounterSetPlan> counters;
};

// What `gpu` is published as (pure). `mig` null or strategy none: the whole GPU only.
PlannedGpu plan_gpu(const GpuInfo& gpu, const MigPublication* mig);
std::string counter_set_name(unsigned minor);  // "gpu-<minor>-counters"
// spec.sharedCounters[] entry of a plan.
nlohmann::json counter_set_json(const CounterSetPlan& plan);
// A device's consumesCounters entry (the whole GPU: everything in the set).
nlohmann::json counter_consumption_json(const PlannedDevice& device, const CounterSetPlan& plan);

}  // namespace tessera::agent
