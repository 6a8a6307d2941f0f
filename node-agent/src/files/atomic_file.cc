#include "files/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>

#include "tessera/file_io.h"

namespace tessera::agent {

std::optional<std::string> read_file(const std::string& path) {
  UniqueFd fd;
  if (open_file(path.c_str(), O_RDONLY, FileSource::kTrusted, fd) != 0) return std::nullopt;
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) return std::nullopt;
  // Sized from fstat, plus one byte so a file that grew meanwhile is read to its end.
  std::string text;
  size_t capacity = static_cast<size_t>(info.st_size) + 1;
  for (;;) {
    const size_t start = text.size();
    text.resize(start + capacity);
    const ReadResult got = read_fd(fd.get(), text.data() + start, capacity);
    if (!got.ok()) return std::nullopt;
    text.resize(start + got.length);
    if (got.length < capacity) return text;
    capacity = text.size();  // still more: read as much again
  }
}

std::string write_file_atomically(const std::string& path, const std::string& contents,
                                  unsigned mode) {
  if (const int error = tessera::write_file_atomically(path.c_str(), contents, mode); error != 0)
    return "cannot write " + path + " atomically: " + std::strerror(error);
  return "";
}

}  // namespace tessera::agent
