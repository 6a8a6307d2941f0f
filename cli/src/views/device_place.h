// Where a share's device is on the node: its GPU, and the MIG instance when the share sits inside
// one (the local API lists instances under their GPU: Gpu.mig_instances). `tessera shares` and
// `tessera top` name the place the same way.
#pragma once

#include <string>

#include "tessera/node/v1/node_api.pb.h"

namespace tessera::cli {

struct DevicePlace {
  const node::v1::Gpu* gpu = nullptr;               // null: the node lists no such GPU
  const node::v1::MigInstance* instance = nullptr;  // null: the whole GPU (or not known)
};

// The instance whose published device is `device.device()` or whose UUID is `device.gpu_uuid()`,
// with its GPU; else the GPU of that UUID.
DevicePlace find_device_place(const node::v1::ListSharesResponse& node,
                              const node::v1::ShareDevice& device);

// "0" for a whole GPU (its index), "0/gi1" inside a MIG instance (the GPU's index and the GPU
// instance's id); "" when the node does not list the GPU.
std::string place_label(const DevicePlace& place);

}  // namespace tessera::cli
