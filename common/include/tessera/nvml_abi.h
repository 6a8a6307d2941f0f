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

/* ---- Multi-Instance GPU (MIG) ------------------------------------------------------------------
 * Layouts and values from NVIDIA's nvml.h (NVML_API_VERSION 13) as published in NVIDIA/go-nvml
 * gen/nvml/nvml.h @ 2f9e261fe40a7a1c54783d66805e8920564763b4, the "Multi Instance GPU
 * Management" group. Two numbering spaces: the profile *index* (NVML_GPU_INSTANCE_PROFILE_*) is
 * what the profile-info queries take; the profile *ID* (the `id` they return, e.g. 19 for 1g on
 * A100/H100) is what placements, create and list take. Placements count memory slices. */

typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;

#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

/* GPU instance profile indices (argument of nvmlDeviceGetGpuInstanceProfileInfo*). */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7 /* with at least one media engine ("+me") */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8 /* with at least one media engine */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9 /* twice the memory (1g.20gb on H100) */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0x0A
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0x0B
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0x0C
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0x0D
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0x0E
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0x0F /* blocks all but _NO_ME profiles */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10 /* blocks all but _NO_ME profiles */
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX 0x11
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12

/* nvmlGpuInstanceProfileInfo_v3_t.capabilities bits. */
#define NVML_GPU_INSTANCE_PROFILE_CAPS_P2P 0x1
#define NVML_GPU_INSTANCE_PROFILE_CAPS_GFX 0x2
/* nvmlComputeInstanceProfileInfo_v3_t.capabilities bits. */
#define NVML_COMPUTE_INSTANCE_PROFILE_CAPS_GFX 0x1

/* Compute instance profile indices (argument of nvmlGpuInstanceGetComputeInstanceProfileInfo*). */
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL 0x8
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9

/* All engines except the SMs are shared between the compute instances of a GPU instance. */
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1

typedef struct nvmlGpuInstancePlacement_st {
  unsigned int start; /* index of the first occupied memory slice */
  unsigned int size;  /* number of memory slices occupied */
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id; /* the profile ID, unique within the device */
  unsigned int isP2pSupported;
  unsigned int sliceCount; /* compute (GPU) slices */
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB; /* MiB */
} nvmlGpuInstanceProfileInfo_t;

/* v2 adds `version` first and `name` last: not layout-compatible with v1. */
typedef struct nvmlGpuInstanceProfileInfo_v2_st {
  unsigned int version; /* nvmlGpuInstanceProfileInfo_v2 */
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;

#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)

/* v3 drops isP2pSupported and adds `capabilities` (NVML_GPU_INSTANCE_PROFILE_CAPS_*). */
typedef struct nvmlGpuInstanceProfileInfo_v3_st {
  unsigned int version; /* nvmlGpuInstanceProfileInfo_v3 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;

#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3)

typedef struct nvmlGpuInstanceInfo_st {
  nvmlDevice_t device; /* the parent GPU */
  unsigned int id;     /* GPU instance ID, unique within the device */
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
  unsigned int start; /* index of the first occupied compute slice of the GPU instance */
  unsigned int size;  /* number of compute slices occupied */
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id; /* the profile ID, unique within the GPU instance */
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
  unsigned int version; /* nvmlComputeInstanceProfileInfo_v2 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
  unsigned int version; /* nvmlComputeInstanceProfileInfo_v3 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities; /* NVML_COMPUTE_INSTANCE_PROFILE_CAPS_* */
} nvmlComputeInstanceProfileInfo_v3_t;

#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)

typedef struct nvmlComputeInstanceInfo_st {
  nvmlDevice_t device; /* the MIG device of this compute instance (its GetUUID is the MIG UUID) */
  nvmlGpuInstance_t gpuInstance;
  unsigned int id; /* compute instance ID, unique within the GPU instance */
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* nvmlDeviceGetAttributes_v2: MIG device handles only. */
typedef struct nvmlDeviceAttributes_st {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB; /* MiB */
} nvmlDeviceAttributes_t;

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

/* Multi-Instance GPU. Mode changes and instance management need root on a real driver. A MIG
 * device handle (one per compute instance) is accepted, with restrictions, wherever a GPU handle
 * is; nvmlDeviceGetHandleByUUID takes "MIG-<uuid>" too. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                                      unsigned int* currentMode,
                                                      unsigned int* pendingMode);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                                      nvmlReturn_t* activationStatus);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t* info);
/* `info->version` must be set (v2 or v3 layout; both are passed as the v2 pointer type). */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstanceProfileInfo_v2_t* info);
/* Every placement of the profile, occupied or not; `placements` NULL: only the count. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                           unsigned int profileId,
                                                                           unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                             unsigned int profileId,
                                                             nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
/* `count` is only written: the buffer must hold the profile's instanceCount entries. */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device,
                                                           unsigned int profileId,
                                                           nvmlGpuInstance_t* gpuInstances,
                                                           unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                              nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                        nvmlGpuInstanceInfo_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstancePlacement_t* placements, unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* computeInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
TESSERA_NVML_EXPORT nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t* computeInstances, unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(
    nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t* computeInstance);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(
    nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                             unsigned int* isMigDevice);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                                unsigned int* id);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                                unsigned int* count);
/* NVML_ERROR_NOT_FOUND where no MIG device has that index (indices have holes). */
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                     unsigned int index,
                                                                     nvmlDevice_t* migDevice);
TESSERA_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                            nvmlDeviceAttributes_t* attributes);

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
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                            nvmlComputeInstanceInfo_t* info);
TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device,
                                                         nvmlDeviceAttributes_t* attributes);

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
static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152);
static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098u);
static_assert(nvmlGpuInstanceProfileInfo_v3 == 0x03000098u);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24);
static_assert(sizeof(nvmlComputeInstancePlacement_t) == 8);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_v3_t) == 140);
static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088u);
static_assert(nvmlComputeInstanceProfileInfo_v3 == 0x0300008Cu);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);
static_assert(sizeof(nvmlDeviceAttributes_t) == 40);
#endif

#endif /* TESSERA_NVML_ABI_H_ */
