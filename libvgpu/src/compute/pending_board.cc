#include "compute/pending_board.h"

#include <errno.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "compute/priority_board.h"
#include "log.h"
#include "os/system_calls.h"
#include "tessera/share_contract.h"
#include "tessera/unique_fd.h"

namespace tessera::vgpu::compute {
namespace {

constexpr off_t record_offset(int record) {
  return static_cast<off_t>(offsetof(PendingBoard::Page, records) +
                            sizeof(PendingBoard::Record) * static_cast<size_t>(record));
}
constexpr size_t kHeaderSize = offsetof(PendingBoard::Record, spans);
// The longest span one stored entry holds (a longer one is stored as several).
constexpr int64_t kLongestStored = 4'000'000'000;

}  // namespace

PendingBoard::Split PendingBoard::equal_split(const ProcessSpan* spans, int count, uint32_t own,
                                              int64_t from_ns, int64_t to_ns, Edge* edges) {
  int depth[kRecords];
  int64_t mark[kRecords];
  int64_t parts[kRecords] = {};
  share::equal_parts(spans, count, from_ns, to_ns, kRecords, edges, depth, mark, parts);
  Split split;
  for (int p = 0; p < kRecords; ++p) ((own >> p) & 1u ? split.own_ns : split.others_ns) += parts[p];
  return split;
}

void PendingBoard::refuse(int device, const char* why) {
  give_up_user_board(fds_[device], failed_[device]);
  if (where_ == Where::kShareFolder) {
    TESSERA_ERROR(
        "pending file of device %d (%s/%s%s) %s: the agent charges this share what its "
        "launches there spanned (the other shares' time in it)",
        device, dir_, share::kPendingFilePrefix, limits_->devices[device].uuid, why);
    return;
  }
  TESSERA_ERROR(
      "pending board of device %d (%s/tessera-%u/tessera-pending-%s) %s: this share's timed GPU "
      "time there is what its launches spanned (the other shares' time in it)",
      device, dir_, os::effective_user_id(), limits_->devices[device].uuid, why);
}

int PendingBoard::board_fd(int device) {
  if (device < 0 || device >= static_cast<int>(share::kMaxDevices) || failed_[device]) return -1;
  if (fds_[device] > 0) return fds_[device] - 1;
  if (where_ == Where::kShareFolder) {
    UniqueFd opened;
    if (const int error =
            share::open_or_create_pending_file(dir_, limits_->devices[device].uuid, opened);
        error != 0) {
      refuse(device, error == EPROTO   ? "is not a pending file (remove it to start a new one)"
                     : error == EINVAL ? "has no usable device name"
                                       : "cannot be opened or created");
      return -1;
    }
    fds_[device] = opened.release() + 1;
    return fds_[device] - 1;
  }
  std::memset(&page_, 0, sizeof page_);
  page_.magic = kMagic;
  page_.version = kVersion;
  const char* why = nullptr;
  const int fd = open_device_board(dir_, "tessera-pending-", limits_->devices[device].uuid, &page_,
                                   sizeof page_, kMagic, kVersion, &why);
  if (fd < 0) {
    refuse(device, why);
    return -1;
  }
  fds_[device] = fd + 1;
  return fd;
}

bool PendingBoard::usable(int device) {
  return board_fd(device) >= 0;
}

int PendingBoard::claim(int fd, int device, int64_t now_ns) {
  const uint64_t now = now_ns > 0 ? static_cast<uint64_t>(now_ns) : 0;
  Record header{};
  if (mine_[device] > 0) {
    const int record = mine_[device] - 1;
    if (os::read_at(fd, &header, kHeaderSize, record_offset(record)) ==
            static_cast<ssize_t>(kHeaderSize) &&
        header.process == process_) {
      return record;
    }
    // Taken by another process (two claimed it at once, or ours had expired): claim again.
    mine_[device] = 0;
  }
  const int first = static_cast<int>(process_ % kRecords);
  for (int k = 0; k < kRecords; ++k) {
    const int record = (first + k) % kRecords;
    if (os::read_at(fd, &header, kHeaderSize, record_offset(record)) !=
        static_cast<ssize_t>(kHeaderSize)) {
      refuse(device, "was truncated");
      return -1;
    }
    const bool free = header.process == 0 || header.kept_until_ns <= now;
    if (header.process != process_ && !free) continue;
    // The count of spans written goes on from the record's: its readers' places stay valid.
    header.process = process_;
    header.share = share_;
    header.kept_until_ns = now + static_cast<uint64_t>(kHold);
    if (os::write_at(fd, &header, kHeaderSize, record_offset(record)) !=
        static_cast<ssize_t>(kHeaderSize)) {
      refuse(device, "cannot be written");
      return -1;
    }
    mine_[device] = record + 1;
    return record;
  }
  // Readers must know some spans are missing here (the agent then charges the share what its
  // launches spanned).
  const uint64_t overflowed = 1;
  os::write_at(fd, &overflowed, sizeof overflowed, offsetof(Page, overflowed));
  if (!full_said_[device]) {
    full_said_[device] = true;
    TESSERA_ERROR(
        "pending board of device %d is full (%d processes): this process's spans are not seen "
        "by the other shares there",
        device, kRecords);
  }
  return -1;
}

bool PendingBoard::write_span(int fd, int record, uint64_t number, int64_t start_ns,
                              uint32_t length_ns) {
  const Stored stored{start_ns, length_ns, static_cast<uint32_t>(number + 1)};
  const off_t at = record_offset(record) + static_cast<off_t>(offsetof(Record, spans)) +
                   static_cast<off_t>(sizeof(Stored) * (number % kSpans));
  return os::write_at(fd, &stored, sizeof stored, at) == static_cast<ssize_t>(sizeof stored);
}

void PendingBoard::publish(int device, const PendingSpan* spans, int count, int64_t now_ns) {
  const int fd = board_fd(device);
  if (fd < 0) return;
  const int record = claim(fd, device, now_ns);
  if (record < 0) return;
  Record header{};
  if (os::read_at(fd, &header, kHeaderSize, record_offset(record)) !=
      static_cast<ssize_t>(kHeaderSize)) {
    refuse(device, "was truncated");
    return;
  }
  uint64_t written = header.written;
  for (int i = 0; i < count; ++i) {
    for (int64_t start = spans[i].start_ns; start < spans[i].end_ns; start += kLongestStored) {
      const int64_t length = std::min(spans[i].end_ns - start, kLongestStored);
      if (!write_span(fd, record, written, start, static_cast<uint32_t>(length))) {
        refuse(device, "cannot be written");
        return;
      }
      ++written;
    }
  }
  // The count last: a reader takes a span only once it is counted and its number matches.
  header.process = process_;
  header.share = share_;
  header.kept_until_ns = static_cast<uint64_t>(now_ns) + static_cast<uint64_t>(kHold);
  header.written = written;
  if (os::write_at(fd, &header, kHeaderSize, record_offset(record)) !=
      static_cast<ssize_t>(kHeaderSize)) {
    refuse(device, "cannot be written");
  }
}

bool PendingBoard::charge(int device, int64_t from_ns, int64_t to_ns, Split* out) {
  *out = Split{};
  const int fd = board_fd(device);
  if (fd < 0) return false;
  if (os::read_at(fd, &page_, sizeof page_, 0) != static_cast<ssize_t>(sizeof page_) ||
      page_.magic != kMagic || page_.version != kVersion) {
    refuse(device, "was truncated or overwritten");
    return false;
  }
  int count = 0;
  int64_t late_ns = 0;
  uint32_t own = 0;
  for (int r = 0; r < kRecords; ++r) {
    const Record& record = page_.records[r];
    if (record.process == 0) continue;
    // Spans counted since the last look at this record; none for a record first seen now (its
    // spans before `from` are from before this share's windows).
    const uint64_t seen =
        seen_process_[device][r] == record.process ? seen_written_[device][r] : record.written;
    seen_process_[device][r] = record.process;
    seen_written_[device][r] = record.written;
    int64_t late = 0;
    count += share::take_spans(record, seen, from_ns, to_ns, r, spans_ + count, kSpans, &late);
    if (record.share == share_) {
      own |= 1u << r;
      late_ns += std::min(late, share::kPendingLateCap);
    }
  }
  *out = equal_split(spans_, count, own, from_ns, to_ns, edges_);
  out->own_ns += std::min(late_ns, share::kPendingLateCap);
  return true;
}

}  // namespace tessera::vgpu::compute
