// How the NVIDIA driver gets into a container that holds only a Tessera claim, decided once at
// start: either the NVIDIA Container Toolkit's CDI spec (kind nvidia.com/gpu, what
// `nvidia-ctk cdi generate` writes) names a device for the share's GPU, and the claim returns
// that device's id beside ours; or the agent's own spec carries the driver's edits, found under a
// driver root ("/" or the GPU Operator's "/run/nvidia/driver"): device nodes, the user-space
// libraries and the binaries, as nvidia-ctk would mount them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

enum class DriverMode {
  kAuto,        // the toolkit's spec when one is found, else the driver root
  kToolkit,     // only the toolkit's spec (start fails without one)
  kDriverRoot,  // only the driver root's files
};
// "auto", "toolkit", "driver-root"; nullopt for anything else.
std::optional<DriverMode> parse_driver_mode(const std::string& text);
const char* to_string(DriverMode mode);

struct DriverOptions {
  DriverMode mode = DriverMode::kAuto;
  std::vector<std::string> toolkit_spec_dirs = {"/etc/cdi", "/var/run/cdi"};
  std::string driver_root = "/";
};

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // "" = the same path on the host
  bool operator==(const CdiDeviceNode&) const = default;
};

struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;
  bool operator==(const CdiMount&) const = default;
};

// What discovery found. Exactly one of the two ways is set when discovery succeeded; a default
// value has neither, and a share cannot be given a driver from it (see cdi_device_ids).
struct ContainerDriver {
  // The toolkit's spec: GPU UUID -> the qualified id of its device there ("nvidia.com/gpu=GPU-...")
  // and GPU minor -> the same for specs that name devices by index only.
  std::string toolkit_spec;  // the file(s) read, for messages; "" = not the toolkit's way
  std::map<std::string, std::string> toolkit_by_uuid;
  std::map<unsigned, std::string> toolkit_by_minor;

  // The driver root's edits: the folder holding the GPUs' nodes on the host ("" = not the driver
  // root's way; "/dev" or "<root>/dev"), the control nodes found there, libraries and binaries.
  std::string driver_root;
  std::string host_dev_dir;
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  std::string driver_version;  // from libcuda.so.<version>; "" when the root has only .so.1 names

  bool uses_toolkit() const { return !toolkit_spec.empty(); }
  bool uses_driver_root() const { return !host_dev_dir.empty(); }
};

// The toolkit's device for a GPU: by UUID (a device named "GPU-<uuid>"), else the index-named
// device whose node is /dev/nvidia<minor>. kNotFound names the spec when it has neither.
Result<std::string> toolkit_device_id(const ContainerDriver& driver, const std::string& uuid,
                                      unsigned minor);

// Reads the toolkit's CDI specs (YAML or JSON, kind nvidia.com/gpu) in `dirs` into the toolkit
// half of a ContainerDriver; nullopt when none holds a GPU device. A file that cannot be parsed
// is an error naming it only when its kind could be nvidia.com/gpu (other vendors' are skipped).
Result<std::optional<ContainerDriver>> read_toolkit_specs(const std::vector<std::string>& dirs);

// The driver root's edits: device nodes (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools
// where they exist, under <root>/dev when the root has them), every driver library of the folder
// holding libcuda (mounted read-only at its path relative to the root; each soname link such as
// libcuda.so.1 mounted as the file it points to), nvidia-smi and the MPS binaries. kNotFound
// naming the folders searched when the root has no libcuda.
Result<ContainerDriver> discover_driver_root(const std::string& driver_root);

// What `options.mode` asks for; errors say which way was tried and where.
Result<ContainerDriver> discover_container_driver(const DriverOptions& options);

// A line for the agent's log: which way, and from where.
std::string describe(const ContainerDriver& driver);

}  // namespace tessera::agent
