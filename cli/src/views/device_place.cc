#include "views/device_place.h"

namespace tessera::cli {

namespace v1 = tessera::node::v1;

DevicePlace find_device_place(const v1::ListSharesResponse& node, const v1::ShareDevice& device) {
  for (const v1::Gpu& gpu : node.gpus())
    for (const v1::MigInstance& instance : gpu.mig_instances())
      if ((!device.device().empty() && instance.device() == device.device()) ||
          (!device.gpu_uuid().empty() && instance.uuid() == device.gpu_uuid()))
        return {&gpu, &instance};
  for (const v1::Gpu& gpu : node.gpus())
    if (gpu.uuid() == device.gpu_uuid()) return {&gpu, nullptr};
  return {};
}

std::string place_label(const DevicePlace& place) {
  if (place.gpu == nullptr) return "";
  std::string label = std::to_string(place.gpu->index());
  if (place.instance) label += "/gi" + std::to_string(place.instance->gpu_instance_id());
  return label;
}

}  // namespace tessera::cli
