#include "tessera/share_folder/limits_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string_view>

#include "tessera/file_io.h"
#include "tessera/share_folder/fault_guard.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/unique_fd.h"

namespace tessera::share_folder {
namespace {

Status failure(const std::string& what, const std::string& path, int error) {
  return internal_error(what + " " + path + ": " + std::strerror(error));
}

Status check_request(const std::vector<DeviceLimit>& devices, const LimitsOptions& options) {
  if (options.measure_source && *options.measure_source > share::kMeasureAgent)
    return invalid_argument("measure source " + std::to_string(*options.measure_source) +
                            " is not valid");
  if (options.priority > share::kPriorityLow)
    return invalid_argument("priority " + std::to_string(options.priority) + " is not valid");
  if (devices.size() > share::kMaxDevices) {
    return invalid_argument("a share holds at most " + std::to_string(share::kMaxDevices) +
                            " devices, not " + std::to_string(devices.size()));
  }
  for (const DeviceLimit& device : devices) {
    if (device.uuid.empty() || device.uuid.size() >= share::kUuidBytes) {
      return invalid_argument("device UUID '" + device.uuid + "' must be 1.." +
                              std::to_string(share::kUuidBytes - 1) + " characters");
    }
    if (device.cores_limit > 100) {
      return invalid_argument("cores limit " + std::to_string(device.cores_limit) + " of " +
                              device.uuid + " is above 100");
    }
    if (device.cores_request > 100) {
      return invalid_argument("cores request " + std::to_string(device.cores_request) + " of " +
                              device.uuid + " is above 100");
    }
    if (device.memory_request != share::kUnlimited && device.memory_request > device.memory_limit) {
      return invalid_argument("memory request " + std::to_string(device.memory_request) + " of " +
                              device.uuid + " is above its limit " +
                              std::to_string(device.memory_limit));
    }
  }
  return Status::ok();
}

void fill(share::LimitsPage& page, const std::vector<DeviceLimit>& devices,
          const LimitsOptions& options) {
  page.priority.store(options.priority, std::memory_order_relaxed);
  page.measure_source.store(options.measure_source.value_or(share::kMeasureNvml),
                            std::memory_order_relaxed);
  for (size_t i = 0; i < devices.size(); ++i) {
    share::DeviceLimits& entry = page.devices[i];
    std::memset(entry.uuid, 0, sizeof entry.uuid);
    std::memcpy(entry.uuid, devices[i].uuid.data(), devices[i].uuid.size());
    entry.memory_limit.store(devices[i].memory_limit, std::memory_order_relaxed);
    entry.cores_request.store(devices[i].cores_request, std::memory_order_relaxed);
    entry.cores_limit.store(devices[i].cores_limit, std::memory_order_relaxed);
    page.requests[i].memory_request.store(devices[i].memory_request, std::memory_order_relaxed);
    page.requests[i].spare_percent.store(share::kSpareUnknown, std::memory_order_relaxed);
  }
  page.device_count.store(static_cast<uint32_t>(devices.size()), std::memory_order_relaxed);
}

// The limits stored into a live page; the UUIDs were compared with the read copy before.
void store_limits(share::LimitsPage& page, const std::vector<DeviceLimit>& devices,
                  const LimitsOptions& options) {
  for (size_t i = 0; i < devices.size(); ++i) {
    page.devices[i].memory_limit.store(devices[i].memory_limit, std::memory_order_release);
    page.devices[i].cores_request.store(devices[i].cores_request, std::memory_order_release);
    page.devices[i].cores_limit.store(devices[i].cores_limit, std::memory_order_release);
    page.requests[i].memory_request.store(devices[i].memory_request, std::memory_order_release);
  }
  page.priority.store(options.priority, std::memory_order_release);
  if (options.measure_source)
    page.measure_source.store(*options.measure_source, std::memory_order_release);
  page.generation.fetch_add(1, std::memory_order_acq_rel);
}

// Updates a live limits page (`current`, as just read). The UUID list must not change under
// running readers; only the limits do (a share's devices are fixed when it is created).
Status update_in_place(const std::string& path, const LimitsPageCopy& current,
                       const std::vector<DeviceLimit>& devices, const LimitsOptions& options) {
  if (current.devices.size() != devices.size()) {
    return failed_precondition(path + ": a share's devices cannot change (it has " +
                               std::to_string(current.devices.size()) + ", the update names " +
                               std::to_string(devices.size()) + ")");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].uuid != current.devices[i].uuid) {
      return failed_precondition(path + ": device " + std::to_string(i) + " is " +
                                 current.devices[i].uuid + ", the update names " + devices[i].uuid);
    }
  }
  UniqueFd fd;
  if (const int error =
          open_file(path.c_str(), O_RDWR, FileSource::kUntrusted, fd, sizeof(share::LimitsPage));
      error != 0) {
    // 0444 files are writable by root only; make it writable for the update, then restore.
    if (error != EACCES || ::chmod(path.c_str(), 0644) != 0)
      return failure("cannot open", path, error);
    const Status result = update_in_place(path, current, devices, options);
    ::chmod(path.c_str(), 0444);
    return result;
  }
  void* memory =
      ::mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (memory == MAP_FAILED) return failure("cannot map", path, errno);
  auto* page = static_cast<share::LimitsPage*>(memory);
  // The folder is writable from the share's containers: a file cut under the mapping faults.
  const bool whole = run_fault_guarded(memory, sizeof(share::LimitsPage),
                                       [&] { store_limits(*page, devices, options); });
  if (whole) ::msync(memory, sizeof(share::LimitsPage), MS_SYNC);
  ::munmap(memory, sizeof(share::LimitsPage));
  if (!whole) return failed_precondition(path + " was truncated during the update");
  return Status::ok();
}

}  // namespace

Status write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                    const LimitsOptions& options) {
  TESSERA_RETURN_IF_ERROR(check_request(devices, options));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return failure("cannot create", dir, errno);
  const std::string path = dir + "/limits";
  // Only a regular file holding a whole, valid page is updated (never through a symlink).
  if (const LimitsPageCopy current = read_limits_page(path); current.valid())
    return update_in_place(path, current, devices, options);

  // A new page: built whole, then tessera::write_file_atomically (a temporary file created
  // exclusively and never through a symlink, fsync'ed, renamed into place, the folder fsync'ed).
  auto page = std::make_unique<share::LimitsPage>();
  std::memset(static_cast<void*>(page.get()), 0, sizeof(share::LimitsPage));
  share::init_limits_page(*page);
  fill(*page, devices, options);
  const std::string_view bytes(reinterpret_cast<const char*>(page.get()),
                               sizeof(share::LimitsPage));
  if (const int error = write_file_atomically(path.c_str(), bytes, 0444); error != 0)
    return failure("cannot write", path, error);
  return Status::ok();
}

}  // namespace tessera::share_folder
