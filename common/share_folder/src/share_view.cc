#include "tessera/share_folder/share_view.h"

#include <algorithm>

#include "tessera/file_io.h"
#include "tessera/qos_class.h"

namespace tessera::share_folder {
namespace {

namespace v1 = tessera::node::v1;

double seconds_of(uint64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

void add_limits_devices(const LimitsPageCopy& limits, v1::Share& share) {
  share.set_priority(priority_name(limits.priority));
  QosClass share_class = QosClass::kGuaranteed;
  for (const LimitsDevice& entry : limits.devices) {
    v1::ShareDevice& device = *share.add_devices();
    device.set_gpu_uuid(entry.uuid);
    device.set_memory_unlimited(entry.memory_limit == share::kUnlimited);
    if (entry.memory_limit != share::kUnlimited) device.set_memory_limit_bytes(entry.memory_limit);
    device.set_cores_request_percent(entry.cores_request);
    device.set_cores_limit_percent(
        share::effective_cores_limit(entry.cores_request, entry.cores_limit));
    if (entry.memory_limit != share::kUnlimited)
      device.set_memory_request_bytes(std::min(entry.memory_request, entry.memory_limit));
    const QosClass qos = device_qos_class(entry.memory_request, entry.memory_limit,
                                          entry.cores_request, entry.cores_limit);
    device.set_qos_class(std::string(qos_class_name(qos)));
    share_class = lower_qos_class(share_class, qos);
  }
  if (!limits.devices.empty()) share.set_qos_class(std::string(qos_class_name(share_class)));
}

void add_counters(const UsagePageCopy& usage, ShareViewOptions::Counters counters,
                  v1::Share& share) {
  const uint64_t launches = usage.launches();
  const double throttled = seconds_of(usage.throttled_ns());
  const uint64_t denied = usage.allocations_denied();
  if (counters == ShareViewOptions::Counters::kFirstDevice) {
    if (share.devices_size() == 0) return;
    v1::ShareDevice& first = *share.mutable_devices(0);
    first.set_launches(launches);
    first.set_throttled_seconds(throttled);
    first.set_allocations_denied(denied);
    return;
  }
  share.set_launches(launches);
  share.set_throttled_seconds(throttled);
  share.set_allocations_denied(denied);
  for (v1::ShareDevice& device : *share.mutable_devices()) {
    device.set_launches(launches);
    device.set_throttled_seconds(throttled);
    device.set_allocations_denied(denied);
  }
}

void add_processes(const UsagePageCopy& usage, const std::vector<int>& page_index,
                   const ShareViewOptions& options, v1::Share& share) {
  for (const SlotCopy* slot : usage.owned_slots()) {
    HostProcess host;
    if (options.host_process) {
      std::optional<HostProcess> found = options.host_process(*slot);
      if (!found) continue;  // gone: its slot is only not cleared yet
      host = std::move(*found);
    }
    v1::Process& process = *share.add_processes();
    process.set_pid(static_cast<int32_t>(slot->pid));
    process.set_host_pid(host.pid);
    process.set_command(host.command);
    for (const int index : page_index)
      process.add_memory_bytes(index >= 0 ? slot->bytes[static_cast<size_t>(index)] : 0);
    process.set_launches(slot->launches);
    process.set_gpu_seconds(seconds_of(slot->gpu_busy_ns));
  }
}

}  // namespace

std::string priority_name(uint32_t priority) {
  switch (priority) {
    case share::kPriorityHigh:
      return "high";
    case share::kPriorityLow:
      return "low";
    default:
      return "normal";
  }
}

std::string process_command(const std::string& proc_root, int pid) {
  if (pid <= 0) return "";
  const std::string path = proc_root + "/" + std::to_string(pid) + "/comm";
  char text[64];
  if (!read_small_file(path.c_str(), text, sizeof text).ok()) return "";
  std::string command = text;
  while (!command.empty() &&
         (command.back() == '\n' || command.back() == '\r' || command.back() == '\0'))
    command.pop_back();
  return command;
}

void fill_share_from_folder(const ShareFolderSnapshot& folder, const ShareViewOptions& options,
                            v1::Share& share) {
  share.set_read_error(folder.problem_message());
  if (!folder.limits.valid()) return;  // unknown figures stay unset (0), never made up
  if (options.devices_from_limits_page) add_limits_devices(folder.limits, share);

  std::vector<int> page_index;  // per share device: its index in the limits page, or -1
  for (v1::ShareDevice& device : *share.mutable_devices()) {
    const int index = folder.limits.device_index(device.gpu_uuid());
    page_index.push_back(index);
    if (index >= 0)
      device.set_context_overhead_bytes(
          folder.limits.devices[static_cast<size_t>(index)].context_overhead);
  }
  if (!folder.readable()) return;
  for (int i = 0; i < share.devices_size(); ++i) {
    const int index = page_index[static_cast<size_t>(i)];
    if (index < 0) continue;
    v1::ShareDevice& device = *share.mutable_devices(i);
    device.set_memory_used_bytes(folder.usage.memory_bytes(static_cast<uint32_t>(index)));
    device.set_gpu_seconds(seconds_of(folder.gpu_busy_ns(static_cast<uint32_t>(index))));
  }
  add_counters(folder.usage, options.counters, share);
  add_processes(folder.usage, page_index, options, share);
}

}  // namespace tessera::share_folder
