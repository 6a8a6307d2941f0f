// An exclusive flock(2) on a lock file, owned: released when the FileLock goes. Every acquire
// opens the file anew, so the lock excludes other threads of this process as well as other
// processes (flock locks belong to an open file description, not to a process). Two agents of a
// rolling update share the state folder through these (share_manager.h, "Two agents").
#pragma once

#include <optional>
#include <string>

#include "tessera/status.h"
#include "tessera/unique_fd.h"

namespace tessera::agent {

class FileLock {
 public:
  // Creates `path` (mode 0600, never through a symlink) unless it exists and waits for the lock.
  // A lock file removed by its holder (remove_and_release) while this call waited is not the
  // path's any more: the call then locks the file that the path names now. kInternal naming the
  // path when it cannot be opened or locked.
  static Result<FileLock> acquire(const std::string& path);
  // As acquire, without waiting: nullopt when another open file description holds it.
  static Result<std::optional<FileLock>> try_acquire(const std::string& path);

  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&&) noexcept = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() = default;  // closing the descriptor releases the lock

  const std::string& path() const { return path_; }
  // Unlinks the lock file while still holding it, then releases: for per-object lock files that
  // would otherwise pile up. A waiter then finds the path gone or new and locks that instead.
  void remove_and_release();

 private:
  FileLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  static Result<std::optional<FileLock>> lock(const std::string& path, bool wait);

  std::string path_;
  UniqueFd fd_;
};

}  // namespace tessera::agent
