// The shim's process-wide state: options (read once, on first use), the share region, the handle
// tracker, and the CUDA-ordinal -> share-device cache. Everything here is off the launch path.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "region.h"
#include "tessera/vgpu/options.h"
#include "tracker.h"

namespace tessera::vgpu {

inline constexpr int kMaxOrdinals = 64;

// Where an operation on a device is accounted.
inline constexpr int kPassThrough = -1;  // no limits configured (or CUDA not ready): no accounting
inline constexpr int kBlocked = -2;      // the device may not be used: every allocation fails

struct Shim {
  std::atomic<int> init_state{0};  // 0 not started, 1 running, 2 done
  Options options;
  bool enforcing = false;

  std::atomic<int> region_state{0};  // 0 not open, 1 opening, 2 open, 3 failed (fail closed)
  Region region;
  Tracker tracker;
  std::atomic<uint64_t> ordinal_cache[kMaxOrdinals] = {};  // generation << 8 | (index + 2)
  // The allocators' own state (pools, contexts, graph memory) lives in their files.
};

Shim& shim();

// Reads the options once (getenv happens here only) and applies the log level.
void ensure_initialized();
inline bool enforcing() {
  ensure_initialized();
  return shim().enforcing;
}

// The share-device index for a CUDA ordinal: >= 0, kPassThrough or kBlocked. Opens the region on
// first use (after cuInit: a standalone share enumerates the devices).
int device_for_ordinal(CUdevice ordinal);
// The same for an NVML device, by UUID (never initialises CUDA).
int device_for_uuid(const char* uuid);
// The current context's device and index; kPassThrough if there is no current context.
int current_device(CUdevice* ordinal, CUcontext* context);

void format_uuid(const CUuuid& uuid, char* out, size_t capacity);

// Reserve on the share (with the periodic dead-process reclaim) / give back. When a reservation
// would fail, the before-refusal callback runs first and the reservation is tried once more.
bool reserve_bytes(int index, uint64_t bytes);
void release_bytes(int index, uint64_t bytes);

// Registered by a layer above that can give memory back to the share on demand (the stream-ordered
// pools, pools.cc: a pool trimmed at synchronisation may have given memory back since its last
// operation). One callback; registering again replaces it.
using BeforeRefusal = void (*)();
void set_before_refusal(BeforeRefusal callback);

// Runs `reset` in the child after every fork (registered from the layers' constructors, so each
// resets its own state: the parent's handles and locks are not the child's).
void on_fork_child(void (*reset)());

// What the simulated (and real) driver charges for a linear allocation: 2 MiB pages from 1 MiB
// up, 512-byte granules below. False on overflow.
bool charged_size(uint64_t requested, uint64_t* charged);

struct SpinGuard {
  explicit SpinGuard(std::atomic<bool>& flag);
  ~SpinGuard();
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;
  std::atomic<bool>& flag_;
};

}  // namespace tessera::vgpu
