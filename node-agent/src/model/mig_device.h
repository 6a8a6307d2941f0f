// A MIG device as the share lifecycle sees it (mig-facts.md §1, §5): a GPU instance of a parent GPU
// at a placement, either one that already exists (static: published as gpu-<minor>-mig-gi<GIID>)
// or one Tessera creates at prepare (dynamic: gpu-<minor>-mig-<profile>-<start>). Pure values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::agent {

// Memory slices, as NVML's nvmlGpuInstancePlacement_t: the first one occupied and how many.
struct MigPlacement {
  unsigned start = 0;
  unsigned size = 0;
  bool overlaps(const MigPlacement& other) const {
    return start < other.start + other.size && other.start < start + size;
  }
  bool operator==(const MigPlacement&) const = default;
};

// The capability device nodes of a MIG device: /dev/nvidia-caps/nvidia-cap<minor>, character
// devices of nvidia-caps' major.
struct MigCapsNodes {
  unsigned major = 0;
  unsigned gi_minor = 0;
  unsigned ci_minor = 0;
  bool operator==(const MigCapsNodes&) const = default;
};

enum class MigKind { kStatic, kDynamic };

struct MigDeviceRef {
  MigKind kind = MigKind::kStatic;
  std::string parent_uuid;  // "GPU-..."
  unsigned profile_id = 0;  // NVML's GPU instance profile ID (9 for 3g on Hopper), not its index
  std::string profile;      // "3g.71gb"
  MigPlacement placement;
  unsigned multiprocessors = 0;  // the instance's SMs (its default compute instance has them all)
  // A static device's instance always; a dynamic one's once prepare created it (then also
  // ShareSpec::uuid, the MIG UUID).
  std::optional<unsigned> gi_id;
  std::optional<unsigned> ci_id;
  // Read at prepare for the CDI spec (the instance's IDs known by then).
  std::optional<MigCapsNodes> caps;
  bool operator==(const MigDeviceRef&) const = default;
};

}  // namespace tessera::agent
