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
#include "tessera/share_region.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::node::v1;

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a + b < a ? ~0ull : a + b;
}

double seconds_of(uint64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

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

// Reads [offset, offset + size) of `fd` into `out`; the bytes got (short at end of file).
size_t read_at(int fd, void* out, size_t size, size_t offset) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// A page file of a share folder, opened as untrusted input and read whole into `out` (a buffer of
// `size` bytes). kNotFound when absent, kFailedPrecondition when it is no regular file or shorter
// than a page (the message says how long it is).
Status read_page(const std::string& path, void* out, size_t size, const char* what) {
  UniqueFd fd;
  const int error = open_file(path.c_str(), O_RDONLY, FileSource::kUntrusted, fd);
  // What is wrong first, then the path: a line cut to the terminal's width keeps the reason.
  if (error == ENOENT) return not_found("no " + std::string(what) + ": " + path);
  if (error == EINVAL || error == ELOOP)
    return failed_precondition(std::string(what) + " is not a regular file: " + path);
  if (error != 0)
    return internal_error("cannot open the " + std::string(what) + " (" + std::strerror(error) +
                          "): " + path);
  const size_t got = read_at(fd.get(), out, size, 0);
  if (got < size) {
    return failed_precondition(std::string(what) + " is truncated (" + std::to_string(got) +
                               " of " + std::to_string(size) + " bytes): " + path);
  }
  return Status::ok();
}

std::string priority_name(uint32_t priority) {
  switch (priority) {
    case share::kPriorityHigh:
      return "high";
    case share::kPriorityLow:
      return "low";
    default:
      return "normal";
  }
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

std::string process_command(const std::string& proc_root, int pid) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/comm";
  char text[64];
  if (!read_small_file(path.c_str(), text, sizeof text).ok()) return "";
  std::string command = text;
  while (!command.empty() && (command.back() == '\n' || command.back() == '\r')) command.pop_back();
  return command;
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

// The usage page's figures added to `share` (whose devices come from the limits page). Fails
// before it sets any figure: a page that cannot be read whole adds nothing.
Status add_usage(const std::string& folder, const share::LimitsPage& limits,
                 const LocalNodeOptions& options, std::optional<uint64_t> namespace_hash,
                 v1::Share& out) {
  auto usage = std::make_unique<share::UsagePage>();
  const std::string path = folder + "/usage";
  if (Status read = read_page(path, usage.get(), sizeof(share::UsagePage), "usage page");
      !read.is_ok()) {
    // Absent until the share's first CUDA process creates it: nothing used yet.
    return read.code() == StatusCode::kNotFound ? Status::ok() : read;
  }
  if (!share::valid_usage_page(*usage))
    return failed_precondition("usage page is not valid (magic, version or size): " + path);
  const uint32_t devices = static_cast<uint32_t>(out.devices_size());
  uint32_t high = usage->slot_high_water.load(std::memory_order_relaxed);
  if (high > share::kMaxSlots) high = share::kMaxSlots;

  std::vector<uint64_t> memory(devices, 0);
  uint64_t launches = 0, throttled_ns = 0, denied = 0;
  for (uint32_t i = 0; i < high; ++i) {
    const share::ProcessSlot& slot = usage->slots[i];
    // As share::share_usage: every slot below the high-water mark counts (a free slot holds 0).
    // Counters stay in a slot after its process is gone, so the sums only grow (until a slot is
    // claimed again), which is what rates between two samples need.
    for (uint32_t d = 0; d < devices; ++d)
      memory[d] = saturating_add(memory[d], slot.bytes[d].load(std::memory_order_relaxed));
    launches = saturating_add(launches, slot.launches.load(std::memory_order_relaxed));
    throttled_ns = saturating_add(throttled_ns, slot.throttled_ns.load(std::memory_order_relaxed));
    denied = saturating_add(denied, slot.allocations_denied.load(std::memory_order_relaxed));

    const uint64_t owner = slot.owner.load(std::memory_order_relaxed);
    if (owner == 0 || (owner & share::kOwnerReclaiming) != 0) continue;
    v1::Process process;
    const uint32_t pid = slot.pid.load(std::memory_order_relaxed);
    process.set_pid(static_cast<int32_t>(pid));
    if (namespace_hash && share::owner_namespace_hash(owner) == *namespace_hash) {
      // A process of this pid namespace: its pid is a host pid here, and a slot whose process
      // is gone (killed before it cleared it) lists no process.
      if (!process_alive(options.proc_root, static_cast<int>(pid),
                         slot.start_time.load(std::memory_order_relaxed)))
        continue;
      process.set_host_pid(static_cast<int32_t>(pid));
      process.set_command(process_command(options.proc_root, static_cast<int>(pid)));
    }
    for (uint32_t d = 0; d < devices; ++d)
      process.add_memory_bytes(slot.bytes[d].load(std::memory_order_relaxed));
    process.set_launches(slot.launches.load(std::memory_order_relaxed));
    process.set_gpu_seconds(seconds_of(slot.gpu_busy_ns.load(std::memory_order_relaxed)));
    *out.add_processes() = std::move(process);
  }

  const bool agent_measures =
      limits.measure_source.load(std::memory_order_relaxed) == share::kMeasureAgent;
  for (uint32_t d = 0; d < devices; ++d) {
    v1::ShareDevice& device = *out.mutable_devices(static_cast<int>(d));
    device.set_memory_used_bytes(memory[d]);
    const uint64_t busy = agent_measures
                              ? limits.measured[d].share_busy_ns.load(std::memory_order_relaxed)
                              : usage->compute.devices[d].busy_ns.load(std::memory_order_relaxed);
    device.set_gpu_seconds(seconds_of(busy));
  }
  // The page counts launches, gate waits and refusals per process, not per device: they are the
  // share's, reported on its first device (so sums over devices stay right).
  if (devices > 0) {
    v1::ShareDevice& first = *out.mutable_devices(0);
    first.set_launches(launches);
    first.set_throttled_seconds(seconds_of(throttled_ns));
    first.set_allocations_denied(denied);
  }
  return Status::ok();
}

ReadShare read_share(const std::string& folder, const LocalNodeOptions& options,
                     std::optional<uint64_t> namespace_hash) {
  ReadShare result;
  v1::Share& out = result.share;
  out.set_name(base_name(folder));
  out.set_folder(folder);
  out.set_source("tessera-run");
  out.set_backend("quota");
  auto report = [&](const Status& status) { out.set_read_error(status.message()); };

  if (const std::optional<ShareOwner> owner = read_owner(folder)) {
    result.stale = !process_alive(options.proc_root, owner->pid, owner->start_time);
    out.set_prepared_unix_ms(owner->written_unix_ms);
  }

  auto limits = std::make_unique<share::LimitsPage>();
  const std::string limits_path = folder + "/limits";
  if (Status read = read_page(limits_path, limits.get(), sizeof(share::LimitsPage), "limits page");
      !read.is_ok()) {
    report(read);
    return result;
  }
  if (!share::valid_limits_page(*limits)) {
    report(failed_precondition("limits page is not valid (magic, version, size or devices): " +
                               limits_path));
    return result;
  }
  if (out.prepared_unix_ms() == 0) {
    struct stat info {};
    if (::stat(limits_path.c_str(), &info) == 0) out.set_prepared_unix_ms(modified_unix_ms(info));
  }
  out.set_priority(priority_name(limits->priority.load(std::memory_order_relaxed)));
  const uint32_t devices = limits->device_count.load(std::memory_order_relaxed);
  for (uint32_t d = 0; d < devices; ++d) {
    const share::DeviceLimits& entry = limits->devices[d];
    v1::ShareDevice& device = *out.add_devices();
    device.set_gpu_uuid(std::string(entry.uuid, strnlen(entry.uuid, share::kUuidBytes)));
    const uint64_t memory_limit = entry.memory_limit.load(std::memory_order_relaxed);
    device.set_memory_unlimited(memory_limit == share::kUnlimited);
    if (memory_limit != share::kUnlimited) device.set_memory_limit_bytes(memory_limit);
    device.set_cores_limit_percent(entry.cores_limit.load(std::memory_order_relaxed));
    device.set_cores_burst_percent(entry.cores_burst.load(std::memory_order_relaxed));
    device.set_context_overhead_bytes(
        limits->measured[d].context_overhead.load(std::memory_order_relaxed));
  }
  if (Status usage = add_usage(folder, *limits, options, namespace_hash, out); !usage.is_ok())
    report(usage);
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
  Result<nvml::Session> opened = nvml::Session::open(
      library_path, {EntryPoint::nvmlDeviceGetCount_v2, EntryPoint::nvmlDeviceGetHandleByIndex_v2,
                     EntryPoint::nvmlDeviceGetUUID, EntryPoint::nvmlDeviceGetName,
                     EntryPoint::nvmlDeviceGetMemoryInfo});
  if (!opened.is_ok()) return opened.status();
  const nvml::Session& session = *opened;
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
    Result<std::vector<std::string>> listed = list_share_folders(root);
    if (!listed.is_ok()) return listed.status();
    folders = std::move(listed).value();
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
