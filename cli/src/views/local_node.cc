#include "views/local_node.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "tessera/file_io.h"
#include "tessera/local_shares.h"
#include "tessera/nvml.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/share_view.h"
#include "tessera/share_region.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::node::v1;

std::string base_name(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

int64_t system_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t modified_unix_ms(const struct stat& info) {
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1000000;
}

// The `owner` file: "<pid> <start time>" of the `tessera run` that created the share.
struct ShareOwner {
  int pid = 0;
  uint64_t start_time = 0;
  int64_t written_unix_ms = 0;
};

std::optional<ShareOwner> read_owner(const std::string& folder) {
  const std::string path = folder + "/" + share::kLocalShareOwnerFile;
  char text[128];
  if (!read_small_file(path.c_str(), text, sizeof text).ok()) return std::nullopt;
  ShareOwner owner;
  unsigned long long start = 0;
  if (std::sscanf(text, "%d %llu", &owner.pid, &start) != 2 || owner.pid <= 0) return std::nullopt;
  owner.start_time = start;
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) owner.written_unix_ms = modified_unix_ms(info);
  return owner;
}

bool process_alive(const std::string& proc_root, int pid, uint64_t start_time) {
  uint64_t now_start = 0;
  return share::read_process_start_time(proc_root, pid, now_start) == 0 && now_start == start_time;
}

// The owner-word bits of this process's pid namespace: slots with others belong to processes
// whose pids mean nothing here (a container's).
std::optional<uint64_t> own_namespace_hash(const std::string& proc_root) {
  uint64_t pid_namespace = 0;
  if (share::read_pid_namespace(proc_root, share::kSelfPid, pid_namespace) != 0)
    return std::nullopt;
  return share::owner_namespace_hash(share::make_owner(1, pid_namespace, 0));
}

struct ReadShare {
  v1::Share share;
  bool stale = false;  // its `tessera run` is gone
};

ReadShare read_share(const std::string& folder, const LocalNodeOptions& options,
                     std::optional<uint64_t> namespace_hash) {
  ReadShare result;
  v1::Share& out = result.share;
  out.set_name(base_name(folder));
  out.set_folder(folder);
  out.set_source("tessera-run");
  out.set_backend("quota");

  if (const std::optional<ShareOwner> owner = read_owner(folder)) {
    result.stale = !process_alive(options.proc_root, owner->pid, owner->start_time);
    out.set_prepared_unix_ms(owner->written_unix_ms);
  }
  const share_folder::ShareFolderSnapshot snapshot = share_folder::read_share_folder(folder);
  if (snapshot.limits.valid() && out.prepared_unix_ms() == 0) {
    struct stat info {};
    if (::stat(snapshot.limits.path.c_str(), &info) == 0)
      out.set_prepared_unix_ms(modified_unix_ms(info));
  }
  share_folder::ShareViewOptions view;
  view.devices_from_limits_page = true;
  view.counters = share_folder::ShareViewOptions::Counters::kFirstDevice;
  view.host_process =
      [&](const share_folder::SlotCopy& slot) -> std::optional<share_folder::HostProcess> {
    share_folder::HostProcess host;
    if (!namespace_hash || share::owner_namespace_hash(slot.owner) != *namespace_hash) return host;
    // A process of this pid namespace: its pid is a host pid here, and a slot whose process is
    // gone (killed before it cleared it) lists no process.
    const int pid = static_cast<int>(slot.pid);
    if (!process_alive(options.proc_root, pid, slot.start_time)) return std::nullopt;
    host.pid = pid;
    host.command = share_folder::process_command(options.proc_root, pid);
    return host;
  };
  share_folder::fill_share_from_folder(snapshot, view, out);
  return result;
}

// The share folders under `root` (sorted); none when it does not exist.
Result<std::vector<std::string>> list_share_folders(const std::string& root) {
  std::vector<std::string> folders;
  DIR* dir = ::opendir(root.c_str());
  if (!dir) {
    if (errno == ENOENT || errno == ENOTDIR) return folders;
    return internal_error("cannot list the share folder " + root + ": " + std::strerror(errno));
  }
  std::unique_ptr<DIR, int (*)(DIR*)> owned(dir, ::closedir);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = root + "/" + entry->d_name;
    struct stat info {};
    // Never through a symlink: only folders created here are shares.
    if (::lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) folders.push_back(path);
  }
  std::sort(folders.begin(), folders.end());
  return folders;
}

// The node's GPUs as NVML sees them, or why not.
Result<std::vector<v1::Gpu>> nvml_gpus(const std::string& library_path) {
  using nvml::EntryPoint;
  // nvmlDeviceGetUtilizationRates is optional: a GPU without it shows no utilisation.
  TESSERA_ASSIGN_OR_RETURN(
      nvml::Session opened,
      nvml::Session::open(library_path,
                          {EntryPoint::nvmlDeviceGetCount_v2,
                           EntryPoint::nvmlDeviceGetHandleByIndex_v2, EntryPoint::nvmlDeviceGetUUID,
                           EntryPoint::nvmlDeviceGetName, EntryPoint::nvmlDeviceGetMemoryInfo}));
  const nvml::Session& session = opened;
  std::vector<v1::Gpu> gpus;
  const Result<unsigned> count = session.device_count();
  // Each figure NVML cannot give is left out; a GPU without a UUID is left out.
  for (unsigned i = 0; count.is_ok() && i < *count; ++i) {
    const Result<nvmlDevice_t> device = session.device_by_index(i);
    if (!device.is_ok()) continue;
    const Result<std::string> uuid = session.uuid(*device);
    if (!uuid.is_ok()) continue;
    v1::Gpu gpu;
    gpu.set_index(i);
    gpu.set_uuid(*uuid);
    if (const Result<std::string> name = session.name(*device); name.is_ok()) gpu.set_name(*name);
    if (const Result<nvmlMemory_t> memory = session.memory(*device); memory.is_ok()) {
      gpu.set_memory_total_bytes(memory->total);
      gpu.set_memory_used_bytes(memory->used);
    }
    if (const Result<nvmlUtilization_t> rates = session.utilization(*device); rates.is_ok())
      gpu.set_utilization_percent(rates->gpu);
    gpu.set_healthy(true);
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

// The GPUs of the answer: NVML's, plus one entry for every UUID a share names that NVML did not
// list (or all of them, when NVML cannot be asked); each with the number of shares on it.
std::vector<v1::Gpu> node_gpus(const LocalNodeOptions& options,
                               const std::vector<v1::Share>& shares) {
  std::vector<v1::Gpu> gpus;
  std::string why_unknown = "not listed by NVML";
  if (options.nvml_library.empty()) {
    why_unknown = "NVML not asked";
  } else if (Result<std::vector<v1::Gpu>> listed = nvml_gpus(options.nvml_library);
             listed.is_ok()) {
    gpus = std::move(listed).value();
  } else {
    why_unknown = listed.status().message();
  }
  for (const v1::Share& share : shares) {
    std::set<std::string> counted;
    for (const v1::ShareDevice& device : share.devices()) {
      if (!counted.insert(device.gpu_uuid()).second) continue;
      auto found = std::find_if(gpus.begin(), gpus.end(), [&](const v1::Gpu& gpu) {
        return gpu.uuid() == device.gpu_uuid();
      });
      if (found == gpus.end()) {
        v1::Gpu unknown;
        unknown.set_uuid(device.gpu_uuid());
        unknown.set_index(static_cast<uint32_t>(gpus.size()));
        unknown.set_healthy(false);
        unknown.set_health_reason(why_unknown);
        gpus.push_back(std::move(unknown));
        found = gpus.end() - 1;
      }
      found->set_shares(found->shares() + 1);
    }
  }
  return gpus;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

Result<v1::ListSharesResponse> read_local_node(const LocalNodeOptions& options) {
  std::vector<std::string> folders = options.share_folders;
  const bool scanned = folders.empty();
  if (scanned) {
    const std::string root =
        options.share_root.empty() ? share::local_share_root() : options.share_root;
    TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> listed, list_share_folders(root));
    folders = std::move(listed);
  }
  const std::optional<uint64_t> namespace_hash = own_namespace_hash(options.proc_root);
  std::vector<v1::Share> shares;
  for (const std::string& folder : folders) {
    ReadShare read = read_share(folder, options, namespace_hash);
    // A scanned folder whose `tessera run` is gone is a leftover, not a share; one named
    // explicitly is always shown.
    if (scanned && read.stale && !options.include_stale) continue;
    shares.push_back(std::move(read.share));
  }

  v1::ListSharesResponse response;
  response.set_node(host_name());
  for (v1::Gpu& gpu : node_gpus(options, shares)) *response.add_gpus() = std::move(gpu);
  for (v1::Share& share : shares) *response.add_shares() = std::move(share);
  response.set_sampled_unix_ms(options.now_unix_ms ? options.now_unix_ms() : system_unix_ms());
  return response;
}

std::string share_device_key(const std::string& share, const std::string& gpu_uuid) {
  return share + "\n" + gpu_uuid;
}

std::map<std::string, DeviceRates> rates_between(const v1::ListSharesResponse& before,
                                                 const v1::ListSharesResponse& now) {
  std::map<std::string, DeviceRates> rates;
  const int64_t interval_ms = now.sampled_unix_ms() - before.sampled_unix_ms();
  if (interval_ms <= 0) return rates;
  const double interval_s = static_cast<double>(interval_ms) / 1000.0;
  std::map<std::string, const v1::ShareDevice*> earlier;
  for (const v1::Share& share : before.shares()) {
    if (!share.read_error().empty()) continue;  // its figures are unknown: no base for a rate
    for (const v1::ShareDevice& device : share.devices())
      earlier[share_device_key(share.name(), device.gpu_uuid())] = &device;
  }
  for (const v1::Share& share : now.shares()) {
    if (!share.read_error().empty()) continue;
    for (const v1::ShareDevice& device : share.devices()) {
      const std::string key = share_device_key(share.name(), device.gpu_uuid());
      const auto found = earlier.find(key);
      if (found == earlier.end()) continue;
      const double busy = std::max(0.0, device.gpu_seconds() - found->second->gpu_seconds());
      const double waited =
          std::max(0.0, device.throttled_seconds() - found->second->throttled_seconds());
      DeviceRates& rate = rates[key];
      rate.cores_used_percent = 100.0 * busy / interval_s;
      // Several threads may wait at once: the share was throttled all along at most.
      rate.throttled_percent = std::min(100.0, 100.0 * waited / interval_s);
    }
  }
  return rates;
}

void apply_rates(const v1::ListSharesResponse& before, v1::ListSharesResponse& now) {
  const std::map<std::string, DeviceRates> rates = rates_between(before, now);
  for (v1::Share& share : *now.mutable_shares()) {
    for (v1::ShareDevice& device : *share.mutable_devices()) {
      const auto found = rates.find(share_device_key(share.name(), device.gpu_uuid()));
      if (found != rates.end()) device.set_cores_used_percent(found->second.cores_used_percent);
    }
  }
}

}  // namespace tessera::cli
