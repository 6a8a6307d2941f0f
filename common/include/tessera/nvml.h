// The product's one NVML binding: libnvidia-ml.so.1 (the real one, or the simulated one in tests)
// loaded with dlopen, so a program starts on a machine without a driver and says why.
//
// - Library: the library at one path, loaded and its entry points resolved once per process, under
//   a lock (the agent calls NVML from several threads), and never unloaded: NVML keeps
//   process-wide state that outlives nvmlShutdown, and its users list GPUs again later. A failed
//   load is not remembered: a driver installed or upgraded later makes the next try succeed.
// - Session: one nvmlInit_v2 with an owner (nvmlShutdown when it goes; NVML's init is reference
//   counted, so sessions of several components coexist). Every NVML call goes through a session.
// - Typed calls: a value, or a Status naming the call and NVML's error string
//   ("nvmlDeviceGetMemoryInfo: GPU is lost"). Codes: kFailedPrecondition when this driver or GPU
//   cannot do it (the entry point is missing: "<path> has no <symbol>"; or
//   NVML_ERROR_NOT_SUPPORTED or NVML_ERROR_FUNCTION_NOT_FOUND), kUnavailable for every other NVML
//   error (a lost GPU, a driver starting: asking again may help).
//
// Thread-safe: a Library is immutable once loaded, NVML's calls are thread-safe, and a Session's
// calls keep no state of their own.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tessera/nvml_abi.h"
#include "tessera/status.h"

namespace tessera::nvml {

inline constexpr char kDefaultLibrary[] = "libnvidia-ml.so.1";

// Every NVML entry point the product calls. A library lacking one still loads: the calls that need
// it fail with "<path> has no <symbol>", and callers that cannot do without it require it up front
// (Session::open's `required`, Library::require).
#define TESSERA_NVML_ENTRY_POINTS(X)               \
  X(nvmlInit_v2)                                   \
  X(nvmlShutdown)                                  \
  X(nvmlErrorString)                               \
  X(nvmlSystemGetDriverVersion)                    \
  X(nvmlDeviceGetCount_v2)                         \
  X(nvmlDeviceGetHandleByIndex_v2)                 \
  X(nvmlDeviceGetHandleByUUID)                     \
  X(nvmlDeviceGetUUID)                             \
  X(nvmlDeviceGetName)                             \
  X(nvmlDeviceGetMemoryInfo)                       \
  X(nvmlDeviceGetMinorNumber)                      \
  X(nvmlDeviceGetPciInfo_v3)                       \
  X(nvmlDeviceGetBrand)                            \
  X(nvmlDeviceGetArchitecture)                     \
  X(nvmlDeviceGetCudaComputeCapability)            \
  X(nvmlDeviceGetComputeMode)                      \
  X(nvmlDeviceGetUtilizationRates)                 \
  X(nvmlDeviceGetComputeRunningProcesses_v3)       \
  X(nvmlDeviceGetProcessUtilization)               \
  X(nvmlEventSetCreate)                            \
  X(nvmlEventSetFree)                              \
  X(nvmlEventSetWait_v2)                           \
  X(nvmlDeviceGetSupportedEventTypes)              \
  X(nvmlDeviceRegisterEvents)                      \
  X(nvmlDeviceSetMemoryLimits_v1)                  \
  X(nvmlDeviceGetMemoryLimits_v1)                  \
  X(nvmlDeviceGetMigMode)                          \
  X(nvmlDeviceSetMigMode)                          \
  X(nvmlDeviceGetGpuInstanceProfileInfoV)          \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2) \
  X(nvmlDeviceCreateGpuInstance)                   \
  X(nvmlDeviceCreateGpuInstanceWithPlacement)      \
  X(nvmlDeviceGetGpuInstances)                     \
  X(nvmlDeviceGetGpuInstanceById)                  \
  X(nvmlGpuInstanceGetInfo)                        \
  X(nvmlGpuInstanceDestroy)                        \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfoV) \
  X(nvmlGpuInstanceCreateComputeInstance)          \
  X(nvmlGpuInstanceGetComputeInstances)            \
  X(nvmlGpuInstanceGetComputeInstanceById)         \
  X(nvmlComputeInstanceGetInfo_v2)                 \
  X(nvmlComputeInstanceDestroy)                    \
  X(nvmlDeviceGetMaxMigDeviceCount)                \
  X(nvmlDeviceGetMigDeviceHandleByIndex)           \
  X(nvmlDeviceIsMigDeviceHandle)                   \
  X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)  \
  X(nvmlDeviceGetGpuInstanceId)                    \
  X(nvmlDeviceGetComputeInstanceId)                \
  X(nvmlDeviceGetAttributes_v2)

// Named as the C functions are, so a requirement reads as the symbol it is.
enum class EntryPoint {
#define TESSERA_NVML_ENUMERATOR(name) name,
  TESSERA_NVML_ENTRY_POINTS(TESSERA_NVML_ENUMERATOR)
#undef TESSERA_NVML_ENUMERATOR
};
const char* symbol_name(EntryPoint entry);

// The event entry points; a driver lacking any of them has no events for this product.
inline constexpr std::initializer_list<EntryPoint> kEventEntryPoints = {
    EntryPoint::nvmlEventSetCreate,
    EntryPoint::nvmlEventSetFree,
    EntryPoint::nvmlEventSetWait_v2,
    EntryPoint::nvmlDeviceGetHandleByUUID,
    EntryPoint::nvmlDeviceGetSupportedEventTypes,
    EntryPoint::nvmlDeviceRegisterEvents};

// The per-cgroup memory-limit entry points: only an R615 or newer libnvidia-ml.so.1 has them.
inline constexpr std::initializer_list<EntryPoint> kMemoryLimitEntryPoints = {
    EntryPoint::nvmlDeviceSetMemoryLimits_v1, EntryPoint::nvmlDeviceGetMemoryLimits_v1};

// The MIG entry points: every driver since R470 has them (a GPU without MIG answers
// NVML_ERROR_NOT_SUPPORTED, not a missing symbol).
inline constexpr std::initializer_list<EntryPoint> kMigEntryPoints = {
    EntryPoint::nvmlDeviceGetMigMode,
    EntryPoint::nvmlDeviceSetMigMode,
    EntryPoint::nvmlDeviceGetGpuInstanceProfileInfoV,
    EntryPoint::nvmlDeviceGetGpuInstancePossiblePlacements_v2,
    EntryPoint::nvmlDeviceCreateGpuInstance,
    EntryPoint::nvmlDeviceCreateGpuInstanceWithPlacement,
    EntryPoint::nvmlDeviceGetGpuInstances,
    EntryPoint::nvmlDeviceGetGpuInstanceById,
    EntryPoint::nvmlGpuInstanceGetInfo,
    EntryPoint::nvmlGpuInstanceDestroy,
    EntryPoint::nvmlGpuInstanceGetComputeInstanceProfileInfoV,
    EntryPoint::nvmlGpuInstanceCreateComputeInstance,
    EntryPoint::nvmlGpuInstanceGetComputeInstances,
    EntryPoint::nvmlGpuInstanceGetComputeInstanceById,
    EntryPoint::nvmlComputeInstanceGetInfo_v2,
    EntryPoint::nvmlComputeInstanceDestroy,
    EntryPoint::nvmlDeviceGetMaxMigDeviceCount,
    EntryPoint::nvmlDeviceGetMigDeviceHandleByIndex,
    EntryPoint::nvmlDeviceIsMigDeviceHandle,
    EntryPoint::nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    EntryPoint::nvmlDeviceGetGpuInstanceId,
    EntryPoint::nvmlDeviceGetComputeInstanceId,
    EntryPoint::nvmlDeviceGetAttributes_v2};

struct EntryPoints;  // the resolved table (nvml.cc)

class Library {
 public:
  // The library at `path`, loaded and resolved at the first call for that path; the same object
  // for every later call. kUnavailable "cannot load <path> (is the NVIDIA driver installed?):
  // <why>" when dlopen fails (tried again on the next call).
  static Result<const Library*> load(const std::string& path = kDefaultLibrary);

  const std::string& path() const { return path_; }
  bool has(EntryPoint entry) const;
  // Ok, or kFailedPrecondition "<path> has no <symbol>" for the first of `entries` it lacks.
  Status require(std::initializer_list<EntryPoint> entries) const;
  const EntryPoints& entry_points() const { return *entry_points_; }

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

 private:
  Library(std::string path, const EntryPoints* entry_points)
      : path_(std::move(path)), entry_points_(entry_points) {}
  std::string path_;
  const EntryPoints* entry_points_;
};

// An NVML event set with its owner: nvmlEventSetFree when it goes. Free it before the session
// that created it (declare it after the session).
class EventSet {
 public:
  EventSet() = default;
  EventSet(const Library* library, nvmlEventSet_t set) : library_(library), set_(set) {}
  EventSet(EventSet&& other) noexcept;
  EventSet& operator=(EventSet&& other) noexcept;
  ~EventSet() { reset(); }

  nvmlEventSet_t get() const { return set_; }
  explicit operator bool() const { return set_ != nullptr; }
  void reset();  // frees the set now (NVML cannot unregister devices: a new set replaces one)

 private:
  const Library* library_ = nullptr;
  nvmlEventSet_t set_ = nullptr;
};

// Now as NVML stamps its samples: CPU wall-clock microseconds (the `since_us` of
// Session::process_utilization).
unsigned long long wall_clock_us();

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

// A cgroup's own device-memory limit on one GPU (driver R615+), and what the cgroup holds.
struct MemoryLimits {
  unsigned long long soft_limit = 0;
  unsigned long long hard_limit = 0;
  unsigned long long current_used = 0;
};

// nvmlSetMemoryLimits_v1_t's way of saying "no limit": soft 0, hard ULLONG_MAX.
inline constexpr unsigned long long kClearSoftLimit = 0;
inline constexpr unsigned long long kClearHardLimit = ~0ull;

// A GPU's MIG mode now and after the next activation (NVML_DEVICE_MIG_ENABLE / _DISABLE).
struct MigMode {
  unsigned current = NVML_DEVICE_MIG_DISABLE;
  unsigned pending = NVML_DEVICE_MIG_DISABLE;
};

class Session {
 public:
  // Loads `path` (Library::load), checks that it has nvmlInit_v2, nvmlShutdown, nvmlErrorString and
  // every one of `required`, and initialises NVML. kUnavailable when the library cannot be loaded
  // or nvmlInit_v2 fails ("nvmlInit_v2: Driver Not Loaded"), kFailedPrecondition when an entry
  // point is missing ("<path> has no <symbol>").
  static Result<Session> open(const std::string& path = kDefaultLibrary,
                              std::initializer_list<EntryPoint> required = {});

  Session(Session&& other) noexcept;
  Session& operator=(Session&& other) noexcept;
  ~Session();  // nvmlShutdown (once per successful open)

  const Library& library() const { return *library_; }

  // System and enumeration.
  Result<std::string> driver_version() const;
  Result<unsigned> device_count() const;
  Result<nvmlDevice_t> device_by_index(unsigned index) const;
  Result<nvmlDevice_t> device_by_uuid(const std::string& uuid) const;

  // Identity.
  Result<std::string> uuid(nvmlDevice_t device) const;
  Result<std::string> name(nvmlDevice_t device) const;
  Result<unsigned> minor_number(nvmlDevice_t device) const;
  Result<nvmlPciInfo_t> pci_info(nvmlDevice_t device) const;
  Result<nvmlBrandType_t> brand(nvmlDevice_t device) const;
  Result<nvmlDeviceArchitecture_t> architecture(nvmlDevice_t device) const;
  Result<ComputeCapability> compute_capability(nvmlDevice_t device) const;
  Result<nvmlComputeMode_t> compute_mode(nvmlDevice_t device) const;

  // Memory, utilisation, processes.
  Result<nvmlMemory_t> memory(nvmlDevice_t device) const;
  Result<nvmlUtilization_t> utilization(nvmlDevice_t device) const;
  // nvmlDeviceGetComputeRunningProcesses_v3, the buffer grown while NVML says
  // NVML_ERROR_INSUFFICIENT_SIZE (a few tries: "<call>: the list kept growing" after them).
  Result<std::vector<nvmlProcessInfo_t>> compute_processes(nvmlDevice_t device) const;
  // nvmlDeviceGetProcessUtilization's samples newer than `since_us` (CPU wall-clock microseconds),
  // the buffer grown as above; none when NVML has none (NVML_ERROR_NOT_FOUND).
  Result<std::vector<nvmlProcessUtilizationSample_t>> process_utilization(
      nvmlDevice_t device, unsigned long long since_us) const;

  // Per-cgroup memory limits (R615+). `cgroup_directory` is the full path of a cgroup v2 directory
  // ("/sys/fs/cgroup/kubepods/..."). A library without the entry points (an older driver) gives
  // kFailedPrecondition "<path> has no nvmlDeviceSetMemoryLimits_v1", as does a driver that says
  // NVML_ERROR_NOT_SUPPORTED or NVML_ERROR_FUNCTION_NOT_FOUND. Setting needs root
  // (kUnavailable "...: Insufficient Permissions" otherwise). clear_memory_limits sets soft 0 and
  // hard ULLONG_MAX.
  Status set_memory_limits(nvmlDevice_t device, const std::string& cgroup_directory,
                           unsigned long long soft_limit, unsigned long long hard_limit) const;
  Status clear_memory_limits(nvmlDevice_t device, const std::string& cgroup_directory) const;
  // The cgroup's own limit. kNotFound "nvmlDeviceGetMemoryLimits_v1: Not Found" when it has none of
  // its own (an ancestor may have one); on the misc backend a cgroup with no limited ancestor
  // either answers NVML_ERROR_NOT_SUPPORTED (kFailedPrecondition). Both mean "no limit here".
  Result<MemoryLimits> memory_limits(nvmlDevice_t device,
                                     const std::string& cgroup_directory) const;

  // Multi-Instance GPU. Errors name the call and NVML's error string; their codes let a caller
  // act on the answer: kFailedPrecondition NVML_ERROR_NOT_SUPPORTED (no MIG on this GPU, MIG mode
  // off, a profile the GPU lacks) or a missing entry point; kInvalidArgument
  // NVML_ERROR_INVALID_ARGUMENT (a profile index past the last: enumeration ends there);
  // kNotFound NVML_ERROR_NOT_FOUND (a GI/CI ID or MIG index that does not exist, e.g. destroyed);
  // kAlreadyExists NVML_ERROR_INSUFFICIENT_RESOURCES (the placement overlaps an instance, or the
  // profile's instances are used up); kUnavailable for the rest, NVML_ERROR_IN_USE (processes or
  // compute instances still there: retry once they are gone) and NVML_ERROR_NO_PERMISSION among
  // them.
  Result<MigMode> mig_mode(nvmlDevice_t device) const;
  // nvmlDeviceSetMigMode, its activation status included: a mode the driver could not activate
  // (NVML_ERROR_IN_USE while processes run) is an error like the call's own.
  Status set_mig_mode(nvmlDevice_t device, unsigned mode) const;
  // GPU instance profile by *index* (NVML_GPU_INSTANCE_PROFILE_*), in the v3 layout; from a driver
  // that knows only v2 the v2 answer is converted (capabilities from isP2pSupported).
  Result<nvmlGpuInstanceProfileInfo_v3_t> gpu_instance_profile_info(nvmlDevice_t device,
                                                                    unsigned profile_index) const;
  // Every legal placement of a profile *ID* (`info.id`), occupied or not.
  Result<std::vector<nvmlGpuInstancePlacement_t>> gpu_instance_possible_placements(
      nvmlDevice_t device, unsigned profile_id) const;
  Result<nvmlGpuInstance_t> create_gpu_instance_with_placement(
      nvmlDevice_t device, unsigned profile_id, const nvmlGpuInstancePlacement_t& placement) const;
  // The driver chooses the placement.
  Result<nvmlGpuInstance_t> create_gpu_instance(nvmlDevice_t device, unsigned profile_id) const;
  // The GPU instances of one profile ID.
  Result<std::vector<nvmlGpuInstance_t>> gpu_instances(nvmlDevice_t device,
                                                       unsigned profile_id) const;
  Result<nvmlGpuInstance_t> gpu_instance_by_id(nvmlDevice_t device, unsigned gpu_instance_id) const;
  Result<nvmlGpuInstanceInfo_t> gpu_instance_info(nvmlGpuInstance_t instance) const;
  Status destroy_gpu_instance(nvmlGpuInstance_t instance) const;
  // Compute instance profile by *index* (NVML_COMPUTE_INSTANCE_PROFILE_*), v3 layout (v2
  // converted).
  Result<nvmlComputeInstanceProfileInfo_v3_t> compute_instance_profile_info(
      nvmlGpuInstance_t instance, unsigned profile_index,
      unsigned engine_profile = NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) const;
  // Takes the CI profile ID (`info.id`).
  Result<nvmlComputeInstance_t> create_compute_instance(nvmlGpuInstance_t instance,
                                                        unsigned profile_id) const;
  Result<std::vector<nvmlComputeInstance_t>> compute_instances(nvmlGpuInstance_t instance,
                                                               unsigned profile_id) const;
  Result<nvmlComputeInstance_t> compute_instance_by_id(nvmlGpuInstance_t instance,
                                                       unsigned compute_instance_id) const;
  // `info.device` is the compute instance's MIG device handle (uuid() of it: "MIG-...").
  Result<nvmlComputeInstanceInfo_t> compute_instance_info(nvmlComputeInstance_t instance) const;
  Status destroy_compute_instance(nvmlComputeInstance_t instance) const;
  // MIG devices (one per compute instance) under a parent GPU: indices 0..max-1, with holes
  // (kNotFound at a hole). mig_devices walks them and skips the holes.
  Result<unsigned> max_mig_device_count(nvmlDevice_t parent) const;
  Result<nvmlDevice_t> mig_device_by_index(nvmlDevice_t parent, unsigned index) const;
  Result<std::vector<nvmlDevice_t>> mig_devices(nvmlDevice_t parent) const;
  Result<bool> is_mig_device(nvmlDevice_t device) const;
  Result<nvmlDevice_t> device_from_mig_handle(nvmlDevice_t mig_device) const;  // the parent GPU
  Result<unsigned> gpu_instance_id(nvmlDevice_t mig_device) const;
  Result<unsigned> compute_instance_id(nvmlDevice_t mig_device) const;
  // nvmlDeviceGetAttributes_v2: MIG device handles only.
  Result<nvmlDeviceAttributes_t> attributes(nvmlDevice_t mig_device) const;

  // Events.
  Result<EventSet> create_event_set() const;
  Result<unsigned long long> supported_event_types(nvmlDevice_t device) const;
  Status register_events(nvmlDevice_t device, unsigned long long event_types,
                         const EventSet& set) const;
  // The next event of `set`, waiting up to `timeout_ms` (0: only what is there); none on timeout.
  Result<std::optional<nvmlEventData_t>> wait_event(const EventSet& set, unsigned timeout_ms) const;

 private:
  explicit Session(const Library* library) : library_(library) {}
  const Library* library_ = nullptr;  // null once moved from
};

}  // namespace tessera::nvml
