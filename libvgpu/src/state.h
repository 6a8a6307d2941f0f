// The shim's process-wide state: options (read once, on first use), the shares (every share
// folder the process was given, each one Region), the process's GPUs (each one held through one or
// more shares), the handle tracker, and the CUDA-ordinal -> GPU cache. Everything here is off the
// launch path.
//
// A GpuIndex, as the allocators pass it around, is an index into Shim::gpus: one GPU of the
// process by UUID, whatever shares hold it (index_spaces.h: the three index spaces). Its limit is
// the sum of those shares' limits; a reservation is charged to one share with room, in the shares'
// stable order (split over several only when no single one has room), so no share's usage ever
// exceeds its own limit; a release takes the bytes back from this process's slots of those shares,
// last share first.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "index_spaces.h"
#include "region.h"
#include "spin_lock.h"
#include "tessera/vgpu/options.h"
#include "tracker.h"

namespace tessera::vgpu {

inline constexpr int kMaxOrdinals = 64;
// Shares one process can be given (CDI devices of its container) and GPUs it can see through them.
inline constexpr int kMaxShares = 8;
inline constexpr int kMaxGpus = 32;

// One GPU of the process (by UUID) and where it is in each share's limits page.
struct Gpu {
  char uuid[share::kUuidBytes] = {};
  std::atomic<uint64_t> index_cache[kMaxShares] = {};  // generation << 8 | (limits index + 2)
  // This process's live contexts on the GPU and what each is charged now (under the context
  // ledger's lock; read without it on the reservation path to see whether anything changed).
  std::atomic<uint32_t> contexts{0};
  std::atomic<uint64_t> charge_per_context{0};
};

// A share folder picked when the shim initialises (docs/libvgpu.md, "Finding the shares"): its
// limits file is opened (and, where required, checked read-only) then, and mapped from that same
// fd when the shares open.
struct ShareCandidate {
  char dir[256] = {};
  int limits_fd = -1;  // -1: the limits file could not be opened (the share fails closed)
};

struct Shim {
  std::atomic<int> init_state{0};  // 0 not started, 1 running, 2 done
  Options options;
  bool enforcing = false;

  // Share folders given to the process (found at initialisation; none: a standalone region).
  int candidate_count = 0;
  ShareCandidate candidates[kMaxShares];
  bool uses_shares() const { return candidate_count > 0; }

  std::atomic<int> region_state{0};  // 0 not open, 1 opening, 2 open, 3 failed (fail closed)
  int region_count = 0;              // regions[0, region_count) are open once region_state is 2
  Region regions[kMaxShares];
  bool mps_conflict = false;  // two MPS shares: refused (cuInit fails, every device is blocked)

  SpinLock gpu_lock{LockRank::kGpus};
  std::atomic<int> gpu_count{0};  // append-only: an index, once handed out, always names its GPU
  Gpu gpus[kMaxGpus];

  Tracker tracker;
  std::atomic<uint64_t> ordinal_cache[kMaxOrdinals] = {};  // generation << 8 | (gpu index + 2)
  // The allocators' own state (pools, contexts, graph memory) lives in their files.
};

// The one instance (state.cc); inline so the allocation path reaches it without a call.
extern Shim g_shim;
inline Shim& shim() {
  return g_shim;
}

// Reads the options once (getenv happens here only) and applies the log level.
void ensure_initialized();
inline bool enforcing() {
  ensure_initialized();
  return shim().enforcing;
}

// The share-device index for a CUDA ordinal: >= 0, kPassThrough or kBlocked. Opens the region on
// first use (after cuInit: a standalone share enumerates the devices).
GpuIndex device_for_ordinal(CudaOrdinal ordinal);
// The same for an NVML device, by UUID (never initialises CUDA).
GpuIndex device_for_uuid(const char* uuid);
// The current context's device and index; kPassThrough if there is no current context. One
// driver call (cuCtxGetCurrent, a thread-local read in the driver): each thread remembers the
// device of the context it last asked about, valid while the shares' generation and the context
// epoch stay the same; only a thread's first call, a context it has not asked about, a limits
// change or a context created or destroyed asks the driver for the device (cuCtxGetDevice).
GpuIndex current_device(CudaOrdinal* ordinal, CUcontext* context);
// A context was created or destroyed (a handle may now name another device): every thread's
// remembered device is stale.
void contexts_changed();

// "GPU-<uuid>", or "MIG-<uuid>" for a MIG device (is_mig_device).
void format_uuid(const CUuuid& uuid, char* out, size_t capacity, bool mig);
bool is_mig_device(CUdevice device);

// Reserve on the GPU's shares (with the periodic dead-process reclaim) / give back. When a
// reservation would fail, the before-refusal callback runs first and the reservation is tried once
// more. charge_bytes adds without a limit check (memory the driver already handed out), to the
// shares with room first.
bool reserve_bytes(GpuIndex index, uint64_t bytes);
void release_bytes(GpuIndex index, uint64_t bytes);
void charge_bytes(GpuIndex index, uint64_t bytes);

// Contexts (docs/libvgpu.md, "The context cost"). The charge per context on GPU `index`: inside a
// share the largest measured[].context_overhead its shares' limits pages publish (0 there: the
// built-in 500 MiB), never the environment; without a share TESSERA_CONTEXT_OVERHEAD.
uint64_t context_charge(GpuIndex index);
// Charges one new context at the current cost (the live ones brought to it first); false, with
// nothing charged, when it does not fit.
bool charge_context(GpuIndex index);
// Gives one context's charge back (at what it is charged now).
void release_context(GpuIndex index);
// Brings the charge of this process's live contexts on GPU `index` to the current cost: a rise is
// charged (even above the limit: the memory is in use, so new allocations then fail), a fall given
// back. Every reservation calls it; lock-free when nothing changed.
void update_context_charge(GpuIndex index);

// The GPU's limit (the sum of its shares' limits; share::kUnlimited if any is unlimited; 0 for
// kBlocked or a GPU no share holds any more) and what its shares hold (every process of them).
uint64_t device_limit(GpuIndex index);
uint64_t device_usage(GpuIndex index);
// Region::maybe_reclaim on every open share.
void maybe_reclaim();

// Generations as the caches store them: the low 56 bits (the cache word's low byte is the index).
inline constexpr uint64_t kGenerationMask = 0x00ffffffffffffffull;

// share_device when the cache does not answer: looks the GPU up and caches the answer.
LimitsIndex share_device_slow(GpuIndex index, int region);

// Where GPU `index` is in share `region`'s limits page, or kNotInShare (that share does not hold
// it).
// Inline: it is on every reservation and release; a limits page rewritten since (a new
// generation) makes it look again.
inline LimitsIndex share_device(GpuIndex index, int region) {
  if (index.value < 0 || index.value >= g_shim.gpu_count.load(std::memory_order_acquire) ||
      region < 0 || region >= g_shim.region_count) {
    return kNotInShare;
  }
  const uint64_t generation = g_shim.regions[region].generation() & kGenerationMask;
  const uint64_t cached =
      g_shim.gpus[index.value].index_cache[region].load(std::memory_order_acquire);
  if (__builtin_expect(cached != 0 && (cached >> 8) == generation, 1)) {
    return LimitsIndex{static_cast<int>(cached & 0xff) - 2};
  }
  return share_device_slow(index, region);
}

// True when the process was given shares the shim cannot honour together (two MPS shares): cuInit
// fails and every device is blocked. Opens the shares if they are not open yet.
bool shares_refused();

// Combined generation of the open shares (changes when any share's limits page changes).
uint64_t shares_generation();

// Reclaim (docs/libvgpu.md, "Reclaim"). After the driver refused an allocation of `bytes` on GPU
// `index` with CUDA_ERROR_OUT_OF_MEMORY although the share's limit admitted it (the bytes are
// reserved already): when the process is in an agent's share (not a private one: no agent
// reclaims there) and that share holds the GPU within its memory request (its usage, this
// allocation included, at most the request), the share is owed the memory and the agent evicts
// borrowers of the GPU. The constructor publishes the request in the share's usage page
// (UsagePage::reclaim_*); again() sleeps one retry interval and says whether to call the driver
// again (until TESSERA_RECLAIM_WAIT_MS has passed since the refusal); the destructor withdraws
// the request. Only the failure path pays for any of it.
class ReclaimWait {
 public:
  ReclaimWait(GpuIndex index, uint64_t bytes);
  ~ReclaimWait();
  ReclaimWait(const ReclaimWait&) = delete;
  ReclaimWait& operator=(const ReclaimWait&) = delete;
  bool again();

 private:
  void publish();
  share::UsagePage* page_ = nullptr;  // null: not owed the memory, no wait
  uint64_t owner_ = 0;
  LimitsIndex device_;
  uint64_t bytes_ = 0;
  int64_t started_ns_ = 0;
  int64_t deadline_ns_ = 0;
};
inline constexpr int64_t kReclaimRetryNs = 20'000'000;  // between two driver calls while waiting

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
inline bool charged_size(uint64_t requested, uint64_t* charged) {
  const uint64_t align = requested >= (1ull << 20) ? (2ull << 20) : 512;
  if (requested > ~0ull - align) return false;
  *charged = (requested + align - 1) / align * align;
  return true;
}

}  // namespace tessera::vgpu
