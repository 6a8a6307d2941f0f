#include "files/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

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

Status write_file_atomically(const std::string& path, const std::string& contents, unsigned mode) {
  if (const int error = tessera::write_file_atomically(path.c_str(), contents, mode); error != 0)
    return internal_error("cannot write " + path + " atomically: " + std::strerror(error));
  return Status::ok();
}

int temporary_writer(const std::string& file_name, const std::string& target_prefix) {
  // ".<target>.tmp.<pid>.<n>" (tessera/file_io.h): read from the end, the target may hold dots.
  if (file_name.size() < 2 || file_name[0] != '.' ||
      file_name.compare(1, target_prefix.size(), target_prefix) != 0)
    return 0;
  const size_t last_dot = file_name.rfind('.');
  if (last_dot == std::string::npos || last_dot == 0) return 0;
  const size_t pid_dot = file_name.rfind('.', last_dot - 1);
  if (pid_dot == std::string::npos || pid_dot < 4 ||
      file_name.compare(pid_dot - 4, 4, ".tmp") != 0 || pid_dot - 4 < 1 + target_prefix.size())
    return 0;
  auto digits = [&](size_t from, size_t to) {
    if (from >= to) return false;
    for (size_t i = from; i < to; ++i)
      if (file_name[i] < '0' || file_name[i] > '9') return false;
    return true;
  };
  if (!digits(pid_dot + 1, last_dot) || !digits(last_dot + 1, file_name.size()) ||
      last_dot - pid_dot > 10)
    return 0;
  return std::stoi(file_name.substr(pid_dot + 1, last_dot - pid_dot - 1));
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir,
                                                  const std::string& target_prefix) {
  std::vector<std::string> removed;
  const int self = static_cast<int>(::getpid());
  std::error_code ec;
  for (const auto& item : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    const int writer = temporary_writer(name, target_prefix);
    if (writer == 0 || writer == self) continue;
    // A live writer's (another agent of a rolling update, in the host's pid namespace) is in
    // flight: only a dead one's is stale.
    if (::kill(writer, 0) == 0 || errno == EPERM) continue;
    if (::unlink(item.path().c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace tessera::agent
