/* The subset of NVIDIA's NVML C ABI that Tessera implements (the simulated libnvidia-ml.so.1)
 * and intercepts (libvgpu). Written from the public NVML API reference: type layouts, constant
 * values and signatures must match libnvidia-ml.so.1 exactly, because callers compiled against
 * NVIDIA's nvml.h pass their own structs to whichever library answers.
 *
 * Unlike nvml.h this header does not `#define nvmlInit nvmlInit_v2` and friends: an implementation
 * has to define both the versioned entry point and the legacy one under their own names, each
 * with the struct layout its callers were compiled with. Call the versioned names explicitly.
 *
 * Never include it together with NVIDIA's nvml.h (the names would clash). */
#ifndef TESSERA_NVML_ABI_H_
#define TESSERA_NVML_ABI_H_

#ifdef __nvml_nvml_h__
#error "tessera/nvml_abi.h and NVIDIA's nvml.h declare the same names; include only one"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the entry points a library built from this header exports (every Tessera build hides
 * everything else). Harmless on a caller's declarations. */
#define TESSERA_NVML_EXPORT __attribute__((visibility("default")))

/* ---- Return codes ---------------------------------------------------------------------------- */

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5, /* deprecated: init is reference counted */
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* ---- Constants ---------------------------------------------------------------------------------
 */

/* Versioned structs carry sizeof(struct) | (version << 24) in their first field. */
#define NVML_STRUCT_VERSION(data, ver) \
  (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))

/* A field value that is not available (e.g. usedGpuMemory under Windows WDDM). */
#define NVML_VALUE_NOT_AVAILABLE (-1)

#define NVML_INIT_FLAG_NO_GPUS 1   /* nvmlInitWithFlags: succeed even with no GPU */
#define NVML_INIT_FLAG_NO_ATTACH 2 /* nvmlInitWithFlags: do not attach GPUs */

#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"

/* CUDA driver versions are encoded as 1000 * major + 10 * minor (13000 is CUDA 13.0). */
#define NVML_CUDA_DRIVER_VERSION_MAJOR(v) ((v) / 1000)
#define NVML_CUDA_DRIVER_VERSION_MINOR(v) (((v) % 1000) / 10)

/* ---- Handles -----------------------------------------------------------------------------------
 */

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

/* ---- Device information ------------------------------------------------------------------------
 */

typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "%04X:%02X:%02X.0" */
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;                       /* (16-bit device id << 16) | 16-bit vendor id */
  unsigned int pciSubSystemId;                    /* 32-bit subsystem device id */
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "%08X:%02X:%02X.0" */
} nvmlPciInfo_t;

typedef enum nvmlBrandType_enum {
  NVML_BRAND_UNKNOWN = 0,
  NVML_BRAND_QUADRO = 1,
  NVML_BRAND_TESLA = 2,
  NVML_BRAND_NVS = 3,
  NVML_BRAND_GRID = 4, /* no longer reported */
  NVML_BRAND_GEFORCE = 5,
  NVML_BRAND_TITAN = 6,
  NVML_BRAND_NVIDIA_VAPPS = 7,
  NVML_BRAND_NVIDIA_VPC = 8,
  NVML_BRAND_NVIDIA_VCS = 9,
  NVML_BRAND_NVIDIA_VWS = 10,
  NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
  NVML_BRAND_NVIDIA_VGAMING = NVML_BRAND_NVIDIA_CLOUD_GAMING,
  NVML_BRAND_QUADRO_RTX = 12,
  NVML_BRAND_NVIDIA_RTX = 13,
  NVML_BRAND_NVIDIA = 14, /* data-centre parts since Ampere (A100, H100, H200) */
  NVML_BRAND_GEFORCE_RTX = 15,
  NVML_BRAND_TITAN_RTX = 16,
  NVML_BRAND_COUNT
} nvmlBrandType_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_T23X 11 /* Orin */
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffff

/* ---- Memory ------------------------------------------------------------------------------------
 */

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used; /* allocated + reserved */
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version; /* must be nvmlMemory_v2 */
  unsigned long long total;
  unsigned long long reserved; /* set aside by driver and firmware; included in used */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

/* Per-cgroup device-memory limits (driver R615 and later, CUDA 13.4; layouts as nvml.h of
 * cuda-nvml-dev 13.4 publishes them). `nameSpace` is the full path of a cgroup v2 directory
 * ("/sys/fs/cgroup/a/b"). Soft 0 with hard ULLONG_MAX clears a cgroup's limit. Older
 * libnvidia-ml.so.1 do not have these symbols: look them up with dlsym. */
typedef struct {
  const char* nameSpace;        /* [in] */
  unsigned long long softLimit; /* [in] bytes: the guarantee */
  unsigned long long hardLimit; /* [in] bytes: the wall */
} nvmlSetMemoryLimits_v1_t;

typedef struct {
  const char* nameSpace;          /* [in] */
  unsigned long long softLimit;   /* [out] */
  unsigned long long hardLimit;   /* [out] */
  unsigned long long currentUsed; /* [out] bytes the cgroup holds now */
} nvmlGetMemoryLimits_v1_t;

/* ---- Processes and utilisation -----------------------------------------------------------------
 */

/* Layout of the unversioned nvmlDeviceGetComputeRunningProcesses. */
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes, or NVML_VALUE_NOT_AVAILABLE */
} nvmlProcessInfo_v1_t;

/* Layout of _v2 and _v3; gpuInstanceId / computeInstanceId are 0xFFFFFFFF without MIG. */
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;    /* percent of the sample period a kernel was running */
  unsigned int memory; /* percent of the sample period device memory was read or written */
} nvmlUtilization_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp; /* CPU timestamp, microseconds */
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* ---- Events ------------------------------------------------------------------------------------
 */

#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypePowerSourceChange 0x0000000000000080LL
#define nvmlEventMigConfigChange 0x0000000000000100LL
#define nvmlEventTypeSingleBitEccErrorStorm 0x0000000000000200LL
#define nvmlEventTypeDramRetirementEvent 0x0000000000000400LL
#define nvmlEventTypeDramRetirementFailure 0x0000000000000800LL
#define nvmlEventTypeNonFatalPoisonError 0x0000000000001000LL
#define nvmlEventTypeFatalPoisonError 0x0000000000002000LL
#define nvmlEventTypeGpuUnavailableError 0x0000000000004000LL
#define nvmlEventTypeGpuRecoveryAction 0x0000000000008000LL
#define nvmlEventTypeNone 0x0000000000000000LL

/* The v2 layout (nvmlEventSetWait_v2). The legacy nvmlEventSetWait fills only the first three
 * fields, which is all its callers' struct has. */
typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData; /* the XID for nvmlEventTypeXidCriticalError, else 0 */
  unsigned int gpuInstanceId;   /* 0xFFFFFFFF unless attributable to a MIG instance */
  unsigned int computeInstanceId;
} nvmlEventData_t;

/* ---- Functions ---------------------------------------------------------------------------------
 */

/* Initialisation (reference counted: every successful init needs one nvmlShutdown). */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlShutdown(void);
TESSERA_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result);

/* System queries. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion);

/* Enumeration and identity. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                               nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                                  nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                   unsigned int length);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                   unsigned int length);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                          unsigned int* minorNumber);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                           nvmlDeviceArchitecture_t* arch);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                    int* minor);

/* Compute mode (nvidia-smi -c): which processes may create contexts on the device. */
typedef enum nvmlComputeMode_enum {
  NVML_COMPUTEMODE_DEFAULT = 0,
  NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
  NVML_COMPUTEMODE_PROHIBITED = 2,
  NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
} nvmlComputeMode_t;
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device,
                                                          nvmlComputeMode_t* mode);

/* Peer-to-peer capability between two devices (NCCL reads it for every pair at start-up). */
typedef enum nvmlGpuP2PCapsIndex_enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PCI = 4,
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum nvmlGpuP2PStatus_enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuP2PCapsIndex_t p2pIndex,
                                                        nvmlGpuP2PStatus_t* p2pStatus);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device,
                                                          unsigned int* numCores);

/* Memory, processes, utilisation. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                            nvmlMemory_v2_t* memory);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int* infoCount,
                                                                         nvmlProcessInfo_t* infos);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v2_t* infos);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                               nvmlUtilization_t* utilization);

/* Per-cgroup memory limits (R615+). Setting is privileged (NVML_ERROR_NO_PERMISSION otherwise); the
 * getter answers NVML_ERROR_NOT_FOUND for a cgroup without a limit of its own. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device,
                                                              nvmlSetMemoryLimits_v1_t* limits);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device,
                                                              nvmlGetMemoryLimits_v1_t* limits);

/* Events. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                          unsigned long long eventTypes,
                                                          nvmlEventSet_t set);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                                  unsigned long long* eventTypes);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                     unsigned int timeoutms);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);

/* Legacy (unversioned or older) entry points that libnvidia-ml.so.1 still exports for programs
 * built against older headers; same behaviour, older layouts where they differ. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlInit(void);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                            nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId,
                                                               nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                      unsigned int* infoCount,
                                                                      nvmlProcessInfo_v1_t* infos);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data,
                                                  unsigned int timeoutms);

#ifdef __cplusplus
} /* extern "C" */

/* Layouts as NVIDIA's LP64 ABI has them; a mismatch corrupts the caller's memory. */
static_assert(sizeof(nvmlReturn_t) == 4);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(nvmlMemory_v2 == 0x02000028u);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(sizeof(nvmlSetMemoryLimits_v1_t) == 24);
static_assert(sizeof(nvmlGetMemoryLimits_v1_t) == 32);
#endif

#endif /* TESSERA_NVML_ABI_H_ */
