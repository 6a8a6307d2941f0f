#include "usage/share_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "tessera/file_io.h"
#include "tessera/share_contract.h"

namespace tessera::agent {

// Opens a file a tenant may have replaced: never follows a final symlink, never blocks on a FIFO,
// and only a regular file of at least `size` bytes is accepted (tessera::open_file, kUntrusted).
Result<UniqueFd> open_regular(const std::string& path, int flags, size_t size) {
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

std::optional<uint64_t> process_owner(const std::string& proc_root, int host_pid) {
  if (host_pid <= 0) return std::nullopt;
  share::ProcessIdentity identity;
  if (share::read_process_identity(proc_root, host_pid, identity) != 0) return std::nullopt;
  return identity.owner();
}

std::map<uint64_t, int> live_process_owners(const std::string& proc_root) {
  std::map<uint64_t, int> owners;
  DIR* proc = opendir(proc_root.c_str());
  if (!proc) return owners;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long host_pid = std::strtol(entry->d_name, &end, 10);
    if (!end || *end || host_pid <= 0 || host_pid > 0x7fffffff) continue;
    if (const auto owner = process_owner(proc_root, static_cast<int>(host_pid)))
      owners[*owner] = static_cast<int>(host_pid);
  }
  closedir(proc);
  return owners;
}

}  // namespace tessera::agent
