#include "devices/device_health.h"

#include <algorithm>

namespace tessera::agent {

void DeviceHealthBoard::set(const DeviceHealthReport& report) {
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(devices_.begin(), devices_.end(), [&](const DeviceHealthReport& d) {
      return d.pool_name == report.pool_name && d.device_name == report.device_name;
    });
    if (it == devices_.end()) {
      devices_.push_back(report);
    } else {
      *it = report;
    }
    ++generation_;
  }
  changed_.notify_all();
}

void DeviceHealthBoard::remove(const std::string& pool_name, const std::string& device_name) {
  {
    std::lock_guard lock(mutex_);
    auto removed = std::erase_if(devices_, [&](const DeviceHealthReport& d) {
      return d.pool_name == pool_name && d.device_name == device_name;
    });
    if (removed == 0) return;
    ++generation_;
  }
  changed_.notify_all();
}

DeviceHealthSnapshot DeviceHealthBoard::snapshot() const {
  std::lock_guard lock(mutex_);
  return DeviceHealthSnapshot{generation_, devices_};
}

bool DeviceHealthBoard::wait_for_change(std::uint64_t seen,
                                        std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return generation_ != seen; });
}

}  // namespace tessera::agent
