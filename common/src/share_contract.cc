#include "tessera/share_contract.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "tessera/file_io.h"
#include "tessera/pending_spans.h"
#include "tessera/unique_fd.h"

namespace tessera::share {
namespace {

// Share paths are short (<root>/shares/<claim>-<device>-<share>); the shim keeps these on its
// stack.
constexpr size_t kPathCapacity = 1024;

// Distinguishes temporary page names of threads of one process (the pid, across processes).
std::atomic<unsigned> g_usage_sequence{0};

// "<proc_root>/<pid>/<leaf>" or "<proc_root>/self/<leaf>". False when it does not fit.
bool proc_path(char* out, size_t capacity, std::string_view proc_root, int pid, const char* leaf) {
  const int written =
      pid == kSelfPid
          ? std::snprintf(out, capacity, "%.*s/self/%s", static_cast<int>(proc_root.size()),
                          proc_root.data(), leaf)
          : std::snprintf(out, capacity, "%.*s/%d/%s", static_cast<int>(proc_root.size()),
                          proc_root.data(), pid, leaf);
  return written > 0 && static_cast<size_t>(written) < capacity;
}

// The last decimal number in `text` (NSpid: the innermost namespace's pid); 0 when none.
uint64_t last_number(std::string_view text) {
  uint64_t value = 0;
  uint64_t last = 0;
  bool in_number = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      value = (in_number ? value * 10 : 0) + static_cast<uint64_t>(c - '0');
      in_number = true;
    } else if (in_number) {
      last = value;
      in_number = false;
    }
  }
  return in_number ? value : last;
}

bool starts_with(std::string_view line, std::string_view prefix) {
  return line.substr(0, prefix.size()) == prefix;
}

// What the status file says: the innermost pid (NSpid, else Pid) and whether it is a zombie.
// Streamed line by line so a long line before NSpid (Groups of a user in many groups) costs no
// larger buffer; a line longer than the line buffer is skipped (NSpid, State and Pid are short).
struct StatusFields {
  uint64_t nspid = 0;
  uint64_t pid = 0;
  bool zombie = false;
};

int read_status(const char* path, StatusFields& out) {
  UniqueFd fd;
  if (const int error = open_file(path, O_RDONLY, FileSource::kUntrusted, fd); error != 0)
    return error;
  char chunk[512];
  char line[512];
  size_t line_length = 0;
  bool overlong = false;
  auto finish_line = [&]() {
    if (!overlong) {
      const std::string_view text(line, line_length);
      if (starts_with(text, "NSpid:")) out.nspid = last_number(text.substr(6));
      if (starts_with(text, "Pid:")) out.pid = last_number(text.substr(4));
      if (starts_with(text, "State:")) {
        const size_t state = text.find_first_not_of(" \t", 6);
        out.zombie = state != std::string_view::npos && (text[state] == 'Z' || text[state] == 'X');
      }
    }
    line_length = 0;
    overlong = false;
  };
  for (;;) {
    const ReadResult got = read_fd(fd.get(), chunk, sizeof chunk);
    if (!got.ok()) return got.error;
    for (size_t i = 0; i < got.length; ++i) {
      if (chunk[i] == '\n') {
        finish_line();
      } else if (line_length < sizeof line) {
        line[line_length++] = chunk[i];
      } else {
        overlong = true;
      }
    }
    if (got.length < sizeof chunk) break;
  }
  if (line_length > 0) finish_line();
  return 0;
}

// The number at the start of `p` (after blanks); false when there is none.
bool parse_number(const char*& p, uint64_t& value) {
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return false;
  value = 0;
  while (*p >= '0' && *p <= '9') value = value * 10 + static_cast<uint64_t>(*p++ - '0');
  return true;
}

}  // namespace

int read_process_start_time(std::string_view proc_root, int pid, uint64_t& start_time) {
  if (pid != kSelfPid && pid <= 0) return ESRCH;
  char path[512];
  if (!proc_path(path, sizeof path, proc_root, pid, "stat")) return ENAMETOOLONG;
  // The command (field 2) is at most 64 bytes; field 22 comes well within the first kilobyte.
  char stat[1024];
  const ReadResult got = read_small_file(path, stat, sizeof stat);
  if (got.error == ENOENT || got.error == ESRCH) return ESRCH;
  if (!got.ok()) return got.error;
  // The command may hold spaces and parentheses: fields are counted after its last ')'.
  const char* p = std::strrchr(stat, ')');
  if (!p) return EPROTO;
  ++p;
  while (*p == ' ') ++p;
  // A zombie (killed, not yet reaped) holds no GPU memory any more: report it as gone.
  if (*p == 'Z' || *p == 'X' || *p == 'x') return ESRCH;
  // Fields after the command: 3 (state) ... 22 (start time).
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return EPROTO;
  }
  uint64_t value = 0;
  if (!parse_number(p, value)) return EPROTO;
  start_time = value;
  return 0;
}

int read_pid_namespace(std::string_view proc_root, int pid, uint64_t& pid_namespace) {
  if (pid != kSelfPid && pid <= 0) return ESRCH;
  char path[512];
  if (!proc_path(path, sizeof path, proc_root, pid, "ns/pid")) return ENAMETOOLONG;
  char link_text[64] = {};
  const ssize_t n = ::readlink(path, link_text, sizeof link_text - 1);
  if (n < 0) return errno == ENOENT ? ESRCH : errno;
  // "pid:[4026531836]"
  const uint64_t value = last_number(std::string_view(link_text, static_cast<size_t>(n)));
  if (value == 0) return EPROTO;
  pid_namespace = value;
  return 0;
}

int read_process_identity(std::string_view proc_root, int pid, ProcessIdentity& out) {
  if (pid != kSelfPid && pid <= 0) return ESRCH;
  ProcessIdentity identity;
  if (const int error = read_pid_namespace(proc_root, pid, identity.pid_namespace); error != 0)
    return error;
  char path[512];
  if (!proc_path(path, sizeof path, proc_root, pid, "status")) return ENAMETOOLONG;
  StatusFields status;
  if (const int error = read_status(path, status); error != 0)
    return error == ENOENT ? ESRCH : error;
  if (status.zombie) return ESRCH;
  const uint64_t inner = status.nspid != 0 ? status.nspid : status.pid;
  if (inner == 0 || inner > 0x3fffff) return EPROTO;  // the owner word holds 22 bits of pid
  identity.pid = static_cast<uint32_t>(inner);
  if (const int error = read_process_start_time(proc_root, pid, identity.start_time); error != 0)
    return error;
  out = identity;
  return 0;
}

namespace {

// A new file ".<stem>.<pid>.<n>.tmp" in `dir`, created exclusively and never through a symlink
// (the folder is writable from the share's containers); its path in `temporary`. 0 or an errno.
int create_temporary(const char* dir, const char* stem, char* temporary, size_t capacity,
                     UniqueFd& fd) {
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    const int written = std::snprintf(temporary, capacity, "%s/.%s.%d.%u.tmp", dir, stem,
                                      static_cast<int>(::getpid()),
                                      g_usage_sequence.fetch_add(1, std::memory_order_relaxed));
    if (written < 0 || static_cast<size_t>(written) >= capacity) return ENAMETOOLONG;
    const int opened =
        ::open(temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kUsagePageMode);
    if (opened >= 0) {
      fd.reset(opened);
    } else if (errno != EEXIST && errno != EINTR) {
      return errno;
    }
  }
  return fd ? 0 : EEXIST;
}

}  // namespace

int prepare_usage_page(const char* dir, char* temporary, size_t capacity) {
  UniqueFd fd;
  if (const int error = create_temporary(dir, "usage", temporary, capacity, fd); error != 0)
    return error;
  int error = 0;
  // fchmod: the umask narrowed the mode open() applied.
  if (::ftruncate(fd.get(), sizeof(UsagePage)) != 0 || ::fchmod(fd.get(), kUsagePageMode) != 0) {
    error = errno;
  } else {
    void* memory =
        ::mmap(nullptr, sizeof(UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (memory == MAP_FAILED) {
      error = errno;
    } else {
      init_usage_page(*static_cast<UsagePage*>(memory));
      ::munmap(memory, sizeof(UsagePage));
      // fsync of the file (not msync of the mapping, which is gone): size, header and mode are on
      // disk before the page gets its public name.
      if (::fsync(fd.get()) != 0) error = errno;
    }
  }
  if (error != 0) ::unlink(temporary);
  return error;
}

int publish_usage_page(const char* temporary, const char* usage_path) {
  int error = 0;
  if (::link(temporary, usage_path) != 0 && errno != EEXIST) error = errno;
  ::unlink(temporary);
  return error;
}

int create_usage_page(const char* dir) {
  char usage_path[kPathCapacity];
  const int written = std::snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
  if (written < 0 || static_cast<size_t>(written) >= sizeof usage_path) return ENAMETOOLONG;
  // Anything at the name (a page, or whatever a tenant put there) is left as it is; O_PATH opens
  // without reading, and without following a symlink. (Not lstat: GLIBC_2.33, see file_io.cc.)
  if (UniqueFd existing(::open(usage_path, O_PATH | O_NOFOLLOW | O_CLOEXEC)); existing) return 0;
  char temporary[kPathCapacity];
  if (const int error = prepare_usage_page(dir, temporary, sizeof temporary); error != 0)
    return error;
  return publish_usage_page(temporary, usage_path);
}

int map_usage_page(const char* path, bool writable, UsagePage*& out) {
  out = nullptr;
  UniqueFd fd;
  if (const int error = open_file(path, writable ? O_RDWR : O_RDONLY, FileSource::kUntrusted, fd,
                                  sizeof(UsagePage));
      error != 0)
    return error;
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* memory = ::mmap(nullptr, sizeof(UsagePage), protection, MAP_SHARED, fd.get(), 0);
  if (memory == MAP_FAILED) return errno;
  auto* page = static_cast<UsagePage*>(memory);
  if (!valid_usage_page(*page)) {
    ::munmap(memory, sizeof(UsagePage));
    return EPROTO;
  }
  out = page;
  return 0;
}

void unmap_usage_page(const UsagePage* page) {
  if (page) ::munmap(const_cast<UsagePage*>(page), sizeof(UsagePage));
}

int open_or_create_usage_page(const char* dir, UsagePage*& out) {
  char usage_path[kPathCapacity];
  const int written = std::snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
  if (written < 0 || static_cast<size_t>(written) >= sizeof usage_path) return ENAMETOOLONG;
  int error = map_usage_page(usage_path, true, out);
  if (error != ENOENT) return error;
  if ((error = create_usage_page(dir)) != 0) return error;
  return map_usage_page(usage_path, true, out);
}

int open_or_create_pending_file(const char* dir, const char* uuid, UniqueFd& out) {
  out.reset();
  if (!uuid[0] || std::strchr(uuid, '/') || std::strlen(uuid) >= kUuidBytes) return EINVAL;
  char path[kPathCapacity];
  const int written = std::snprintf(path, sizeof path, "%s/%s%s", dir, kPendingFilePrefix, uuid);
  if (written < 0 || static_cast<size_t>(written) >= sizeof path) return ENAMETOOLONG;
  int error =
      open_file(path, O_RDWR | O_NONBLOCK, FileSource::kUntrusted, out, sizeof(PendingPage));
  if (error == ENOENT) {
    // Created whole under a temporary name (size, header, mode, fsync), then linked into place:
    // a reader never sees half a page; a page another process linked first wins.
    char temporary[kPathCapacity];
    UniqueFd fd;
    if ((error = create_temporary(dir, "pending", temporary, sizeof temporary, fd)) != 0)
      return error;
    const uint32_t header[2] = {kPendingMagic, kPendingVersion};
    if (::ftruncate(fd.get(), sizeof(PendingPage)) != 0 ||
        ::pwrite(fd.get(), header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
        ::fchmod(fd.get(), kUsagePageMode) != 0 || ::fsync(fd.get()) != 0) {
      error = errno;
      ::unlink(temporary);
      return error;
    }
    if ((error = publish_usage_page(temporary, path)) != 0) return error;
    error = open_file(path, O_RDWR | O_NONBLOCK, FileSource::kUntrusted, out, sizeof(PendingPage));
  }
  if (error != 0) return error;
  uint32_t header[2] = {};
  if (::pread(out.get(), header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
      header[0] != kPendingMagic || header[1] != kPendingVersion) {
    out.reset();
    return EPROTO;
  }
  return 0;
}

}  // namespace tessera::share
