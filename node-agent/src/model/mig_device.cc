#include "model/mig_device.h"

namespace tessera::agent {

std::string mig_profile_label(const std::string& profile) {
  std::string label;
  for (const char c : profile) {
    if (c == '.') continue;
    label += c == '+' ? '-' : c;
  }
  return label;
}

std::string static_mig_device_name(unsigned parent_minor, unsigned gi_id) {
  return "gpu-" + std::to_string(parent_minor) + "-mig-gi" + std::to_string(gi_id);
}

std::string dynamic_mig_device_name(unsigned parent_minor, const std::string& profile,
                                    unsigned placement_start) {
  return "gpu-" + std::to_string(parent_minor) + "-mig-" + mig_profile_label(profile) + "-" +
         std::to_string(placement_start);
}

}  // namespace tessera::agent
