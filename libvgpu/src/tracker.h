// What this process holds: driver handles (device pointers, VMM handles, arrays, contexts, pools)
// mapped to the bytes charged for them, so a free releases exactly what the allocation reserved.
// Process-local (not shared), an open-addressing table in mmap'd memory behind a spin lock that
// is never held across a driver call. Not on the launch path; on the allocation path one lock and
// one probe per insert or take. Linear probing with backward-shift deletion: a take leaves no
// tombstone behind, so alloc/free cycles of ever-new addresses never fill the table and it grows
// (a fresh mapping) only when the live handles outgrow half of it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "index_spaces.h"
#include "spin_lock.h"

namespace tessera::vgpu {

enum class HandleKind : uint8_t {
  kDevicePointer = 1,  // cuMemAlloc / Pitch / Managed
  kPoolPointer,        // cuMemAllocAsync / FromPoolAsync: aux = the pool, bytes = its share of
                       // the pool (charged through the pool, not on its own)
  kVmmHandle,          // cuMemCreate
  kArray,              // cuArrayCreate / cuArray3DCreate
  kContext,            // cuCtxCreate
  kPool,               // bytes = what the share is charged for the pool; context = the bytes
                       // its allocations in flight claimed (pools.cc); aux = 1 once the pool is
                       // destroyed (bytes = what its outstanding allocations still use)
  kGraphExec,          // an executable graph with memory allocation nodes: bytes = their size in
                       // 2 MiB pages, aux = CUDA ordinal | mapped bit (never owned by a context)
};

struct Record {
  uint64_t handle = 0;
  HandleKind kind = HandleKind::kDevicePointer;
  int16_t device = -1;  // the GPU's GpuIndex::value (Shim::gpus), narrowed: use gpu()
  uint64_t bytes = 0;
  uint64_t context = 0;  // the context that owns it (freed with the context), 0 if none
  uint64_t aux = 0;
  GpuIndex gpu() const { return GpuIndex{device}; }
};

class Tracker {
 public:
  // False only if the table cannot grow (out of host memory).
  bool insert(const Record& record);
  bool find(HandleKind kind, uint64_t handle, Record* out);
  // Removes and returns the record.
  bool take(HandleKind kind, uint64_t handle, Record* out);
  // Removes and returns the record of `handle` of kind `first`, else of kind `second` (one probe:
  // every kind of one handle hashes to the same place).
  bool take_either(HandleKind first, HandleKind second, uint64_t handle, Record* out);
  // Removes up to `capacity` records owned by `context` (all kinds but kPool) into `out`;
  // returns how many. Call again while it returns `capacity`.
  size_t take_context(uint64_t context, Record* out, size_t capacity);
  // Copies up to `capacity` records of `kind` into `out`; returns how many.
  size_t collect(HandleKind kind, Record* out, size_t capacity);
  // Sets aux = `to` on every record of `kind` whose aux is `from`; returns how many.
  size_t retag_aux(HandleKind kind, uint64_t from, uint64_t to);
  size_t size();
  // Entries the table has room for now (it grows by doubling, never shrinks), and how many
  // tables it has mapped so far (each growth maps a new one).
  size_t capacity();
  size_t mappings();
  void clear();
  // In a forked child: the parent's handles are not this process's, and another thread of the
  // parent may have held the lock at fork time (that thread does not exist in the child).
  void reset_after_fork();

 private:
  struct Entry {
    Record record;
    uint8_t state;  // 0 empty, 1 used
  };
  void lock() TESSERA_ACQUIRE(lock_);
  void unlock() TESSERA_RELEASE(lock_);
  long find_index(HandleKind kind, uint64_t handle) const TESSERA_REQUIRES(lock_);
  // Empties entry `index` and moves later entries of its probe run back into the gap.
  void erase_at(size_t index) TESSERA_REQUIRES(lock_);
  bool grow() TESSERA_REQUIRES(lock_);

  SpinLock lock_{LockRank::kTracker};
  Entry* entries_ TESSERA_GUARDED_BY(lock_) = nullptr;
  size_t capacity_ TESSERA_GUARDED_BY(lock_) = 0;  // a power of two
  size_t used_ TESSERA_GUARDED_BY(lock_) = 0;      // live entries (there are no others)
  size_t mappings_ TESSERA_GUARDED_BY(lock_) = 0;
};

}  // namespace tessera::vgpu
