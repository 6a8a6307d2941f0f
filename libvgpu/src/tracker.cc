#include "tracker.h"

#include "os/system_calls.h"

namespace tessera::vgpu {
namespace {

// Small enough to stay in the L1 cache (64 entries of 48 bytes) while a process holds few
// handles: every handle hashes to a random entry, and a table of cold lines costs a cache miss
// per allocation. Doubling when half full, it reaches any size in a few growths.
constexpr size_t kInitialCapacity = 64;

// By handle only, so every kind of one handle lies on one probe run (take_either's one probe).
size_t hash_of(uint64_t handle) {
  uint64_t x = handle;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<size_t>(x);
}

}  // namespace

void Tracker::lock() {
  lock_.lock();
}

void Tracker::unlock() {
  lock_.unlock();
}

long Tracker::find_index(HandleKind kind, uint64_t handle) const {
  if (!entries_) return -1;
  const size_t mask = capacity_ - 1;
  // The table is never more than half full, so every probe run ends at an empty entry.
  for (size_t i = hash_of(handle) & mask; entries_[i].state != 0; i = (i + 1) & mask) {
    const Record& record = entries_[i].record;
    if (record.kind == kind && record.handle == handle) return static_cast<long>(i);
  }
  return -1;
}

void Tracker::erase_at(size_t index) {
  const size_t mask = capacity_ - 1;
  size_t gap = index;
  for (size_t i = (gap + 1) & mask; entries_[i].state != 0; i = (i + 1) & mask) {
    // An entry whose home lies cyclically in (gap, i] is found without passing the gap: it stays.
    // Any other entry of the run moves back into the gap, which then moves to where it was.
    const size_t home = hash_of(entries_[i].record.handle) & mask;
    const bool stays = gap <= i ? (gap < home && home <= i) : (gap < home || home <= i);
    if (stays) continue;
    entries_[gap] = entries_[i];
    gap = i;
  }
  entries_[gap].state = 0;
  --used_;
}

bool Tracker::grow() {
  const size_t capacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
  void* memory = os::map_private_anonymous(capacity * sizeof(Entry));
  if (!memory) return false;
  auto* entries = static_cast<Entry*>(memory);  // zero-filled: every state is 0 (empty)
  const size_t mask = capacity - 1;
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].state == 0) continue;
    size_t j = hash_of(entries_[i].record.handle) & mask;
    while (entries[j].state != 0) j = (j + 1) & mask;
    entries[j] = entries_[i];
  }
  if (entries_) os::unmap(entries_, capacity_ * sizeof(Entry));
  entries_ = entries;
  capacity_ = capacity;
  ++mappings_;
  return true;
}

bool Tracker::insert(const Record& record) {
  lock();
  bool ok = true;
  if ((used_ + 1) * 2 > capacity_) ok = grow();
  if (ok) {
    const size_t mask = capacity_ - 1;
    size_t i = hash_of(record.handle) & mask;
    while (entries_[i].state != 0 && !(entries_[i].record.kind == record.kind &&
                                       entries_[i].record.handle == record.handle)) {
      i = (i + 1) & mask;
    }
    if (entries_[i].state == 0) ++used_;  // else a handle the driver reused: the newest wins
    entries_[i].record = record;
    entries_[i].state = 1;
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
    erase_at(static_cast<size_t>(index));
  }
  unlock();
  return index >= 0;
}

bool Tracker::take_either(HandleKind first, HandleKind second, uint64_t handle, Record* out) {
  lock();
  long found = -1;
  if (entries_) {
    const size_t mask = capacity_ - 1;
    for (size_t i = hash_of(handle) & mask; entries_[i].state != 0; i = (i + 1) & mask) {
      const Record& record = entries_[i].record;
      if (record.handle != handle) continue;
      if (record.kind == first) {
        found = static_cast<long>(i);
        break;
      }
      if (record.kind == second && found < 0) found = static_cast<long>(i);
    }
  }
  if (found >= 0) {
    *out = entries_[found].record;
    erase_at(static_cast<size_t>(found));
  }
  unlock();
  return found >= 0;
}

size_t Tracker::take_context(uint64_t context, Record* out, size_t capacity) {
  lock();
  size_t taken = 0;
  for (size_t i = 0; i < capacity_ && taken < capacity;) {
    const Entry& entry = entries_[i];
    if (entry.state == 1 && entry.record.context == context &&
        entry.record.kind != HandleKind::kPool) {
      out[taken++] = entry.record;
      // A later entry may move back into i: look at i again. One that wraps around from the
      // start into the end was looked at already (and taken, had it matched).
      erase_at(i);
      continue;
    }
    ++i;
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

size_t Tracker::capacity() {
  lock();
  const size_t room = capacity_;
  unlock();
  return room;
}

size_t Tracker::mappings() {
  lock();
  const size_t made = mappings_;
  unlock();
  return made;
}

void Tracker::reset_after_fork() {
  lock_.reset_after_fork();
  clear();
}

void Tracker::clear() {
  lock();
  for (size_t i = 0; i < capacity_; ++i) entries_[i].state = 0;
  used_ = 0;
  unlock();
}

}  // namespace tessera::vgpu
