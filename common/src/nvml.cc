#include "tessera/nvml.h"

#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace tessera::nvml {

// One slot per entry point, null where the library lacks it. Named as the functions, typed by
// their declarations in nvml_abi.h: a wrong signature is a compile error, never a bad call.
struct EntryPoints {
#define TESSERA_NVML_SLOT(name) decltype(&::name) name = nullptr;
  TESSERA_NVML_ENTRY_POINTS(TESSERA_NVML_SLOT)
#undef TESSERA_NVML_SLOT

  bool has(EntryPoint entry) const {
    switch (entry) {
#define TESSERA_NVML_HAS(name) \
  case EntryPoint::name:       \
    return name != nullptr;
      TESSERA_NVML_ENTRY_POINTS(TESSERA_NVML_HAS)
#undef TESSERA_NVML_HAS
    }
    return false;
  }
};

namespace {

// A process list longer than this is a driver's error, not a list to grow a buffer for.
constexpr unsigned kMaxListLength = 65536;
constexpr unsigned kInitialListLength = 64;
constexpr int kListTries = 4;

// The libraries loaded so far, by path. Leaked on purpose: never unloaded, and still there for
// sessions that static destructors end.
struct Registry {
  std::mutex mutex;
  std::map<std::string, const Library*> loaded;
};

Registry& registry() {
  static Registry* const instance = new Registry;
  return *instance;
}

EntryPoints* resolve_all(void* handle) {
  auto* table = new EntryPoints;
#define TESSERA_NVML_RESOLVE(name) \
  table->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));
  TESSERA_NVML_ENTRY_POINTS(TESSERA_NVML_RESOLVE)
#undef TESSERA_NVML_RESOLVE
  return table;
}

Status missing(const Library& library, EntryPoint entry) {
  return failed_precondition(library.path() + " has no " + symbol_name(entry));
}

// The Status of an NVML call that did not succeed: "<call>: <NVML's error string>".
Status failed(const Library& library, const char* call, nvmlReturn_t result) {
  const char* why = library.entry_points().nvmlErrorString(result);
  std::string message = std::string(call) + ": " + (why ? why : "error " + std::to_string(result));
  // This driver or GPU cannot do it (FUNCTION_NOT_FOUND: the library is too old for the call).
  if (result == NVML_ERROR_NOT_SUPPORTED || result == NVML_ERROR_FUNCTION_NOT_FOUND)
    return failed_precondition(std::move(message));
  return unavailable(std::move(message));
}

// The Status of a MIG call that did not succeed: as `failed`, with the codes a MIG caller acts on
// (nvml.h, Session's MIG calls).
Status mig_failed(const Library& library, const char* call, nvmlReturn_t result) {
  Status status = failed(library, call, result);
  switch (result) {
    case NVML_ERROR_INVALID_ARGUMENT:
      return invalid_argument(status.message());
    case NVML_ERROR_NOT_FOUND:
      return not_found(status.message());
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return already_exists(status.message());
    default:
      return status;
  }
}

using Failure = Status (*)(const Library&, const char*, nvmlReturn_t);

// Calls an entry point (`slot`, its member of EntryPoints) when the library has it: ok, or why not.
template <typename Function, typename... Args>
Status call_as(Failure failure, const Library& library, EntryPoint entry,
               Function EntryPoints::*slot, Args... args) {
  const Function function = library.entry_points().*slot;
  if (function == nullptr) return missing(library, entry);
  if (const nvmlReturn_t result = function(args...); result != NVML_SUCCESS)
    return failure(library, symbol_name(entry), result);
  return Status::ok();
}

template <typename Function, typename... Args>
Status call(const Library& library, EntryPoint entry, Function EntryPoints::*slot, Args... args) {
  return call_as(&failed, library, entry, slot, args...);
}

template <typename Function, typename... Args>
Status mig_call(const Library& library, EntryPoint entry, Function EntryPoints::*slot,
                Args... args) {
  return call_as(&mig_failed, library, entry, slot, args...);
}

// An entry point whose last parameter is where NVML writes its answer.
template <typename Value, typename Function, typename... Args>
Result<Value> answer(const Library& library, EntryPoint entry, Function EntryPoints::*slot,
                     Args... args) {
  Value value{};
  TESSERA_RETURN_IF_ERROR(call(library, entry, slot, args..., &value));
  return value;
}

template <typename Value, typename Function, typename... Args>
Result<Value> mig_answer(const Library& library, EntryPoint entry, Function EntryPoints::*slot,
                         Args... args) {
  Value value{};
  TESSERA_RETURN_IF_ERROR(mig_call(library, entry, slot, args..., &value));
  return value;
}

// NVML's instance lists write only the count: the buffer must hold every instance the profile
// allows. No GPU has more than 15 GPU instances (IDs 0..14) or 8 compute instances per GPU
// instance (IDs 0..7), so this many always suffices.
constexpr unsigned kMaxInstances = 64;

template <typename Handle, typename Call>
Result<std::vector<Handle>> instance_list(const Library& library, EntryPoint entry, Call call) {
  if (!library.has(entry)) return missing(library, entry);
  std::vector<Handle> handles(kMaxInstances);
  unsigned count = kMaxInstances;  // go-nvml passes the buffer's size; NVML only writes it
  if (const nvmlReturn_t result = call(handles.data(), &count); result != NVML_SUCCESS)
    return mig_failed(library, symbol_name(entry), result);
  handles.resize(std::min(count, kMaxInstances));
  return handles;
}

// An entry point that writes a string of at most kSize bytes (NUL included) into its last two
// parameters (buffer, length).
template <unsigned kSize, typename Function, typename... Args>
Result<std::string> text(const Library& library, EntryPoint entry, Function EntryPoints::*slot,
                         Args... args) {
  char buffer[kSize] = {};
  TESSERA_RETURN_IF_ERROR(call(library, entry, slot, args..., buffer, kSize));
  return std::string(buffer, strnlen(buffer, kSize));
}

// The first three arguments of call/answer/text for a Session's entry point `entry`.
#define TESSERA_NVML(entry) *library_, EntryPoint::entry, &EntryPoints::entry

// The NVML protocol for lists: `count` is the buffer's capacity on the way in and the list's length
// on the way out; a buffer too small gets NVML_ERROR_INSUFFICIENT_SIZE with the length it needs.
// `call(count, data)` is tried with a buffer grown to that length (and some, for a list still
// growing), a few times. With `none_if_not_found`, NVML_ERROR_NOT_FOUND is an empty list.
template <typename Item, typename Call>
Result<std::vector<Item>> grown_list(const Library& library, EntryPoint entry,
                                     bool none_if_not_found, Call call) {
  const char* name = symbol_name(entry);
  if (!library.has(entry)) return missing(library, entry);
  std::vector<Item> items(kInitialListLength);
  for (int attempt = 0; attempt < kListTries; ++attempt) {
    unsigned count = static_cast<unsigned>(items.size());
    const nvmlReturn_t result = call(&count, items.data());
    if (result == NVML_ERROR_INSUFFICIENT_SIZE && count > items.size() && count < kMaxListLength) {
      items.resize(count + count / 2 + 1);
      continue;
    }
    if (result == NVML_ERROR_NOT_FOUND && none_if_not_found) return std::vector<Item>{};
    if (result != NVML_SUCCESS) return failed(library, name, result);
    if (count < items.size()) items.resize(count);
    return items;
  }
  return unavailable(std::string(name) + ": the list kept growing");
}

}  // namespace

const char* symbol_name(EntryPoint entry) {
  switch (entry) {
#define TESSERA_NVML_NAME(name) \
  case EntryPoint::name:        \
    return #name;
    TESSERA_NVML_ENTRY_POINTS(TESSERA_NVML_NAME)
#undef TESSERA_NVML_NAME
  }
  return "an unknown NVML entry point";
}

unsigned long long wall_clock_us() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<unsigned long long>(now.tv_sec) * 1000000ull +
         static_cast<unsigned long long>(now.tv_nsec) / 1000ull;
}

// ---- Library ------------------------------------------------------------------------------------

Result<const Library*> Library::load(const std::string& path) {
  Registry& loaded = registry();
  std::lock_guard lock(loaded.mutex);
  if (const auto found = loaded.loaded.find(path); found != loaded.loaded.end())
    return found->second;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return unavailable("cannot load " + path +
                       " (is the NVIDIA driver installed?): " + (why ? why : "unknown error"));
  }
  const Library* library = new Library(path, resolve_all(handle));
  loaded.loaded.emplace(path, library);
  return library;
}

bool Library::has(EntryPoint entry) const {
  return entry_points_->has(entry);
}

Status Library::require(std::initializer_list<EntryPoint> entries) const {
  for (const EntryPoint entry : entries)
    if (!has(entry)) return missing(*this, entry);
  return Status::ok();
}

// ---- EventSet -----------------------------------------------------------------------------------

EventSet::EventSet(EventSet&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)), set_(std::exchange(other.set_, nullptr)) {}

EventSet& EventSet::operator=(EventSet&& other) noexcept {
  if (this != &other) {
    reset();
    library_ = std::exchange(other.library_, nullptr);
    set_ = std::exchange(other.set_, nullptr);
  }
  return *this;
}

void EventSet::reset() {
  if (set_ != nullptr && library_ != nullptr && library_->entry_points().nvmlEventSetFree)
    library_->entry_points().nvmlEventSetFree(set_);
  set_ = nullptr;
}

// ---- Session ------------------------------------------------------------------------------------

Result<Session> Session::open(const std::string& path, std::initializer_list<EntryPoint> required) {
  TESSERA_ASSIGN_OR_RETURN(const Library* loaded, Library::load(path));
  const Library& library = *loaded;
  TESSERA_RETURN_IF_ERROR(library.require(
      {EntryPoint::nvmlInit_v2, EntryPoint::nvmlShutdown, EntryPoint::nvmlErrorString}));
  TESSERA_RETURN_IF_ERROR(library.require(required));
  if (const nvmlReturn_t result = library.entry_points().nvmlInit_v2(); result != NVML_SUCCESS) {
    // "Not Supported" from nvmlInit_v2 still means NVML did not start: asking again may help.
    return unavailable(failed(library, "nvmlInit_v2", result).message());
  }
  return Session(&library);
}

Session::Session(Session&& other) noexcept : library_(std::exchange(other.library_, nullptr)) {}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    if (library_ != nullptr) library_->entry_points().nvmlShutdown();
    library_ = std::exchange(other.library_, nullptr);
  }
  return *this;
}

Session::~Session() {
  if (library_ != nullptr) library_->entry_points().nvmlShutdown();
}

Result<std::string> Session::driver_version() const {
  return text<NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE>(TESSERA_NVML(nvmlSystemGetDriverVersion));
}

Result<unsigned> Session::device_count() const {
  return answer<unsigned>(TESSERA_NVML(nvmlDeviceGetCount_v2));
}

Result<nvmlDevice_t> Session::device_by_index(unsigned index) const {
  return answer<nvmlDevice_t>(TESSERA_NVML(nvmlDeviceGetHandleByIndex_v2), index);
}

Result<nvmlDevice_t> Session::device_by_uuid(const std::string& uuid) const {
  return answer<nvmlDevice_t>(TESSERA_NVML(nvmlDeviceGetHandleByUUID), uuid.c_str());
}

Result<std::string> Session::uuid(nvmlDevice_t device) const {
  return text<NVML_DEVICE_UUID_V2_BUFFER_SIZE>(TESSERA_NVML(nvmlDeviceGetUUID), device);
}

Result<std::string> Session::name(nvmlDevice_t device) const {
  return text<NVML_DEVICE_NAME_V2_BUFFER_SIZE>(TESSERA_NVML(nvmlDeviceGetName), device);
}

Result<unsigned> Session::minor_number(nvmlDevice_t device) const {
  return answer<unsigned>(TESSERA_NVML(nvmlDeviceGetMinorNumber), device);
}

Result<nvmlPciInfo_t> Session::pci_info(nvmlDevice_t device) const {
  return answer<nvmlPciInfo_t>(TESSERA_NVML(nvmlDeviceGetPciInfo_v3), device);
}

Result<nvmlBrandType_t> Session::brand(nvmlDevice_t device) const {
  return answer<nvmlBrandType_t>(TESSERA_NVML(nvmlDeviceGetBrand), device);
}

Result<nvmlComputeMode_t> Session::compute_mode(nvmlDevice_t device) const {
  return answer<nvmlComputeMode_t>(TESSERA_NVML(nvmlDeviceGetComputeMode), device);
}

Result<nvmlDeviceArchitecture_t> Session::architecture(nvmlDevice_t device) const {
  return answer<nvmlDeviceArchitecture_t>(TESSERA_NVML(nvmlDeviceGetArchitecture), device);
}

Result<ComputeCapability> Session::compute_capability(nvmlDevice_t device) const {
  ComputeCapability capability;
  TESSERA_RETURN_IF_ERROR(call(TESSERA_NVML(nvmlDeviceGetCudaComputeCapability), device,
                               &capability.major, &capability.minor));
  return capability;
}

Result<nvmlMemory_t> Session::memory(nvmlDevice_t device) const {
  return answer<nvmlMemory_t>(TESSERA_NVML(nvmlDeviceGetMemoryInfo), device);
}

Result<nvmlUtilization_t> Session::utilization(nvmlDevice_t device) const {
  return answer<nvmlUtilization_t>(TESSERA_NVML(nvmlDeviceGetUtilizationRates), device);
}

Result<std::vector<nvmlProcessInfo_t>> Session::compute_processes(nvmlDevice_t device) const {
  const EntryPoints& table = library_->entry_points();
  return grown_list<nvmlProcessInfo_t>(
      *library_, EntryPoint::nvmlDeviceGetComputeRunningProcesses_v3, false,
      [&](unsigned* count, nvmlProcessInfo_t* infos) {
        return table.nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
      });
}

Result<std::vector<nvmlProcessUtilizationSample_t>> Session::process_utilization(
    nvmlDevice_t device, unsigned long long since_us) const {
  const EntryPoints& table = library_->entry_points();
  return grown_list<nvmlProcessUtilizationSample_t>(
      // NVML_ERROR_NOT_FOUND: no samples newer than the timestamp (nobody ran).
      *library_, EntryPoint::nvmlDeviceGetProcessUtilization, true,
      [&](unsigned* count, nvmlProcessUtilizationSample_t* samples) {
        return table.nvmlDeviceGetProcessUtilization(device, samples, count, since_us);
      });
}

Status Session::set_memory_limits(nvmlDevice_t device, const std::string& cgroup_directory,
                                  unsigned long long soft_limit,
                                  unsigned long long hard_limit) const {
  nvmlSetMemoryLimits_v1_t limits{};
  limits.nameSpace = cgroup_directory.c_str();
  limits.softLimit = soft_limit;
  limits.hardLimit = hard_limit;
  return call(TESSERA_NVML(nvmlDeviceSetMemoryLimits_v1), device, &limits);
}

Status Session::clear_memory_limits(nvmlDevice_t device,
                                    const std::string& cgroup_directory) const {
  return set_memory_limits(device, cgroup_directory, kClearSoftLimit, kClearHardLimit);
}

Result<MemoryLimits> Session::memory_limits(nvmlDevice_t device,
                                            const std::string& cgroup_directory) const {
  const auto get = library_->entry_points().nvmlDeviceGetMemoryLimits_v1;
  if (get == nullptr) return missing(*library_, EntryPoint::nvmlDeviceGetMemoryLimits_v1);
  nvmlGetMemoryLimits_v1_t limits{};
  limits.nameSpace = cgroup_directory.c_str();
  const nvmlReturn_t result = get(device, &limits);
  // No limit of the cgroup's own: a state of the cgroup, not of the driver.
  if (result == NVML_ERROR_NOT_FOUND)
    return not_found(failed(*library_, "nvmlDeviceGetMemoryLimits_v1", result).message());
  if (result != NVML_SUCCESS) return failed(*library_, "nvmlDeviceGetMemoryLimits_v1", result);
  return MemoryLimits{limits.softLimit, limits.hardLimit, limits.currentUsed};
}

// ---- MIG ----------------------------------------------------------------------------------------

Result<MigMode> Session::mig_mode(nvmlDevice_t device) const {
  MigMode mode;
  TESSERA_RETURN_IF_ERROR(
      mig_call(TESSERA_NVML(nvmlDeviceGetMigMode), device, &mode.current, &mode.pending));
  return mode;
}

Status Session::set_mig_mode(nvmlDevice_t device, unsigned mode) const {
  nvmlReturn_t activation = NVML_SUCCESS;
  TESSERA_RETURN_IF_ERROR(mig_call(TESSERA_NVML(nvmlDeviceSetMigMode), device, mode, &activation));
  if (activation != NVML_SUCCESS)
    return mig_failed(*library_, "nvmlDeviceSetMigMode (activation)", activation);
  return Status::ok();
}

Result<nvmlGpuInstanceProfileInfo_v3_t> Session::gpu_instance_profile_info(
    nvmlDevice_t device, unsigned profile_index) const {
  const auto get = library_->entry_points().nvmlDeviceGetGpuInstanceProfileInfoV;
  if (get == nullptr) return missing(*library_, EntryPoint::nvmlDeviceGetGpuInstanceProfileInfoV);
  nvmlGpuInstanceProfileInfo_v3_t info{};
  info.version = nvmlGpuInstanceProfileInfo_v3;
  // NVML passes both layouts through the v2 pointer type, told apart by `version`.
  nvmlReturn_t result =
      get(device, profile_index, reinterpret_cast<nvmlGpuInstanceProfileInfo_v2_t*>(&info));
  if (result == NVML_SUCCESS) return info;
  // A driver older than v3 refuses the version (INVALID_ARGUMENT, which also ends an enumeration,
  // or ARGUMENT_VERSION_MISMATCH): ask again in v2, and keep v3's answer when v2 fails the same.
  if (result != NVML_ERROR_INVALID_ARGUMENT && result != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return mig_failed(*library_, "nvmlDeviceGetGpuInstanceProfileInfoV", result);
  nvmlGpuInstanceProfileInfo_v2_t old{};
  old.version = nvmlGpuInstanceProfileInfo_v2;
  if (get(device, profile_index, &old) != NVML_SUCCESS)
    return mig_failed(*library_, "nvmlDeviceGetGpuInstanceProfileInfoV", result);
  info = {};
  info.version = nvmlGpuInstanceProfileInfo_v3;
  info.id = old.id;
  info.sliceCount = old.sliceCount;
  info.instanceCount = old.instanceCount;
  info.multiprocessorCount = old.multiprocessorCount;
  info.copyEngineCount = old.copyEngineCount;
  info.decoderCount = old.decoderCount;
  info.encoderCount = old.encoderCount;
  info.jpegCount = old.jpegCount;
  info.ofaCount = old.ofaCount;
  info.memorySizeMB = old.memorySizeMB;
  std::memcpy(info.name, old.name, sizeof info.name);
  info.capabilities = old.isP2pSupported != 0 ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0;
  return info;
}

Result<std::vector<nvmlGpuInstancePlacement_t>> Session::gpu_instance_possible_placements(
    nvmlDevice_t device, unsigned profile_id) const {
  const auto get = library_->entry_points().nvmlDeviceGetGpuInstancePossiblePlacements_v2;
  if (get == nullptr)
    return missing(*library_, EntryPoint::nvmlDeviceGetGpuInstancePossiblePlacements_v2);
  constexpr const char* kCall = "nvmlDeviceGetGpuInstancePossiblePlacements_v2";
  unsigned count = 0;
  if (const nvmlReturn_t result = get(device, profile_id, nullptr, &count); result != NVML_SUCCESS)
    return mig_failed(*library_, kCall, result);
  std::vector<nvmlGpuInstancePlacement_t> placements(count);
  if (count == 0) return placements;
  if (const nvmlReturn_t result = get(device, profile_id, placements.data(), &count);
      result != NVML_SUCCESS)
    return mig_failed(*library_, kCall, result);
  placements.resize(std::min<size_t>(count, placements.size()));
  return placements;
}

Result<nvmlGpuInstance_t> Session::create_gpu_instance_with_placement(
    nvmlDevice_t device, unsigned profile_id, const nvmlGpuInstancePlacement_t& placement) const {
  return mig_answer<nvmlGpuInstance_t>(TESSERA_NVML(nvmlDeviceCreateGpuInstanceWithPlacement),
                                       device, profile_id, &placement);
}

Result<nvmlGpuInstance_t> Session::create_gpu_instance(nvmlDevice_t device,
                                                       unsigned profile_id) const {
  return mig_answer<nvmlGpuInstance_t>(TESSERA_NVML(nvmlDeviceCreateGpuInstance), device,
                                       profile_id);
}

Result<std::vector<nvmlGpuInstance_t>> Session::gpu_instances(nvmlDevice_t device,
                                                              unsigned profile_id) const {
  const EntryPoints& table = library_->entry_points();
  return instance_list<nvmlGpuInstance_t>(*library_, EntryPoint::nvmlDeviceGetGpuInstances,
                                          [&](nvmlGpuInstance_t* handles, unsigned* count) {
                                            return table.nvmlDeviceGetGpuInstances(
                                                device, profile_id, handles, count);
                                          });
}

Result<nvmlGpuInstance_t> Session::gpu_instance_by_id(nvmlDevice_t device,
                                                      unsigned gpu_instance_id) const {
  return mig_answer<nvmlGpuInstance_t>(TESSERA_NVML(nvmlDeviceGetGpuInstanceById), device,
                                       gpu_instance_id);
}

Result<nvmlGpuInstanceInfo_t> Session::gpu_instance_info(nvmlGpuInstance_t instance) const {
  return mig_answer<nvmlGpuInstanceInfo_t>(TESSERA_NVML(nvmlGpuInstanceGetInfo), instance);
}

Status Session::destroy_gpu_instance(nvmlGpuInstance_t instance) const {
  return mig_call(TESSERA_NVML(nvmlGpuInstanceDestroy), instance);
}

Result<nvmlComputeInstanceProfileInfo_v3_t> Session::compute_instance_profile_info(
    nvmlGpuInstance_t instance, unsigned profile_index, unsigned engine_profile) const {
  const auto get = library_->entry_points().nvmlGpuInstanceGetComputeInstanceProfileInfoV;
  if (get == nullptr)
    return missing(*library_, EntryPoint::nvmlGpuInstanceGetComputeInstanceProfileInfoV);
  constexpr const char* kCall = "nvmlGpuInstanceGetComputeInstanceProfileInfoV";
  nvmlComputeInstanceProfileInfo_v3_t info{};
  info.version = nvmlComputeInstanceProfileInfo_v3;
  nvmlReturn_t result = get(instance, profile_index, engine_profile,
                            reinterpret_cast<nvmlComputeInstanceProfileInfo_v2_t*>(&info));
  if (result == NVML_SUCCESS) return info;
  if (result != NVML_ERROR_INVALID_ARGUMENT && result != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return mig_failed(*library_, kCall, result);
  // v3 appends `capabilities` to v2: the v2 answer is a prefix of it.
  info = {};
  info.version = nvmlComputeInstanceProfileInfo_v2;
  if (get(instance, profile_index, engine_profile,
          reinterpret_cast<nvmlComputeInstanceProfileInfo_v2_t*>(&info)) != NVML_SUCCESS)
    return mig_failed(*library_, kCall, result);
  info.version = nvmlComputeInstanceProfileInfo_v3;
  info.capabilities = 0;
  return info;
}

Result<nvmlComputeInstance_t> Session::create_compute_instance(nvmlGpuInstance_t instance,
                                                               unsigned profile_id) const {
  return mig_answer<nvmlComputeInstance_t>(TESSERA_NVML(nvmlGpuInstanceCreateComputeInstance),
                                           instance, profile_id);
}

Result<std::vector<nvmlComputeInstance_t>> Session::compute_instances(nvmlGpuInstance_t instance,
                                                                      unsigned profile_id) const {
  const EntryPoints& table = library_->entry_points();
  return instance_list<nvmlComputeInstance_t>(
      *library_, EntryPoint::nvmlGpuInstanceGetComputeInstances,
      [&](nvmlComputeInstance_t* handles, unsigned* count) {
        return table.nvmlGpuInstanceGetComputeInstances(instance, profile_id, handles, count);
      });
}

Result<nvmlComputeInstance_t> Session::compute_instance_by_id(nvmlGpuInstance_t instance,
                                                              unsigned compute_instance_id) const {
  return mig_answer<nvmlComputeInstance_t>(TESSERA_NVML(nvmlGpuInstanceGetComputeInstanceById),
                                           instance, compute_instance_id);
}

Result<nvmlComputeInstanceInfo_t> Session::compute_instance_info(
    nvmlComputeInstance_t instance) const {
  return mig_answer<nvmlComputeInstanceInfo_t>(TESSERA_NVML(nvmlComputeInstanceGetInfo_v2),
                                               instance);
}

Status Session::destroy_compute_instance(nvmlComputeInstance_t instance) const {
  return mig_call(TESSERA_NVML(nvmlComputeInstanceDestroy), instance);
}

Result<unsigned> Session::max_mig_device_count(nvmlDevice_t parent) const {
  return mig_answer<unsigned>(TESSERA_NVML(nvmlDeviceGetMaxMigDeviceCount), parent);
}

Result<nvmlDevice_t> Session::mig_device_by_index(nvmlDevice_t parent, unsigned index) const {
  return mig_answer<nvmlDevice_t>(TESSERA_NVML(nvmlDeviceGetMigDeviceHandleByIndex), parent, index);
}

Result<std::vector<nvmlDevice_t>> Session::mig_devices(nvmlDevice_t parent) const {
  TESSERA_ASSIGN_OR_RETURN(const unsigned max, max_mig_device_count(parent));
  std::vector<nvmlDevice_t> devices;
  for (unsigned index = 0; index < max; ++index) {
    Result<nvmlDevice_t> device = mig_device_by_index(parent, index);
    if (device.is_ok()) {
      devices.push_back(*device);
    } else if (device.status().code() != StatusCode::kNotFound) {
      return device.status();
    }
  }
  return devices;
}

Result<bool> Session::is_mig_device(nvmlDevice_t device) const {
  TESSERA_ASSIGN_OR_RETURN(const unsigned is_mig,
                           mig_answer<unsigned>(TESSERA_NVML(nvmlDeviceIsMigDeviceHandle), device));
  return is_mig != 0;
}

Result<nvmlDevice_t> Session::device_from_mig_handle(nvmlDevice_t mig_device) const {
  return mig_answer<nvmlDevice_t>(TESSERA_NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle),
                                  mig_device);
}

Result<unsigned> Session::gpu_instance_id(nvmlDevice_t mig_device) const {
  return mig_answer<unsigned>(TESSERA_NVML(nvmlDeviceGetGpuInstanceId), mig_device);
}

Result<unsigned> Session::compute_instance_id(nvmlDevice_t mig_device) const {
  return mig_answer<unsigned>(TESSERA_NVML(nvmlDeviceGetComputeInstanceId), mig_device);
}

Result<nvmlDeviceAttributes_t> Session::attributes(nvmlDevice_t mig_device) const {
  return mig_answer<nvmlDeviceAttributes_t>(TESSERA_NVML(nvmlDeviceGetAttributes_v2), mig_device);
}

// ---- Events -------------------------------------------------------------------------------------

Result<EventSet> Session::create_event_set() const {
  TESSERA_RETURN_IF_ERROR(library_->require({EntryPoint::nvmlEventSetFree}));
  TESSERA_ASSIGN_OR_RETURN(nvmlEventSet_t set,
                           answer<nvmlEventSet_t>(TESSERA_NVML(nvmlEventSetCreate)));
  return EventSet(library_, set);
}

Result<unsigned long long> Session::supported_event_types(nvmlDevice_t device) const {
  return answer<unsigned long long>(TESSERA_NVML(nvmlDeviceGetSupportedEventTypes), device);
}

Status Session::register_events(nvmlDevice_t device, unsigned long long event_types,
                                const EventSet& set) const {
  return call(TESSERA_NVML(nvmlDeviceRegisterEvents), device, event_types, set.get());
}

Result<std::optional<nvmlEventData_t>> Session::wait_event(const EventSet& set,
                                                           unsigned timeout_ms) const {
  const EntryPoints& table = library_->entry_points();
  if (table.nvmlEventSetWait_v2 == nullptr)
    return missing(*library_, EntryPoint::nvmlEventSetWait_v2);
  nvmlEventData_t event{};
  const nvmlReturn_t result = table.nvmlEventSetWait_v2(set.get(), &event, timeout_ms);
  if (result == NVML_ERROR_TIMEOUT) return std::optional<nvmlEventData_t>();
  if (result != NVML_SUCCESS) return failed(*library_, "nvmlEventSetWait_v2", result);
  return std::optional<nvmlEventData_t>(event);
}

}  // namespace tessera::nvml
