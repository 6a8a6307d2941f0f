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
