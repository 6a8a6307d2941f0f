#include "tessera/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tessera {
namespace {

// Distinguishes temporary names of concurrent writers in one process (the pid, across processes).
std::atomic<unsigned> g_temporary_sequence{0};

// fstat(2) through syscall(2): glibc 2.33 made fstat a symbol of its own (GLIBC_2.33) where it
// was __fxstat before, and the shim must load with glibc 2.17. The kernel's struct stat is glibc's
// on the 64-bit targets built here.
int stat_fd(int fd, struct stat& info) {
  return ::syscall(SYS_fstat, fd, &info) == 0 ? 0 : errno;
}

int write_all(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

int open_file(const char* path, int flags, FileSource source, UniqueFd& out, size_t min_size) {
  out.reset();
  if (source == FileSource::kTrusted) {
    int fd = -1;
    do {
      fd = ::open(path, flags | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    out.reset(fd);
    return 0;
  }
  int fd = -1;
  do {
    fd = ::open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno;
  UniqueFd owned(fd);
  struct stat info {};
  if (const int error = stat_fd(owned.get(), info); error != 0) return error;
  if (!S_ISREG(info.st_mode)) return EINVAL;
  if (static_cast<unsigned long long>(info.st_size) < min_size) return ENODATA;
  // Reads of a regular file never block; clear the flag anyway so later calls behave as usual.
  const int status = ::fcntl(owned.get(), F_GETFL);
  if (status >= 0) ::fcntl(owned.get(), F_SETFL, status & ~O_NONBLOCK);
  out = std::move(owned);
  return 0;
}

ReadResult read_fd(int fd, char* buffer, size_t capacity) {
  ReadResult result;
  while (result.length < capacity) {
    const ssize_t n = ::read(fd, buffer + result.length, capacity - result.length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result.error = errno;
      return result;
    }
    if (n == 0) return result;
    result.length += static_cast<size_t>(n);
  }
  // Full: one more byte tells whether the file had more.
  char probe = 0;
  ssize_t n = 0;
  do {
    n = ::read(fd, &probe, 1);
  } while (n < 0 && errno == EINTR);
  result.truncated = n > 0;
  return result;
}

ReadResult read_small_file(const char* path, char* buffer, size_t capacity, FileSource source) {
  ReadResult result;
  if (capacity == 0) {
    result.error = EINVAL;
    return result;
  }
  buffer[0] = '\0';
  UniqueFd fd;
  result.error = open_file(path, O_RDONLY, source, fd);
  if (result.error != 0) return result;
  result = read_fd(fd.get(), buffer, capacity - 1);
  buffer[result.length] = '\0';
  return result;
}

int write_file_atomically(const char* path, std::string_view contents, mode_t mode) {
  const char* slash = std::strrchr(path, '/');
  const std::string_view folder =
      slash ? std::string_view(path, static_cast<size_t>(slash - path)) : std::string_view(".");
  const char* name = slash ? slash + 1 : path;
  if (*name == '\0') return EISDIR;
  char temporary[4096];
  // "/name" directly under the root: the folder is "/", which the empty view would lose.
  const std::string_view folder_text = folder.empty() ? std::string_view("/") : folder;
  int written = 0;
  UniqueFd fd;
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    written = std::snprintf(temporary, sizeof temporary, "%.*s/.%s.tmp.%d.%u",
                            static_cast<int>(folder_text.size()), folder_text.data(), name,
                            static_cast<int>(::getpid()),
                            g_temporary_sequence.fetch_add(1, std::memory_order_relaxed));
    if (written < 0 || static_cast<size_t>(written) >= sizeof temporary) return ENAMETOOLONG;
    const int opened =
        ::open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
    if (opened >= 0) {
      fd.reset(opened);
    } else if (errno != EEXIST && errno != EINTR) {
      return errno;
    }
  }
  if (!fd) return EEXIST;
  int error = write_all(fd.get(), contents.data(), contents.size());
  // The umask narrowed the mode given to open(); the file gets exactly `mode`.
  if (error == 0 && ::fchmod(fd.get(), mode & 07777) != 0) error = errno;
  if (error == 0 && ::fsync(fd.get()) != 0) error = errno;
  fd.reset();
  if (error == 0 && ::rename(temporary, path) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary);
    return error;
  }
  char folder_path[4096];
  written = std::snprintf(folder_path, sizeof folder_path, "%.*s",
                          static_cast<int>(folder_text.size()), folder_text.data());
  if (written < 0 || static_cast<size_t>(written) >= sizeof folder_path) return 0;
  UniqueFd dir(::open(folder_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // The new content is in place; a folder that cannot be synced only weakens durability.
  if (dir) ::fsync(dir.get());
  return 0;
}

}  // namespace tessera
