#include "watcher/share_folder_resolver.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "tessera/log.h"
#include "tessera/share_folder/snapshot.h"
#include "usage/share_processes.h"

namespace tessera::agent {

bool has_unified_cgroup_hierarchy(const std::vector<std::string>& cgroup_roots) {
  for (const std::string& root : cgroup_roots) {
    struct stat info {};
    if (stat((root + "/cgroup.controllers").c_str(), &info) == 0 && S_ISREG(info.st_mode))
      return true;
  }
  return false;
}

bool warn_if_cgroup_v1_only(const std::vector<std::string>& cgroup_roots) {
  if (has_unified_cgroup_hierarchy(cgroup_roots)) return false;
  std::string roots;
  for (const std::string& root : cgroup_roots) roots += (roots.empty() ? "" : ",") + root;
  // Exits are still reclaimed (the kernel then reports every exit on the node); only a device
  // open cannot be tied to a share without a v2 cgroup id.
  log::warn(
      "cgroup v1 host: the process watcher's device-open check needs cgroup v2 and finds nothing "
      "here; the periodic out-of-band check finds unshimmed GPU processes instead",
      {{"cgroup_roots", roots},
       {"kubernetes", "kubelet 1.35+ refuses to start on cgroup v1 unless failCgroupV1 is false"}});
  return true;
}

uint64_t process_cgroup_v2_id(const std::string& proc_root, int pid,
                              const std::vector<std::string>& cgroup_roots) {
  std::ifstream cgroups(proc_root + "/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string path = line.substr(3);
    // The root cgroup holds every process: no filter. ".." never names a cgroup.
    if (path == "/" || path.find("..") != std::string::npos) return 0;
    for (const std::string& root : cgroup_roots) {
      struct stat info {};
      if (stat((root + "/cgroup.controllers").c_str(), &info) != 0) continue;  // not v2
      if (stat((root + path).c_str(), &info) == 0 && S_ISDIR(info.st_mode)) return info.st_ino;
    }
  }
  return 0;
}

void ShareFolderResolver::refresh() {
  std::vector<WatchedShare> shares;
  std::error_code error;
  std::filesystem::directory_iterator folders(options_.shares_dir, error);
  std::map<uint64_t, int> live;
  bool live_read = false;
  for (; !error && folders != std::filesystem::directory_iterator(); folders.increment(error)) {
    if (!folders->is_directory(error)) continue;
    WatchedShare share;
    share.id = folders->path().filename().string();
    share.usage_path = folders->path().string() + "/usage";
    const std::vector<uint64_t> owners =
        share_folder::read_usage_page(share.usage_path).live_owners();
    if (!owners.empty() && !live_read) {
      live = live_process_owners(options_.proc_root);
      live_read = true;
    }
    for (const uint64_t owner : owners) {
      const auto found = live.find(owner);
      if (found == live.end()) continue;
      const uint64_t id =
          process_cgroup_v2_id(options_.proc_root, found->second, options_.cgroup_roots);
      if (id == 0) share.report_all_exits = true;
      if (id != 0 &&
          std::find(share.cgroup_ids.begin(), share.cgroup_ids.end(), id) == share.cgroup_ids.end())
        share.cgroup_ids.push_back(id);
    }
    shares.push_back(std::move(share));
  }
  MutexLock lock(mutex_);
  shares_ = std::move(shares);
}

std::vector<WatchedShare> ShareFolderResolver::shares() const {
  MutexLock lock(mutex_);
  return shares_;
}

std::optional<WatchedShare> ShareFolderResolver::share_of(int host_pid, uint64_t cgroup_id,
                                                          uint64_t watched_cgroup_id) const {
  // The kernel's id first; a process whose cgroup the event does not carry is looked up.
  const uint64_t own =
      cgroup_id != 0 ? cgroup_id
                     : process_cgroup_v2_id(options_.proc_root, host_pid, options_.cgroup_roots);
  MutexLock lock(mutex_);
  for (const WatchedShare& share : shares_) {
    for (const uint64_t id : share.cgroup_ids) {
      if (id != 0 && (id == watched_cgroup_id || id == own)) return share;
    }
  }
  return std::nullopt;
}

}  // namespace tessera::agent
