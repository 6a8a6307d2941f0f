// The DRA driver's name, in one place: the kubelet plugin's name and socket folder, the driver of
// the ResourceSlices and of the allocation results the agent reads, and the VgpuConfig API group.
#pragma once

namespace tessera::vgpu_config {

inline constexpr char kDriverName[] = "vgpu.tessera.dev";

}  // namespace tessera::vgpu_config
