#include "tessera/share_folder/folder_file.h"

#include <errno.h>

#include <cstring>

#include "tessera/file_io.h"

namespace tessera::share_folder {

Result<UniqueFd> open_folder_file(const std::string& path, int flags, size_t size) {
  UniqueFd fd;
  const int error = open_file(path.c_str(), flags, FileSource::kUntrusted, fd, size);
  if (error == ENOENT || error == ENOTDIR)
    return not_found("cannot open " + path + ": " + std::strerror(error));
  if (error == ELOOP) return failed_precondition(path + " is a symlink");
  if (error == EINVAL || error == ENODATA)
    return failed_precondition(path + " is not a regular file of at least " + std::to_string(size) +
                               " bytes");
  if (error != 0) return internal_error("cannot open " + path + ": " + std::strerror(error));
  return fd;
}

}  // namespace tessera::share_folder
