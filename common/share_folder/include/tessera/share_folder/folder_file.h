// Opening a file of a share folder, which the share's processes can write to: whatever sits at a
// name there may have been put there by a tenant.
#pragma once

#include <cstddef>
#include <string>

#include "tessera/status.h"
#include "tessera/unique_fd.h"

namespace tessera::share_folder {

// Opens `path` with `flags`: never through a final symlink, never blocking on a FIFO, and only a
// regular file of at least `size` bytes (tessera::open_file, FileSource::kUntrusted). The fd's
// owner, or kNotFound when it is absent (or a folder on the way is not one), kFailedPrecondition
// when it is a symlink or no regular file of `size` bytes (a FIFO, a short file), kInternal
// otherwise. Each error names the path.
Result<UniqueFd> open_folder_file(const std::string& path, int flags, size_t size);

}  // namespace tessera::share_folder
