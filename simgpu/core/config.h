// Configuration of the simulated GPU from the environment. Parsing is pure (strings in, values or
// an error naming the variable out) so it is unit-tested; `load_config` reads the environment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace simgpu {

// SIMGPU_DEVICES' mig= field: no MIG (the default), MIG-capable with MIG mode off at start, or
// MIG mode on at start. Only a device whose name has a MIG profile table (mig_profiles.h) may
// have it.
enum class MigSetting { kNone, kCapable, kOn };

struct DeviceSpec {
  std::string name = "NVIDIA H200";
  uint64_t memory_bytes = 143771ull << 20;  // 143771Mi, as an H200 reports
  uint32_t sms = 132;
  uint32_t cc_major = 9;
  uint32_t cc_minor = 0;
  uint32_t compute_mode =
      0;  // nvmlComputeMode_t: mode=default|exclusive_thread|prohibited|exclusive_process
  MigSetting mig = MigSetting::kNone;  // mig=capable|on
};

struct SimConfig {
  std::string state_path;                          // SIMGPU_STATE
  std::vector<DeviceSpec> devices;                 // SIMGPU_DEVICES
  std::map<std::string, uint64_t> kernel_wave_ns;  // SIMGPU_KERNEL_US (per kernel name)
  uint64_t default_wave_ns = 10'000;               // SIMGPU_KERNEL_US "default=..."
  uint64_t timeslice_ns = 2'000'000;               // SIMGPU_TIMESLICE_US
  uint64_t switch_cost_ns = 0;                     // SIMGPU_SWITCH_US
  uint64_t context_overhead = 500ull << 20;        // SIMGPU_CONTEXT_OVERHEAD (quantity)
  int64_t fail_alloc_at = 0;                       // SIMGPU_FAIL_ALLOC_AT: Nth allocation fails
  std::vector<int> unhealthy_devices;              // SIMGPU_UNHEALTHY: "0,2"
  std::string driver_version = "580.159.04";       // SIMGPU_DRIVER_VERSION
  std::string proc_root;  // SIMGPU_PROC_ROOT: where MIG capability files and `devices` are kept
};

// The first driver branch with per-cgroup memory partitions (R615, CUDA 13.4).
inline constexpr int kMemoryPartitionsBranch = 615;
inline constexpr int kCudaVersionBeforePartitions = 13000;  // cuDriverGetVersion below R615
inline constexpr int kCudaVersionWithPartitions = 13040;    // CUDA 13.4, from R615 on

struct ConfigError {
  std::string message;  // names the variable and the value
};

// Each parser returns the value or sets `error` and returns std::nullopt.
std::optional<std::vector<DeviceSpec>> parse_devices(std::string_view text, ConfigError& error);
std::optional<std::map<std::string, uint64_t>> parse_kernel_times(std::string_view text,
                                                                  uint64_t& default_wave_ns,
                                                                  ConfigError& error);

// A driver version as NVML reports it: "<branch>.<minor>[.<patch>]", decimal numbers, the branch
// 1 to 9999, at most 31 characters ("615.40.01").
std::optional<std::string> parse_driver_version(std::string_view text, ConfigError& error);
// The branch of a version parse_driver_version accepted ("615.40.01" -> 615); 0 for anything else.
int driver_branch(std::string_view version);
// What cuDriverGetVersion reports on a driver of that branch.
int cuda_version_of_branch(int branch);

// Reads all SIMGPU_* variables. An invalid value is reported on stderr and the default is kept.
SimConfig load_config();

// Deterministic UUID and PCI bus id for a device index, so tests and tools can name devices.
std::string device_uuid(int index);
// The PCI device id of the part a device is configured as (by its product name), as NVML's
// pciDeviceId and the driver's CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID carry it: libraries such as
// cuBLAS choose kernels by it. 0 for a part the simulator does not know.
uint32_t pci_device_id(const struct DeviceConfig& config);
inline constexpr uint32_t kNvidiaPciVendorId = 0x10DE;
std::string device_pci_bus_id(int index);

}  // namespace simgpu
