#include "tracker.h"

#include <sched.h>
#include <sys/mman.h>

namespace tessera::vgpu {
namespace {

constexpr size_t kInitialCapacity = 1024;

size_t hash_of(HandleKind kind, uint64_t handle) {
  uint64_t x = handle ^ (static_cast<uint64_t>(kind) << 56);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<size_t>(x);
}

}  // namespace

void Tracker::lock() {
  while (locked_.exchange(true, std::memory_order_acquire)) {
    while (locked_.load(std::memory_order_relaxed)) sched_yield();
  }
}

void Tracker::unlock() {
  locked_.store(false, std::memory_order_release);
}

long Tracker::find_index(HandleKind kind, uint64_t handle) const {
  if (!entries_) return -1;
  const size_t mask = capacity_ - 1;
  for (size_t i = hash_of(kind, handle) & mask, probes = 0; probes < capacity_;
       i = (i + 1) & mask, ++probes) {
    const Entry& entry = entries_[i];
    if (entry.state == 0) return -1;
    if (entry.state == 1 && entry.record.kind == kind && entry.record.handle == handle) {
      return static_cast<long>(i);
    }
  }
  return -1;
}

bool Tracker::grow() {
  const size_t capacity =
      capacity_ == 0 ? kInitialCapacity : (used_ * 4 > capacity_ ? capacity_ * 2 : capacity_);
  void* memory = mmap(nullptr, capacity * sizeof(Entry), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  auto* entries = static_cast<Entry*>(memory);  // zero-filled: every state is 0 (empty)
  const size_t mask = capacity - 1;
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].state != 1) continue;
    size_t j = hash_of(entries_[i].record.kind, entries_[i].record.handle) & mask;
    while (entries[j].state != 0) j = (j + 1) & mask;
    entries[j] = entries_[i];
  }
  if (entries_) munmap(entries_, capacity_ * sizeof(Entry));
  entries_ = entries;
  capacity_ = capacity;
  filled_ = used_;
  return true;
}

bool Tracker::insert(const Record& record) {
  lock();
  bool ok = true;
  if ((filled_ + 1) * 2 > capacity_) ok = grow();
  if (ok) {
    const long existing = find_index(record.kind, record.handle);
    if (existing >= 0) {
      entries_[existing].record = record;  // a handle the driver reused: the newest wins
    } else {
      const size_t mask = capacity_ - 1;
      size_t i = hash_of(record.kind, record.handle) & mask;
      while (entries_[i].state == 1) i = (i + 1) & mask;
      if (entries_[i].state == 0) ++filled_;
      entries_[i].record = record;
      entries_[i].state = 1;
      ++used_;
    }
  }
  unlock();
  return ok;
}

bool Tracker::find(HandleKind kind, uint64_t handle, Record* out) {
  lock();
  const long index = find_index(kind, handle);
  if (index >= 0) *out = entries_[index].record;
  unlock();
  return index >= 0;
}

bool Tracker::take(HandleKind kind, uint64_t handle, Record* out) {
  lock();
  const long index = find_index(kind, handle);
  if (index >= 0) {
    *out = entries_[index].record;
    entries_[index].state = 2;
    --used_;
  }
  unlock();
  return index >= 0;
}

size_t Tracker::take_context(uint64_t context, Record* out, size_t capacity) {
  lock();
  size_t taken = 0;
  for (size_t i = 0; i < capacity_ && taken < capacity; ++i) {
    Entry& entry = entries_[i];
    if (entry.state == 1 && entry.record.context == context &&
        entry.record.kind != HandleKind::kPool) {
      out[taken++] = entry.record;
      entry.state = 2;
      --used_;
    }
  }
  unlock();
  return taken;
}

size_t Tracker::collect(HandleKind kind, Record* out, size_t capacity) {
  lock();
  size_t found = 0;
  for (size_t i = 0; i < capacity_ && found < capacity; ++i) {
    if (entries_[i].state == 1 && entries_[i].record.kind == kind)
      out[found++] = entries_[i].record;
  }
  unlock();
  return found;
}

size_t Tracker::retag_aux(HandleKind kind, uint64_t from, uint64_t to) {
  lock();
  size_t changed = 0;
  for (size_t i = 0; i < capacity_; ++i) {
    Entry& entry = entries_[i];
    if (entry.state == 1 && entry.record.kind == kind && entry.record.aux == from) {
      entry.record.aux = to;
      ++changed;
    }
  }
  unlock();
  return changed;
}

size_t Tracker::size() {
  lock();
  const size_t live = used_;
  unlock();
  return live;
}

void Tracker::reset_after_fork() {
  locked_.store(false, std::memory_order_relaxed);
  clear();
}

void Tracker::clear() {
  lock();
  for (size_t i = 0; i < capacity_; ++i) entries_[i].state = 0;
  used_ = 0;
  filled_ = 0;
  unlock();
}

}  // namespace tessera::vgpu
