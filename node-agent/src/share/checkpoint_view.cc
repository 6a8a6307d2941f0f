#include "share/checkpoint_view.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/unique_fd.h"

namespace tessera::agent {

Result<Checkpoint> CheckpointView::read() {
  const UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return Checkpoint{};  // nothing prepared yet
    return internal_error("cannot open " + path_ + ": " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0)
    return internal_error("cannot stat " + path_ + ": " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return internal_error(path_ + " is not a regular file");
  const Signature signature{
      static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino),
      static_cast<uint64_t>(info.st_size),
      static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec,
      static_cast<int64_t>(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec};
  std::lock_guard lock(mutex_);
  if (signature_ == signature) return cached_;
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t got =
        ::pread(fd.get(), text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return internal_error("cannot read " + path_ + ": " + std::strerror(errno));
    if (got == 0) break;  // cannot happen to a renamed-into-place file; parsed as it is
    done += static_cast<size_t>(got);
  }
  text.resize(done);
  TESSERA_ASSIGN_OR_RETURN(Checkpoint parsed, checkpoint_from_json(text), with_context(path_));
  ++parses_;
  cached_ = std::move(parsed);
  signature_ = signature;
  return cached_;
}

uint64_t CheckpointView::parses() const {
  std::lock_guard lock(mutex_);
  return parses_;
}

}  // namespace tessera::agent
