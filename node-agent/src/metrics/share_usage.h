// What one share folder's pages say, for a scrape: the limits page (the agent's) and the usage page
// (written by the share's processes, so untrusted input: read with pread, never mapped, never
// through a symlink or from a FIFO, bounded by kMaxSlots and the bytes read, sums saturating).
// Reads take no lock of the agent's: a scrape never waits for a prepare, nor a prepare for it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/share_region.h"
#include "tessera/status.h"

namespace tessera::agent {

// One owned slot of a usage page (a live process of the share, as the shim wrote it).
struct ProcessSlotUsage {
  uint64_t owner = 0;  // the owner word (share::make_owner): pid, namespace and start hashes
  uint32_t pid = 0;    // in the process's own pid namespace
  std::array<uint64_t, share::kMaxDevices> memory_bytes{};  // per limits-page device
  uint64_t launches = 0;
  uint64_t gpu_busy_ns = 0;  // the meter's per-process figure (0 where nothing measures it)
};

struct ShareFolderUsage {
  std::vector<std::string> uuids;  // the limits page's devices, by index
  // Per limits-page device: what one context costs, as the agent measured it (0: not measured).
  std::array<uint64_t, share::kMaxDevices> context_overhead_bytes{};
  // Per limits-page device.
  std::array<uint64_t, share::kMaxDevices> memory_bytes{};
  std::array<uint64_t, share::kMaxDevices> gpu_busy_ns{};
  // Per process slot, summed over the folder's processes (the page keeps them per process, not
  // per device).
  uint64_t launches = 0;
  uint64_t throttled_ns = 0;
  uint64_t allocations_denied = 0;
  uint32_t processes = 0;
  std::vector<ProcessSlotUsage> process_slots;  // the owned slots (the local API lists them)
  bool usage_valid = false;  // false: no usable usage page (yet); the figures above are 0
  // Why a usage page that is there could not be read whole (a symlink, a FIFO, shorter than its
  // header or its slots, not valid); empty when it was read or is absent (nothing used yet).
  std::string usage_error;

  // Index of `uuid` in the limits page, or -1.
  int device_index(const std::string& uuid) const;
};

// Reusable buffers, so a scrape of many folders allocates once.
struct ShareReadBuffers {
  std::vector<unsigned char> limits;
  std::vector<unsigned char> usage;
};

// The folder's figures, or why not: kNotFound without a limits page, kFailedPrecondition when it
// is no valid one. GPU time comes from the limits page's `measured` when the agent measures the
// share (kMeasureAgent), else from the usage page's compute area (the shim's meter).
Result<ShareFolderUsage> read_share_folder(const std::string& folder, ShareReadBuffers& buffers);

}  // namespace tessera::agent
