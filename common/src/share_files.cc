#include "tessera/share_files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string_view>

#include "tessera/file_io.h"
#include "tessera/unique_fd.h"

namespace tessera::share {
namespace {

std::string failure(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Passed as the measure source to leave an existing page's source unchanged (a new page: NVML).
constexpr uint32_t kKeepMeasureSource = ~0u;

void fill(LimitsPage& page, const std::vector<DeviceLimit>& devices, uint32_t priority,
          uint32_t measure_source) {
  page.priority.store(priority, std::memory_order_relaxed);
  page.measure_source.store(measure_source == kKeepMeasureSource ? kMeasureNvml : measure_source,
                            std::memory_order_relaxed);
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceLimits& entry = page.devices[i];
    std::memset(entry.uuid, 0, sizeof entry.uuid);
    std::memcpy(entry.uuid, devices[i].uuid.data(), devices[i].uuid.size());
    entry.memory_limit.store(devices[i].memory_limit, std::memory_order_relaxed);
    entry.cores_limit.store(devices[i].cores_limit, std::memory_order_relaxed);
    entry.cores_burst.store(devices[i].cores_burst, std::memory_order_relaxed);
  }
  page.device_count.store(static_cast<uint32_t>(devices.size()), std::memory_order_relaxed);
}

// Updates a live limits page. The UUID list must not change under running readers; only the
// limits do (a share's devices are fixed when it is created).
std::string update_in_place(const std::string& path, const std::vector<DeviceLimit>& devices,
                            uint32_t priority, uint32_t measure_source) {
  UniqueFd fd;
  if (const int error =
          open_file(path.c_str(), O_RDWR, FileSource::kUntrusted, fd, sizeof(LimitsPage));
      error != 0) {
    // 0444 files are writable by root only; make it writable for the update, then restore.
    errno = error;
    if (error != EACCES || ::chmod(path.c_str(), 0644) != 0) return failure("cannot open", path);
    const std::string result = update_in_place(path, devices, priority, measure_source);
    ::chmod(path.c_str(), 0444);
    return result;
  }
  void* memory =
      ::mmap(nullptr, sizeof(LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  fd.reset();
  if (memory == MAP_FAILED) return failure("cannot map", path);
  auto* page = static_cast<LimitsPage*>(memory);
  std::string error;
  const uint32_t count = page->device_count.load(std::memory_order_acquire);
  if (count != devices.size()) {
    error = path + ": a share's devices cannot change (it has " + std::to_string(count) +
            ", the update names " + std::to_string(devices.size()) + ")";
  } else {
    for (size_t i = 0; i < devices.size() && error.empty(); ++i) {
      if (devices[i].uuid != page->devices[i].uuid) {
        error = path + ": device " + std::to_string(i) + " is " + page->devices[i].uuid +
                ", the update names " + devices[i].uuid;
      }
    }
  }
  if (error.empty()) {
    for (size_t i = 0; i < devices.size(); ++i) {
      page->devices[i].memory_limit.store(devices[i].memory_limit, std::memory_order_release);
      page->devices[i].cores_limit.store(devices[i].cores_limit, std::memory_order_release);
      page->devices[i].cores_burst.store(devices[i].cores_burst, std::memory_order_release);
    }
    page->priority.store(priority, std::memory_order_release);
    if (measure_source != kKeepMeasureSource)
      page->measure_source.store(measure_source, std::memory_order_release);
    page->generation.fetch_add(1, std::memory_order_acq_rel);
    ::msync(memory, sizeof(LimitsPage), MS_SYNC);
  }
  ::munmap(memory, sizeof(LimitsPage));
  return error;
}

// A regular file (never a symlink or FIFO: the share folder is writable from its containers)
// holding a whole, valid limits page.
bool is_valid_page(const std::string& path) {
  UniqueFd fd;
  if (open_file(path.c_str(), O_RDONLY, FileSource::kUntrusted, fd, sizeof(LimitsPage)) != 0)
    return false;
  LimitsPage page;
  return ::pread(fd.get(), &page, sizeof page, 0) == static_cast<ssize_t>(sizeof page) &&
         valid_limits_page(page);
}

}  // namespace

std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices) {
  return write_limits(dir, devices, kPriorityNormal);
}

std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                         uint32_t priority) {
  return write_limits(dir, devices, priority, kKeepMeasureSource);
}

std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                         uint32_t priority, uint32_t measure_source) {
  if (measure_source != kKeepMeasureSource && measure_source > kMeasureAgent)
    return "measure source " + std::to_string(measure_source) + " is not valid";
  if (priority > kPriorityLow) return "priority " + std::to_string(priority) + " is not valid";
  if (devices.size() > kMaxDevices) {
    return "a share holds at most " + std::to_string(kMaxDevices) + " devices, not " +
           std::to_string(devices.size());
  }
  for (const DeviceLimit& device : devices) {
    if (device.uuid.empty() || device.uuid.size() >= kUuidBytes) {
      return "device UUID '" + device.uuid + "' must be 1.." + std::to_string(kUuidBytes - 1) +
             " characters";
    }
    if (device.cores_burst > 100) {
      return "cores burst " + std::to_string(device.cores_burst) + " of " + device.uuid +
             " is above 100";
    }
    if (device.cores_limit > 100) {
      return "cores limit " + std::to_string(device.cores_limit) + " of " + device.uuid +
             " is above 100";
    }
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return failure("cannot create", dir);
  const std::string path = dir + "/limits";
  if (is_valid_page(path)) return update_in_place(path, devices, priority, measure_source);

  // A new page: built whole, then tessera::write_file_atomically (a temporary file created
  // exclusively and never through a symlink, fsync'ed, renamed into place, the folder fsync'ed).
  auto page = std::make_unique<LimitsPage>();
  std::memset(static_cast<void*>(page.get()), 0, sizeof(LimitsPage));
  init_limits_page(*page);
  fill(*page, devices, priority, measure_source);
  const std::string_view bytes(reinterpret_cast<const char*>(page.get()), sizeof(LimitsPage));
  if (const int error = write_file_atomically(path.c_str(), bytes, 0444); error != 0) {
    errno = error;
    return failure("cannot write", path);
  }
  return "";
}

}  // namespace tessera::share
