#include "metrics/share_usage.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "usage/share_processes.h"

namespace tessera::agent {

namespace {

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a + b < a ? ~0ull : a + b;
}

// Reads [offset, offset + size) of `fd` into `out` at the same offset; the bytes got.
size_t read_at(int fd, std::vector<unsigned char>& out, size_t offset, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got =
        pread(fd, out.data() + offset + done, size - done, static_cast<off_t>(offset + done));
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

int ShareFolderUsage::device_index(const std::string& uuid) const {
  for (size_t i = 0; i < uuids.size(); ++i)
    if (uuids[i] == uuid) return static_cast<int>(i);
  return -1;
}

Result<ShareFolderUsage> read_share_folder(const std::string& folder, ShareReadBuffers& buffers) {
  ShareFolderUsage result;
  // The limits page: the agent's own, but in a folder a tenant can write to (it may have replaced
  // the file): read as carefully as the usage page.
  Result<UniqueFd> limits_fd =
      open_regular(folder + "/limits", O_RDONLY, sizeof(share::LimitsPage));
  if (!limits_fd.is_ok()) return limits_fd.status();
  buffers.limits.assign(sizeof(share::LimitsPage), 0);
  if (read_at(limits_fd->get(), buffers.limits, 0, sizeof(share::LimitsPage)) !=
      sizeof(share::LimitsPage))
    return failed_precondition(folder + "/limits is short");
  const auto* limits = reinterpret_cast<const share::LimitsPage*>(buffers.limits.data());
  if (!share::valid_limits_page(*limits))
    return failed_precondition(folder + "/limits is no valid limits page");
  const uint32_t devices = limits->device_count.load(std::memory_order_relaxed);
  for (uint32_t d = 0; d < devices; ++d) {
    const char* uuid = limits->devices[d].uuid;
    result.uuids.emplace_back(uuid, strnlen(uuid, share::kUuidBytes));
    result.context_overhead_bytes[d] =
        limits->measured[d].context_overhead.load(std::memory_order_relaxed);
  }
  const bool agent_measures =
      limits->measure_source.load(std::memory_order_relaxed) == share::kMeasureAgent;
  if (agent_measures)
    for (uint32_t d = 0; d < devices; ++d)
      result.gpu_busy_ns[d] = limits->measured[d].share_busy_ns.load(std::memory_order_relaxed);

  // The usage page: absent until the first process of the share creates it.
  constexpr size_t kHeader = offsetof(share::UsagePage, slots);
  const std::string usage_path = folder + "/usage";
  Result<UniqueFd> usage_fd = open_regular(usage_path, O_RDONLY, kHeader);
  if (!usage_fd.is_ok()) {
    if (usage_fd.status().code() != StatusCode::kNotFound)
      result.usage_error = usage_fd.status().message();
    return result;
  }
  buffers.usage.assign(sizeof(share::UsagePage), 0);
  const auto* usage = reinterpret_cast<const share::UsagePage*>(buffers.usage.data());
  if (read_at(usage_fd->get(), buffers.usage, 0, kHeader) != kHeader) {
    result.usage_error = usage_path + " is shorter than its header";
    return result;
  }
  if (!share::valid_usage_page(*usage)) {
    result.usage_error = usage_path + " is no valid usage page (magic, version or size)";
    return result;
  }
  uint32_t high = usage->slot_high_water.load(std::memory_order_relaxed);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  const size_t wanted = high * sizeof(share::ProcessSlot);
  const size_t got = read_at(usage_fd->get(), buffers.usage, kHeader, wanted);
  // The shim creates the page whole: a short one was cut by someone, and its sums would be short.
  if (got < wanted)
    result.usage_error = usage_path + " is truncated (" + std::to_string(kHeader + got) + " of " +
                         std::to_string(kHeader + wanted) + " bytes its slots need)";
  const uint32_t whole = static_cast<uint32_t>(got / sizeof(share::ProcessSlot));
  result.usage_valid = true;
  for (uint32_t i = 0; i < whole; ++i) {
    const share::ProcessSlot& slot = usage->slots[i];
    // As share::share_usage: every slot below the high-water mark counts (a free slot holds 0).
    for (uint32_t d = 0; d < devices; ++d)
      result.memory_bytes[d] =
          saturating_add(result.memory_bytes[d], slot.bytes[d].load(std::memory_order_relaxed));
    // Counters stay in a slot after its process is gone (until the slot is claimed again), so
    // every slot below the high-water mark counts; processes are the owned slots.
    result.launches =
        saturating_add(result.launches, slot.launches.load(std::memory_order_relaxed));
    result.throttled_ns =
        saturating_add(result.throttled_ns, slot.throttled_ns.load(std::memory_order_relaxed));
    result.allocations_denied = saturating_add(
        result.allocations_denied, slot.allocations_denied.load(std::memory_order_relaxed));
    const uint64_t owner = slot.owner.load(std::memory_order_relaxed);
    if (owner != 0 && (owner & share::kOwnerReclaiming) == 0) {
      ++result.processes;
      ProcessSlotUsage process;
      process.owner = owner;
      process.pid = slot.pid.load(std::memory_order_relaxed);
      for (uint32_t d = 0; d < devices; ++d)
        process.memory_bytes[d] = slot.bytes[d].load(std::memory_order_relaxed);
      process.launches = slot.launches.load(std::memory_order_relaxed);
      process.gpu_busy_ns = slot.gpu_busy_ns.load(std::memory_order_relaxed);
      result.process_slots.push_back(process);
    }
  }
  if (!agent_measures) {
    constexpr size_t kCompute = offsetof(share::UsagePage, compute);
    if (read_at(usage_fd->get(), buffers.usage, kCompute, sizeof(share::ComputeArea)) ==
        sizeof(share::ComputeArea)) {
      for (uint32_t d = 0; d < devices; ++d)
        result.gpu_busy_ns[d] = usage->compute.devices[d].busy_ns.load(std::memory_order_relaxed);
    } else if (result.usage_error.empty()) {
      result.usage_error = usage_path + " is truncated (no whole compute area)";
    }
  }
  return result;
}

}  // namespace tessera::agent
