#include "files/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::agent {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string write_file_atomically(const std::string& path, const std::string& contents,
                                  unsigned mode) {
  const std::string temporary = path + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return "cannot create " + temporary + ": " + std::strerror(errno);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      close(fd);
      unlink(temporary.c_str());
      return "cannot write " + temporary + ": " + std::strerror(saved);
    }
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, mode) != 0 || fsync(fd) != 0) {
    const int saved = errno;
    close(fd);
    unlink(temporary.c_str());
    return "cannot sync " + temporary + ": " + std::strerror(saved);
  }
  close(fd);
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(temporary.c_str());
    return "cannot rename " + temporary + " to " + path + ": " + std::strerror(saved);
  }
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const int dir = open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return "";
}

}  // namespace tessera::agent
