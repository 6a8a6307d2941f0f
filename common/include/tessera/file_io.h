// Small-file reads and atomic file replacement, one implementation for the shim, the node agent
// and the CLI. Errors are errno values (0 = success): no exceptions and no std::string, because
// the shim links this statically and must not need libstdc++ at run time. The agent wraps these
// into tessera::Status where it wants messages.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string_view>

#include "tessera/unique_fd.h"

namespace tessera {

// Who can write the file, and so how it is opened.
enum class FileSource {
  // The caller's own files (the agent's state folder): opened as they are.
  kTrusted,
  // A file a tenant may have replaced (a share folder, an MPS pipe folder, /proc of another
  // process): never through a final symlink (ELOOP), never waiting on a FIFO or device (O_NONBLOCK;
  // anything but a regular file is refused with EINVAL).
  kUntrusted,
};

// Opens `path` with `flags` (O_RDONLY, O_RDWR, ...; O_CLOEXEC is always added) as `source`
// requires. kUntrusted also refuses a file shorter than `min_size` bytes (ENODATA), so a mapping of
// that size cannot fault. Returns 0 or an errno value (ENOENT: the file is absent).
int open_file(const char* path, int flags, FileSource source, UniqueFd& out, size_t min_size = 0);

struct ReadResult {
  size_t length = 0;       // bytes placed in the buffer
  int error = 0;           // 0, or the errno of the open or read that failed
  bool truncated = false;  // the file holds more than the buffer did
  bool ok() const { return error == 0; }
};

// Reads from `fd` (its current offset) until end of file or `capacity` bytes; retries on EINTR.
ReadResult read_fd(int fd, char* buffer, size_t capacity);

// Reads the whole of a small file (/proc files, pid files) into `buffer`, NUL-terminated: at most
// capacity - 1 bytes; `truncated` when there was more. `capacity` must be at least 1.
ReadResult read_small_file(const char* path, char* buffer, size_t capacity,
                           FileSource source = FileSource::kUntrusted);

// Replaces `path` with `contents` so that a reader, or the same path after a crash or power loss,
// sees the old file or the new one, never a mix: a new file under a temporary name in the same
// folder (".<name>.tmp.<pid>.<n>", created exclusively and never through a symlink), written,
// given `mode`, fsync'ed, renamed over `path`, then the folder fsync'ed so the rename is durable.
// On any failure the temporary file is removed and `path` keeps its old content. Returns 0 or an
// errno value.
int write_file_atomically(const char* path, std::string_view contents, mode_t mode = 0644);

}  // namespace tessera
