// The capability device nodes a process needs to use a MIG device besides its parent's
// /dev/nvidia<minor> (mig-facts.md §2.6, NVIDIA's "Device Nodes and Capabilities"): one for the
// GPU instance, one for the compute instance, /dev/nvidia-caps/nvidia-cap<minor>, whose minors the
// driver writes in /proc/driver/nvidia/capabilities/gpu<m>/mig/gi<g>[/ci<c>]/access
// ("DeviceFileMinor: N") and whose major is nvidia-caps' in /proc/devices. The container runtime
// creates the nodes from the CDI spec; they need not exist on the host.
#pragma once

#include <string>

#include "model/mig_device.h"
#include "tessera/status.h"

namespace tessera::agent {

// "DeviceFileMinor: 12\nDeviceFileMode: 256\n..." -> 12; kInvalidArgument naming `source`.
Result<unsigned> parse_caps_minor(const std::string& text, const std::string& source);
// /proc/devices' text -> the "nvidia-caps" character major; kNotFound naming `source`.
Result<unsigned> parse_caps_major(const std::string& text, const std::string& source);
// Reads both under `proc_root` ("/proc", or a simulated one): kNotFound naming the missing file.
Result<MigCapsNodes> read_mig_caps(const std::string& proc_root, unsigned parent_minor,
                                   unsigned gi_id, unsigned ci_id);
// "/dev/nvidia-caps/nvidia-cap<minor>".
std::string caps_node_path(unsigned minor);

}  // namespace tessera::agent
