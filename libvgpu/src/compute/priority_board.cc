#include "compute/priority_board.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "log.h"
#include "os/system_calls.h"

namespace tessera::vgpu::compute {
namespace {

constexpr off_t kActiveOffset = offsetof(UserBoard::Page, active_until_ns);
constexpr off_t kEntriesOffset = offsetof(UserBoard::Page, entries);

uint64_t mix(uint64_t value) {  // splitmix64's finaliser
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

// Closes on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) os::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// A file or folder only this user can reach: ours, no group or other bits.
bool private_to_user(const struct stat& info) {
  return info.st_uid == os::effective_user_id() && (info.st_mode & 077) == 0;
}

}  // namespace

int open_device_board(const char* dir, const char* prefix, const char* uuid, const void* initial,
                      size_t size, uint32_t magic, uint32_t version, const char** why) {
  if (!uuid[0] || std::strchr(uuid, '/')) {
    *why = "has no usable device name";
    return -1;
  }
  char name[96];
  std::snprintf(name, sizeof name, "%s%s", prefix, uuid);
  Fd board(open_user_board(dir, name, initial, size, why));
  if (board.get() < 0) return -1;
  uint32_t head[2] = {};
  if (os::read_at(board.get(), head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) ||
      head[0] != magic || head[1] != version) {
    *why = "is not a board of its kind (remove it to start a new one)";
    return -1;
  }
  return board.release();
}

void give_up_user_board(int& fd_plus_one, bool& failed) {
  failed = true;
  if (fd_plus_one > 0) os::close(fd_plus_one - 1);
  fd_plus_one = 0;
}

void UserBoard::refuse(int device, const char* why) {
  give_up_user_board(fds_[device], failed_[device]);
  TESSERA_ERROR(
      "priority board of device %d (%s/tessera-%u/tessera-device-%s) %s: priorities are "
      "not applied on this device by this process",
      device, dir_, os::effective_user_id(), limits_->devices[device].uuid, why);
}

int open_user_board(const char* dir, const char* name, const void* initial, size_t size,
                    const char** why) {
  char folder[320];
  std::snprintf(folder, sizeof folder, "%s/tessera-%u", dir, os::effective_user_id());
  if (os::make_dir(folder, 0700) != 0 && errno != EEXIST) {
    *why = "cannot be created (mkdir of its folder failed)";
    return -1;
  }
  const Fd folder_fd(os::open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat info {};
  if (folder_fd.get() < 0 || os::stat_fd(folder_fd.get(), &info) != 0) {
    *why = "is in a folder that cannot be opened (or is a symlink)";
    return -1;
  }
  if (!private_to_user(info)) {
    *why = "is in a folder of another user or open to others (must be 0700, ours)";
    return -1;
  }
  constexpr int kOpenFlags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = os::open_at(folder_fd.get(), name, kOpenFlags);
  if (fd < 0 && errno == ENOENT) {
    // Created fully initialised under a temporary name, then linked into place.
    char temporary[160];
    std::snprintf(temporary, sizeof temporary, ".%s.%d.tmp", name, os::process_id());
    const Fd created(os::open_at(folder_fd.get(), temporary,
                                 O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (created.get() >= 0) {
      if (os::change_mode(created.get(), 0600) == 0 &&
          os::write_at(created.get(), initial, size, 0) == static_cast<ssize_t>(size)) {
        // EEXIST: another process was first.
        os::link_at(folder_fd.get(), temporary, folder_fd.get(), name);
      }
      os::unlink_at(folder_fd.get(), temporary);
    }
    fd = os::open_at(folder_fd.get(), name, kOpenFlags);
  }
  Fd board(fd);
  if (board.get() < 0) {
    *why = "cannot be opened";
    return -1;
  }
  if (os::stat_fd(board.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    *why = "is not a regular file";
    return -1;
  }
  if (!private_to_user(info)) {
    *why = "belongs to another user or is open to others (must be 0600, ours)";
    return -1;
  }
  if (info.st_size != static_cast<off_t>(size)) {
    *why = "has the wrong size (remove it to start a new one)";
    return -1;
  }
  return board.release();
}

int UserBoard::board_fd(int device) {
  if (failed_[device]) return -1;
  if (fds_[device] > 0) return fds_[device] - 1;
  Page page{};
  page.magic = kMagic;
  page.version = kVersion;
  const char* why = nullptr;
  const int fd = open_device_board(dir_, "tessera-device-", limits_->devices[device].uuid, &page,
                                   sizeof page, kMagic, kVersion, &why);
  if (fd < 0) {
    refuse(device, why);
    return -1;
  }
  fds_[device] = fd + 1;
  return fd;
}

// Never mapped: a board truncated under us makes a short read here, not a SIGBUS. Two processes
// that announce the same level at once may overwrite each other's extension by at most a period;
// a read racing a write can see a torn value for one period. Both only shift one decision.
void UserBoard::announce(int device, uint32_t priority, int64_t until_ns) {
  const int fd = board_fd(device);
  if (fd < 0) return;
  const off_t at = kActiveOffset + 8 * priority_rank(priority);
  uint64_t current = 0;
  if (os::read_at(fd, &current, sizeof current, at) != static_cast<ssize_t>(sizeof current)) {
    refuse(device, "was truncated");
    return;
  }
  if (current >= static_cast<uint64_t>(until_ns)) return;
  const uint64_t until = static_cast<uint64_t>(until_ns);
  if (os::write_at(fd, &until, sizeof until, at) != static_cast<ssize_t>(sizeof until))
    refuse(device, "cannot be written");
}

bool UserBoard::higher_active(int device, uint32_t priority, int64_t now_ns) {
  const int fd = board_fd(device);
  if (fd < 0) return false;
  uint64_t until[3] = {};
  if (os::read_at(fd, until, sizeof until, kActiveOffset) != static_cast<ssize_t>(sizeof until)) {
    refuse(device, "was truncated");
    return false;
  }
  for (int rank = priority_rank(priority) + 1; rank < 3; ++rank) {
    if (until[rank] > static_cast<uint64_t>(now_ns)) return true;
  }
  return false;
}

uint64_t UserBoard::share_identity(const char* share_dir, uint64_t owner) {
  if (share_dir && share_dir[0]) {
    const Fd dir(os::open(share_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat info {};
    if (dir.get() >= 0 && os::stat_fd(dir.get(), &info) == 0) {
      const uint64_t identity =
          mix(mix(static_cast<uint64_t>(info.st_dev)) ^ static_cast<uint64_t>(info.st_ino));
      return identity ? identity : 1;
    }
  }
  return owner ? owner : 1;
}

// One pread of the entries, one pwrite of the share's own entry while it is active. Two leaders
// that claim the same free entry at once overwrite each other: the one whose entry is gone claims
// another at its next period, so a share may be missing from the others' view for one period.
// A read racing a write may see a torn entry: it shifts one decision by one period.
uint32_t UserBoard::spare(int device, uint32_t priority, const Claim& own, bool active,
                          int64_t now_ns, int64_t until_ns) {
  const int fd = board_fd(device);
  if (fd < 0) return spare_part(own, nullptr, 0);
  Entry entries[kEntries];
  if (os::read_at(fd, entries, sizeof entries, kEntriesOffset) !=
      static_cast<ssize_t>(sizeof entries)) {
    refuse(device, "was truncated");
    return spare_part(own, nullptr, 0);
  }
  const uint64_t now = now_ns > 0 ? static_cast<uint64_t>(now_ns) : 0;
  int mine = -1;
  for (int i = 0; i < kEntries && mine < 0; ++i) {
    if (entries[i].identity == identity_) mine = i;
  }
  if (active) {
    if (mine < 0) {
      // A free entry (never claimed, or expired), looked for from a place of the share's own.
      const int first = static_cast<int>(identity_ % kEntries);
      for (int k = 0; k < kEntries && mine < 0; ++k) {
        const int i = (first + k) % kEntries;
        if (entries[i].identity == 0 || entries[i].active_until_ns <= now) mine = i;
      }
    }
    if (mine >= 0) {
      const Entry entry{identity_,   static_cast<uint64_t>(until_ns),
                        own.request, own.limit,
                        priority,    timed_us_[device]};
      if (os::write_at(fd, &entry, sizeof entry, kEntriesOffset + mine * sizeof(Entry)) !=
          static_cast<ssize_t>(sizeof entry)) {
        refuse(device, "cannot be written");
        return spare_part(own, nullptr, 0);
      }
      entries[mine] = entry;
    } else if (!full_said_[device]) {
      full_said_[device] = true;
      TESSERA_ERROR(
          "priority board of device %d is full (%d active shares): this share's cores request "
          "is not reserved against the others' on this device",
          device, kEntries);
    }
  }
  Claim others[kEntries];
  size_t count = 0;
  const int rank = priority_rank(priority);
  for (int i = 0; i < kEntries; ++i) {
    const Entry& entry = entries[i];
    if (i == mine || entry.identity == 0 || entry.identity == identity_) continue;
    if (entry.active_until_ns <= now || priority_rank(entry.priority) != rank) continue;
    others[count++] = Claim{entry.request, entry.limit};
  }
  return spare_part(own, others, count);
}

bool UserBoard::others_timed(int device, uint64_t own_total_ns, int64_t now_ns, uint64_t* others_ns,
                             int* sharers) {
  timed_us_[device] = static_cast<uint32_t>(own_total_ns / 1000);
  *others_ns = 0;
  *sharers = 0;
  const int fd = board_fd(device);
  if (fd < 0) return false;
  Entry entries[kEntries];
  if (os::read_at(fd, entries, sizeof entries, kEntriesOffset) !=
      static_cast<ssize_t>(sizeof entries)) {
    refuse(device, "was truncated");
    return false;
  }
  const uint64_t now = now_ns > 0 ? static_cast<uint64_t>(now_ns) : 0;
  for (int i = 0; i < kEntries; ++i) {
    const Entry& entry = entries[i];
    const bool other = entry.identity != 0 && entry.identity != identity_;
    // Growth since the last look at this entry, modulo 2^32 microseconds; an entry that another
    // share took since is seen from now on.
    const bool same = other && seen_identity_[device][i] == entry.identity;
    const uint32_t growth_us = same ? entry.timed_us - seen_timed_us_[device][i] : 0;
    seen_identity_[device][i] = other ? entry.identity : 0;
    seen_timed_us_[device][i] = entry.timed_us;
    if (!other || entry.active_until_ns <= now || growth_us == 0) continue;
    *others_ns += static_cast<uint64_t>(growth_us) * 1000;
    ++*sharers;
  }
  return true;
}

}  // namespace tessera::vgpu::compute
