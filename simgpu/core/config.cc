#include "config.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "mig_profiles.h"
#include "shared_state.h"
#include "tessera/quantity.h"

namespace simgpu {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find(separator, start);
    const size_t stop = end == std::string_view::npos ? text.size() : end;
    parts.push_back(text.substr(start, stop - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::optional<uint64_t> parse_unsigned(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

// Microseconds with an optional fraction ("141", "0.5"), returned in nanoseconds.
std::optional<uint64_t> parse_microseconds(std::string_view text) {
  const size_t dot = text.find('.');
  auto whole = parse_unsigned(text.substr(0, dot));
  if (!whole || *whole > UINT64_MAX / 1000) return std::nullopt;
  uint64_t ns = *whole * 1000;
  if (dot != std::string_view::npos) {
    const std::string_view fraction = text.substr(dot + 1);
    if (fraction.empty() || fraction.size() > 3) return std::nullopt;
    auto digits = parse_unsigned(fraction);
    if (!digits) return std::nullopt;
    uint64_t scale = 1;
    for (size_t i = fraction.size(); i < 3; ++i) scale *= 10;
    ns += *digits * scale;
  }
  return ns;
}

std::string quoted(std::string_view text) {
  std::string result;
  result.reserve(text.size() + 2);
  result.push_back('\'');
  result.append(text);
  result.push_back('\'');
  return result;
}

}  // namespace

std::optional<std::vector<DeviceSpec>> parse_devices(std::string_view text, ConfigError& error) {
  std::vector<DeviceSpec> devices;
  for (std::string_view device_text : split(text, ';')) {
    if (device_text.empty()) continue;
    DeviceSpec spec;
    for (std::string_view field : split(device_text, ',')) {
      const size_t eq = field.find('=');
      if (eq == std::string_view::npos) {
        error.message = "SIMGPU_DEVICES: field " + quoted(field) + " is not key=value";
        return std::nullopt;
      }
      const std::string_view key = field.substr(0, eq);
      const std::string_view value = field.substr(eq + 1);
      if (key == "name") {
        if (value.empty() || value.size() >= sizeof(DeviceConfig::name)) {
          error.message = "SIMGPU_DEVICES: name " + quoted(value) + " must be 1..95 characters";
          return std::nullopt;
        }
        spec.name = value;
      } else if (key == "memory") {
        auto bytes = tessera::parse_byte_quantity(value);
        if (!bytes || *bytes == 0) {
          error.message = "SIMGPU_DEVICES: memory " + quoted(value) +
                          " is not a positive byte quantity (e.g. 80Gi, 143771Mi)";
          return std::nullopt;
        }
        spec.memory_bytes = *bytes;
      } else if (key == "sms") {
        auto sms = parse_unsigned(value);
        if (!sms || *sms == 0 || *sms > 1024) {
          error.message = "SIMGPU_DEVICES: sms " + quoted(value) + " must be 1..1024";
          return std::nullopt;
        }
        spec.sms = static_cast<uint32_t>(*sms);
      } else if (key == "cc") {
        const size_t dot = value.find('.');
        auto major = parse_unsigned(value.substr(0, dot));
        auto minor = dot == std::string_view::npos ? std::optional<uint64_t>(0)
                                                   : parse_unsigned(value.substr(dot + 1));
        if (!major || !minor || *major == 0 || *major > 99 || *minor > 9) {
          error.message = "SIMGPU_DEVICES: cc " + quoted(value) + " is not major.minor (e.g. 9.0)";
          return std::nullopt;
        }
        spec.cc_major = static_cast<uint32_t>(*major);
        spec.cc_minor = static_cast<uint32_t>(*minor);
      } else if (key == "mode") {
        // NVML's compute modes, by nvidia-smi -c's names, in nvmlComputeMode_t's order.
        constexpr std::string_view kModes[] = {"default", "exclusive_thread", "prohibited",
                                               "exclusive_process"};
        const auto found = std::find(std::begin(kModes), std::end(kModes), value);
        if (found == std::end(kModes)) {
          error.message = "SIMGPU_DEVICES: mode " + quoted(value) +
                          " must be default, exclusive_thread, prohibited or exclusive_process";
          return std::nullopt;
        }
        spec.compute_mode = static_cast<uint32_t>(found - std::begin(kModes));
      } else if (key == "mig") {
        if (value == "capable") {
          spec.mig = MigSetting::kCapable;
        } else if (value == "on") {
          spec.mig = MigSetting::kOn;
        } else {
          error.message = "SIMGPU_DEVICES: mig " + quoted(value) +
                          " must be capable (MIG mode off at start) or on";
          return std::nullopt;
        }
      } else {
        error.message = "SIMGPU_DEVICES: unknown field " + quoted(key) +
                        " (expected name, memory, sms, cc, mode, mig)";
        return std::nullopt;
      }
    }
    if (spec.mig != MigSetting::kNone) {
      const MigModel* model = mig_model_for(spec.name);
      if (model == nullptr) {
        std::string known;
        for (const MigModel& each : mig_models())
          known += (known.empty() ? "" : ", ") + std::string(each.model);
        error.message = "SIMGPU_DEVICES: mig for name " + quoted(spec.name) +
                        ": the simulator has MIG profiles only for " + known;
        return std::nullopt;
      }
      uint64_t largest = 0;
      for (const MigGpuInstanceProfile& profile : model->profiles)
        largest = std::max(largest, profile.memory_mib << 20);
      if (spec.memory_bytes < largest) {
        error.message = "SIMGPU_DEVICES: memory of MIG device " + quoted(spec.name) + " is " +
                        std::to_string(spec.memory_bytes >> 20) + "Mi, less than its " +
                        model->model + " profiles need (" + std::to_string(largest >> 20) + "Mi)";
        return std::nullopt;
      }
    }
    devices.push_back(spec);
  }
  if (devices.empty()) {
    error.message = "SIMGPU_DEVICES: " + quoted(text) + " describes no device";
    return std::nullopt;
  }
  if (devices.size() > static_cast<size_t>(kMaxDevices)) {
    error.message = "SIMGPU_DEVICES: " + std::to_string(devices.size()) +
                    " devices given, at most " + std::to_string(kMaxDevices);
    return std::nullopt;
  }
  return devices;
}

std::optional<std::map<std::string, uint64_t>> parse_kernel_times(std::string_view text,
                                                                  uint64_t& default_wave_ns,
                                                                  ConfigError& error) {
  std::map<std::string, uint64_t> times;
  for (std::string_view entry : split(text, ',')) {
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      error.message = "SIMGPU_KERNEL_US: entry " + quoted(entry) + " is not kernel=microseconds";
      return std::nullopt;
    }
    auto ns = parse_microseconds(entry.substr(eq + 1));
    if (!ns || *ns == 0) {
      error.message = "SIMGPU_KERNEL_US: time " + quoted(entry.substr(eq + 1)) + " for " +
                      quoted(entry.substr(0, eq)) + " is not a positive number of microseconds";
      return std::nullopt;
    }
    const std::string name(entry.substr(0, eq));
    if (name == "default") {
      default_wave_ns = *ns;
    } else {
      times[name] = *ns;
    }
  }
  return times;
}

std::optional<std::string> parse_driver_version(std::string_view text, ConfigError& error) {
  const std::vector<std::string_view> parts = split(text, '.');
  bool valid = text.size() < static_cast<size_t>(kDriverVersionBytes) && parts.size() >= 2 &&
               parts.size() <= 3;
  for (std::string_view part : parts) {
    if (!valid) break;
    valid = part.size() <= 4 && parse_unsigned(part).has_value();
  }
  if (valid && *parse_unsigned(parts[0]) == 0) valid = false;
  if (!valid) {
    error.message =
        "SIMGPU_DRIVER_VERSION=" + quoted(text) + " is not a driver version such as 615.40.01";
    return std::nullopt;
  }
  return std::string(text);
}

int driver_branch(std::string_view version) {
  ConfigError ignored;
  if (!parse_driver_version(version, ignored)) return 0;
  return static_cast<int>(*parse_unsigned(version.substr(0, version.find('.'))));
}

int cuda_version_of_branch(int branch) {
  return branch >= kMemoryPartitionsBranch ? kCudaVersionWithPartitions
                                           : kCudaVersionBeforePartitions;
}

namespace {

void warn(const std::string& message) {
  std::fprintf(stderr, "simgpu: %s; using the default\n", message.c_str());
}

void read_duration_us(const char* variable, uint64_t& target_ns, bool allow_zero) {
  const char* text = std::getenv(variable);
  if (!text) return;
  auto ns = parse_microseconds(text);
  if (!ns || (!allow_zero && *ns == 0)) {
    warn(std::string(variable) + "=" + quoted(text) + " is not a " +
         (allow_zero ? "non-negative" : "positive") + " number of microseconds");
    return;
  }
  target_ns = *ns;
}

}  // namespace

SimConfig load_config() {
  SimConfig config;
  ConfigError error;
  if (const char* path = std::getenv("SIMGPU_STATE"); path && *path) {
    config.state_path = path;
  } else {
    config.state_path = "/dev/shm/simgpu-" + std::to_string(getuid()) + ".state";
  }
  if (const char* devices = std::getenv("SIMGPU_DEVICES"); devices && *devices) {
    if (auto parsed = parse_devices(devices, error)) {
      config.devices = std::move(*parsed);
    } else {
      warn(error.message);
    }
  }
  if (config.devices.empty()) config.devices.push_back(DeviceSpec{});
  if (const char* kernels = std::getenv("SIMGPU_KERNEL_US"); kernels && *kernels) {
    uint64_t default_wave = config.default_wave_ns;
    if (auto parsed = parse_kernel_times(kernels, default_wave, error)) {
      config.kernel_wave_ns = std::move(*parsed);
      config.default_wave_ns = default_wave;
    } else {
      warn(error.message);
    }
  }
  read_duration_us("SIMGPU_TIMESLICE_US", config.timeslice_ns, false);
  read_duration_us("SIMGPU_SWITCH_US", config.switch_cost_ns, true);
  if (const char* overhead = std::getenv("SIMGPU_CONTEXT_OVERHEAD"); overhead && *overhead) {
    if (auto bytes = tessera::parse_byte_quantity(overhead)) {
      config.context_overhead = *bytes;
    } else {
      warn("SIMGPU_CONTEXT_OVERHEAD=" + quoted(overhead) + " is not a byte quantity");
    }
  }
  if (const char* fail = std::getenv("SIMGPU_FAIL_ALLOC_AT"); fail && *fail) {
    if (auto n = parse_unsigned(fail); n && *n > 0) {
      config.fail_alloc_at = static_cast<int64_t>(*n);
    } else {
      warn(std::string("SIMGPU_FAIL_ALLOC_AT=") + quoted(fail) + " is not a positive integer");
    }
  }
  if (const char* unhealthy = std::getenv("SIMGPU_UNHEALTHY"); unhealthy && *unhealthy) {
    for (std::string_view index_text : split(unhealthy, ',')) {
      auto index = parse_unsigned(index_text);
      if (!index || *index >= config.devices.size()) {
        warn(std::string("SIMGPU_UNHEALTHY: ") + quoted(index_text) + " is not a device index");
        continue;
      }
      config.unhealthy_devices.push_back(static_cast<int>(*index));
    }
  }
  if (const char* root = std::getenv("SIMGPU_PROC_ROOT"); root && *root) {
    if (root[0] != '/' || std::strlen(root) >= static_cast<size_t>(kProcRootBytes)) {
      warn(std::string("SIMGPU_PROC_ROOT=") + quoted(root) + " is not an absolute path under " +
           std::to_string(kProcRootBytes) + " characters");
    } else {
      config.proc_root = root;
    }
  }
  if (const char* version = std::getenv("SIMGPU_DRIVER_VERSION"); version && *version) {
    if (auto parsed = parse_driver_version(version, error)) {
      config.driver_version = std::move(*parsed);
    } else {
      warn(error.message);
    }
  }
  return config;
}

std::string device_uuid(int index) {
  // Fixed prefix plus the index: stable across runs and distinct per device.
  char uuid[48];
  std::snprintf(uuid, sizeof uuid, "GPU-5e1a0000-7e55-4e2a-9000-%012x", index);
  return uuid;
}

std::string device_pci_bus_id(int index) {
  char bus_id[32];
  std::snprintf(bus_id, sizeof bus_id, "00000000:%02X:00.0", 0x19 + index * 0x10);
  return bus_id;
}

uint32_t pci_device_id(const DeviceConfig& config) {
  const std::string_view name(config.name);
  auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
  // From the PCI ID Repository (pci-ids.ucw.cz, vendor 10de).
  if (has("H200")) return 0x2335;
  if (has("H100")) return has("PCIe") ? 0x2331 : 0x2330;
  if (has("A100")) return has("PCIe") ? 0x20B5 : 0x20B2;
  if (has("L40S")) return 0x26B9;
  if (has("L4")) return 0x27B8;
  return 0;
}

}  // namespace simgpu
