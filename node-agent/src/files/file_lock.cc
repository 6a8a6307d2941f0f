#include "files/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::agent {

Result<std::optional<FileLock>> FileLock::lock(const std::string& path, bool wait) {
  for (;;) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return internal_error("cannot open lock file " + path + ": " + std::strerror(errno));
    int locked;
    do {
      locked = ::flock(fd.get(), wait ? LOCK_EX : LOCK_EX | LOCK_NB);
    } while (locked != 0 && errno == EINTR);
    if (locked != 0) {
      if (errno == EWOULDBLOCK) return std::optional<FileLock>();
      return internal_error("cannot lock " + path + ": " + std::strerror(errno));
    }
    // The holder before us may have removed the file (remove_and_release): what we lock must be
    // what the path names now, or a third caller creating it anew would hold it beside us.
    struct stat held {
    }, named{};
    if (::fstat(fd.get(), &held) != 0)
      return internal_error("cannot inspect lock file " + path + ": " + std::strerror(errno));
    if (::stat(path.c_str(), &named) == 0 && named.st_dev == held.st_dev &&
        named.st_ino == held.st_ino)
      return std::optional<FileLock>(FileLock(path, std::move(fd)));
  }
}

Result<FileLock> FileLock::acquire(const std::string& path) {
  Result<std::optional<FileLock>> locked = lock(path, /*wait=*/true);
  if (!locked.is_ok()) return locked.status();
  return std::move(**locked);
}

Result<std::optional<FileLock>> FileLock::try_acquire(const std::string& path) {
  return lock(path, /*wait=*/false);
}

void FileLock::remove_and_release() {
  if (!fd_) return;
  ::unlink(path_.c_str());  // best effort: a file left behind is only reused
  fd_.reset();
}

}  // namespace tessera::agent
