// The driver's private export tables (cuGetExportTable), which the CUDA runtime (static or shared,
// and the copies inside cuBLAS, cuDNN, NCCL) needs before it answers anything: what CUDA 13.0's
// runtime asks, in order, and what each slot must do is in /shared design cuda-runtime-facts.md
// and docs/simulator.md. Table ids, sizes and slot meanings are from public re-implementations:
// vosen/ZLUDA dark_api/src/lib.rs and zluda/src/impl/driver.rs (MIT or Apache-2.0), Wine nvcuda
// dlls/nvcuda/internal.c (LGPL). No NVIDIA code was read.
//
// A table the simulator does not serve, known or not, answers CUDA_ERROR_NOT_FOUND with a NULL
// table, never success without one. SIMGPU_TRACE=1 prints each request to stderr.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "core/process_id.h"
#include "driver.h"
#include "integrity_hash.h"

using namespace simgpu::driver;

// cuda.h names the CUDA 13 form cuCtxCreate; the simulator exports every ABI.
extern "C" CUresult cuCtxCreate_v2(CUcontext* out, unsigned int flags, CUdevice ordinal);
extern "C" CUresult cuCtxGetDevice_v2(CUdevice* out, CUcontext context);

namespace {

using Slot = const void*;

constexpr Slot table_size(size_t words) {
  return reinterpret_cast<Slot>(words * sizeof(void*));
}

template <typename F>
Slot slot(F* function) {
  return reinterpret_cast<Slot>(function);
}

// --- 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9: the runtime's interface (ZLUDA CUDART_INTERFACE) ----

CUresult load_module_for_runtime(CUmodule* out, const void* image) {
  return cuModuleLoadData(out, image);
}

CUresult runtime_get_module_from_cubin(CUmodule* out, const void* fatbin_wrapper) {
  if (!out || !fatbin_wrapper) return CUDA_ERROR_INVALID_VALUE;
  return load_module_for_runtime(out, fatbin_wrapper);
}

// The device's primary context, not retained: the runtime retains it when it first needs it.
CUresult runtime_primary_context(CUcontext* out, CUdevice ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *out = reinterpret_cast<CUcontext>(driver.primary_contexts[static_cast<size_t>(ordinal)].get());
  return CUDA_SUCCESS;
}

CUresult runtime_get_module_from_cubin_ext1(CUmodule* out, const void* fatbin_wrapper, void*, void*,
                                            unsigned) {
  return runtime_get_module_from_cubin(out, fatbin_wrapper);
}

void runtime_slot7(uintptr_t) {}

CUresult runtime_get_module_from_cubin_ext2(const void* fatbin, CUmodule* out, void*, void*,
                                            unsigned) {
  if (!out || !fatbin) return CUDA_ERROR_INVALID_VALUE;
  return load_module_for_runtime(out, fatbin);
}

// Loads the PTX compiler, libnvvm and the tile IR compiler on a real driver; none is needed here.
CUresult runtime_load_compilers() {
  return CUDA_SUCCESS;
}

// --- a094798c-2e74-2e74-93f2-0800200c0a66: tools callback hooks --------------------------------

uint32_t g_hook_buffer1[1024];
uint32_t g_hook_buffer2[14];

void hooks_buffer1(void** buffer, size_t* size) {
  if (buffer) *buffer = g_hook_buffer1;
  if (size) *size = sizeof g_hook_buffer1 / sizeof g_hook_buffer1[0];
}

void hooks_buffer2(void** buffer, size_t* size) {
  if (buffer) *buffer = g_hook_buffer2;
  if (size) *size = sizeof g_hook_buffer2 / sizeof g_hook_buffer2[0];
}

// --- c693336e-1121-df11-a8c3-68f355d89593: context-local storage ---------------------------------

Context* storage_context(Driver& driver, CUcontext handle) {
  Context* context = handle ? reinterpret_cast<Context*>(handle) : current_context();
  if (!context) return nullptr;
  if (driver.contexts.count(context)) return context;
  for (const auto& primary : driver.primary_contexts) {  // a primary context not yet retained
    if (primary.get() == context) return context;
  }
  return nullptr;
}

CUresult storage_put(CUcontext handle, void* key, void* value,
                     void (*destroyed)(CUcontext, void*, void*)) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = storage_context(driver, handle);
  if (!context) return CUDA_ERROR_INVALID_CONTEXT;
  context->local_storage[key] = {value, destroyed};
  return CUDA_SUCCESS;
}

CUresult storage_delete(CUcontext handle, void* key) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = storage_context(driver, handle);
  if (!context) return CUDA_ERROR_INVALID_CONTEXT;
  context->local_storage.erase(key);
  return CUDA_SUCCESS;
}

CUresult storage_get(void** value, CUcontext handle, void* key) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = storage_context(driver, handle);
  // No current context holds nothing: the runtime then makes one current and stores its state.
  if (!context) return handle ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
  auto found = context->local_storage.find(key);
  if (found == context->local_storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = found->second.value;
  return CUDA_SUCCESS;
}

// --- 42d85a81-23f6-cb47-8298-f6e78a3aecdc: tools thread-local storage ----------------------------

// Slot 2: the calling thread's current context (none: NULL). cuBLASLt asks before it finds a
// kernel for a GEMM, and calls the slot without a check, so an empty slot crashes it. The slot's
// meaning is from the GX emulator's context file (docs: cuda-runtime-facts.md), and cuBLASLt's
// use agrees: it returns a status and writes one pointer.
CUresult tools_current_context(CUcontext* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

// --- 21318c60-9714-3248-8ca6-41ff7324c8f2: tools context -----------------------------------------

// cuBLASLt asks for this table before its first GEMM and cuFFT at start-up. Its size, 95 words,
// is what driver 595.99.02 serves (a fake-GPU project's test of the CUDA 13.4 runtime, which
// asks for every slot to be filled). Slot meanings from the GX emulator's table
// (cuda-runtime-facts.md): 3 the context's device, 4 the context's unique id, as cuCtxGetId.
CUresult tools_context_device(CUcontext handle, CUdevice* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetDevice_v2(out, handle);
}

CUresult tools_context_id(CUcontext handle, unsigned long long* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetId(handle, out);
}

// Slot 51: the stream object behind a handle in a context (NULL and the legacy and per-thread
// handles: the context's default stream). cuBLAS asks before each GEMM, then slot 39 for that
// object's id, which keys its per-stream cache. Read from cuBLAS 13.1's calls (context from the
// tools table's slot 2, handle, out) and a remote-CUDA project's answers to the same slots.
CUresult tools_context_stream(CUcontext handle, CUstream stream, Stream** out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = reinterpret_cast<Context*>(handle);
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    *out = &context->default_stream;
    return CUDA_SUCCESS;
  }
  auto* found = reinterpret_cast<Stream*>(stream);
  if (!driver.streams.count(found) || found->context != context) return CUDA_ERROR_INVALID_HANDLE;
  *out = found;
  return CUDA_SUCCESS;
}

CUresult tools_context_stream_id(CUcontext handle, Stream* stream, unsigned long long* out) {
  if (!out || !stream) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = reinterpret_cast<Context*>(handle);
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream != &context->default_stream && !driver.streams.count(stream)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = stream_id(*stream);
  return CUDA_SUCCESS;
}

// Every other slot: an error, never a crash for a caller that calls without a check, and under
// SIMGPU_TRACE the slot's number and first arguments, to find what a library needs.
template <const char* Table, size_t Index>
CUresult unknown_slot(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3) {
  if (trace_enabled()) {
    std::fprintf(
        stderr, "simgpu: export table %s slot %zu (%#llx, %#llx, %#llx, %#llx) not simulated\n",
        Table, Index, static_cast<unsigned long long>(a0), static_cast<unsigned long long>(a1),
        static_cast<unsigned long long>(a2), static_cast<unsigned long long>(a3));
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A table of Words slots, each unknown_slot until set.
template <const char* Table, size_t Words, size_t... Index>
std::array<Slot, Words> unknown_table(std::index_sequence<Index...>) {
  return {table_size(Words), slot(unknown_slot<Table, Index + 1>)...};
}
template <const char* Table, size_t Words>
std::array<Slot, Words> unknown_table() {
  return unknown_table<Table, Words>(std::make_index_sequence<Words - 1>());
}

constexpr char kToolsContextName[] = "tools context";
constexpr char kToolsModuleName[] = "tools module";

constexpr size_t kToolsContextWords = 95;

std::array<Slot, kToolsContextWords> tools_context_table() {
  std::array<Slot, kToolsContextWords> table =
      unknown_table<kToolsContextName, kToolsContextWords>();
  table[3] = slot(tools_context_device);
  table[4] = slot(tools_context_id);
  table[39] = slot(tools_context_stream_id);
  table[51] = slot(tools_context_stream);
  return table;
}

// --- 6e163fbe-b958-444d-835c-e182aff1991e: tools module -----------------------------------------

// Slot 7: each function of a module, handed to a callback as (data, function, module); answers 1
// once every function was handed, as cuFFT requires (it asks for the table to have at least 8
// slots, calls slot 7 on each kernel module it loads to get its one kernel without its name, and
// refuses any other answer). A module with no function: CUDA_ERROR_NOT_FOUND. Read from cuFFT
// 12's calls and from a remote-CUDA project's answer to the same slot.
using ModuleFunctionVisitor = void (*)(void* data, CUfunction function, CUmodule module);

int tools_module_functions(CUcontext handle, CUmodule module_handle, ModuleFunctionVisitor visit,
                           void* data) {
  if (!visit) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUfunction> functions;
  {
    Driver& driver = Driver::get();
    std::lock_guard<std::mutex> lock(driver.mutex);
    if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
    auto* module = reinterpret_cast<Module*>(module_handle);
    if (!driver.modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
    if (handle && reinterpret_cast<Context*>(handle) != module->context) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    for (const auto& function : module->functions) {
      functions.push_back(reinterpret_cast<CUfunction>(function.get()));
    }
  }
  if (functions.empty()) return CUDA_ERROR_NOT_FOUND;
  for (CUfunction function : functions) visit(data, function, module_handle);  // lock released
  return 1;
}

constexpr size_t kToolsModuleWords = 8;

std::array<Slot, kToolsModuleWords> tools_module_table() {
  std::array<Slot, kToolsModuleWords> table = unknown_table<kToolsModuleName, kToolsModuleWords>();
  table[7] = slot(tools_module_functions);
  return table;
}

// --- 263e8860-7cd2-6143-92f6-bbd5006dfa7e: context checks ----------------------------------------

CUresult checks_context(CUcontext, uint32_t* flags, const void** extra) {
  if (flags) *flags = 0;
  if (extra) *extra = nullptr;
  return CUDA_SUCCESS;
}

uint32_t checks_slot3() {
  return 0;
}

// --- 0ca50b8c-1004-929a-89a7-d0df10e77286: context creation bypass -------------------------------

CUresult bypass_ctx_create(CUcontext* out, unsigned flags, CUdevice ordinal) {
  return cuCtxCreate_v2(out, flags, ordinal);
}

// --- d4082055-bde6-704b-8d34-ba123c66e1f2: the integrity check -----------------------------------

CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t* answer);

// --- The tables ----------------------------------------------------------------------------------

// Slots the simulator does not serve answer CUDA_ERROR_NOT_SUPPORTED and say so under
// SIMGPU_TRACE (unknown_slot), never a null a caller would jump to.
constexpr char kRuntimeInterfaceName[] = "runtime interface";
constexpr char kToolsCallbackHooksName[] = "tools callback hooks";
constexpr char kToolsThreadLocalName[] = "tools thread local";
constexpr char kContextLocalStorageName[] = "context local storage";
constexpr char kContextChecksName[] = "context checks";
constexpr char kIntegrityCheckName[] = "integrity check";

std::array<Slot, 13> runtime_interface_table() {
  std::array<Slot, 13> table = unknown_table<kRuntimeInterfaceName, 13>();
  table[1] = slot(runtime_get_module_from_cubin);
  table[2] = slot(runtime_primary_context);
  table[6] = slot(runtime_get_module_from_cubin_ext1);
  table[7] = slot(runtime_slot7);
  table[8] = slot(runtime_get_module_from_cubin_ext2);
  table[12] = slot(runtime_load_compilers);
  return table;
}
std::array<Slot, 7> tools_callback_hooks_table() {
  std::array<Slot, 7> table = unknown_table<kToolsCallbackHooksName, 7>();
  table[2] = slot(hooks_buffer1);
  table[6] = slot(hooks_buffer2);
  return table;
}
std::array<Slot, 4> tools_thread_local_table() {
  std::array<Slot, 4> table = unknown_table<kToolsThreadLocalName, 4>();
  table[2] = slot(tools_current_context);
  return table;
}
std::array<Slot, 4> context_checks_table() {
  std::array<Slot, 4> table = unknown_table<kContextChecksName, 4>();
  table[2] = slot(checks_context);
  table[3] = slot(checks_slot3);
  return table;
}
std::array<Slot, 3> integrity_check_table() {
  std::array<Slot, 3> table = unknown_table<kIntegrityCheckName, 3>();
  table[1] = slot(integrity_check);
  return table;
}

const std::array<Slot, 13> kRuntimeInterface = runtime_interface_table();
const std::array<Slot, 7> kToolsCallbackHooks = tools_callback_hooks_table();
const std::array<Slot, 4> kToolsThreadLocal = tools_thread_local_table();
// No size word: the storage table starts with its functions.
const Slot kContextLocalStorage[4] = {slot(storage_put), slot(storage_delete), slot(storage_get),
                                      slot(unknown_slot<kContextLocalStorageName, 3>)};
const std::array<Slot, 4> kContextChecks = context_checks_table();
const std::array<Slot, kToolsContextWords> kToolsContext = tools_context_table();
const std::array<Slot, kToolsModuleWords> kToolsModule = tools_module_table();
const Slot kContextCreateBypass[2] = {table_size(2), slot(bypass_ctx_create)};
const std::array<Slot, 3> kIntegrityCheck = integrity_check_table();

struct ServedTable {
  CUuuid id;
  const Slot* table;
  const char* name;
};

constexpr CUuuid uuid(std::initializer_list<unsigned> bytes) {
  CUuuid id{};
  size_t i = 0;
  for (unsigned byte : bytes) id.bytes[i++] = static_cast<char>(byte);
  return id;
}

const ServedTable kServed[] = {
    {uuid({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d,
           0xf9}),
     kRuntimeInterface.data(), "runtime interface"},
    {uuid({0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a,
           0x66}),
     kToolsCallbackHooks.data(), "tools callback hooks"},
    {uuid({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec,
           0xdc}),
     kToolsThreadLocal.data(), "tools thread-local storage"},
    {uuid({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95,
           0x93}),
     kContextLocalStorage, "context-local storage"},
    {uuid({0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa,
           0x7e}),
     kContextChecks.data(), "context checks"},
    {uuid({0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72,
           0x86}),
     kContextCreateBypass, "context creation bypass"},
    {uuid({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8,
           0xf2}),
     kToolsContext.data(), kToolsContextName},
    {uuid({0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99,
           0x1e}),
     kToolsModule.data(), kToolsModuleName},
    {uuid({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1,
           0xf2}),
     kIntegrityCheck.data(), "integrity check"},
};

void print_uuid(const CUuuid& id, char (&out)[37]) {
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  std::snprintf(out, sizeof out,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
}

CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t* answer) {
  if (!answer) return CUDA_ERROR_INVALID_VALUE;
  // The devices as the caller sees them: through the exported entry points, which an LD_PRELOAD
  // library may answer, as it answers the runtime.
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return r;
  std::vector<IntegrityDevice> devices(static_cast<size_t>(count));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    IntegrityDevice& device = devices[static_cast<size_t>(ordinal)];
    CUuuid id;
    if (CUresult r = cuDeviceGetUuid_v2(&id, ordinal); r != CUDA_SUCCESS) return r;
    std::memcpy(device.uuid, id.bytes, sizeof device.uuid);
    int domain = 0, bus = 0, slot_id = 0;
    cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, ordinal);
    cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, ordinal);
    cuDeviceGetAttribute(&slot_id, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, ordinal);
    device.pci_domain = domain;
    device.pci_bus = bus;
    device.pci_device = slot_id;
  }
  IntegrityInputs inputs;
  inputs.runtime_version = version;
  inputs.unix_seconds = unix_seconds;
  inputs.driver_version = static_cast<uint32_t>(driver_version());
  inputs.process_id = static_cast<uint32_t>(simgpu::current_pid());
  inputs.thread_id = static_cast<uint32_t>(pthread_self());
  inputs.runtime_table = kRuntimeInterface.data();
  inputs.integrity_table = kIntegrityCheck.data();
  inputs.check_function = kIntegrityCheck[1];
  inputs.devices = devices;
  const std::array<uint64_t, 2> result = integrity_answer(inputs);
  answer[0] = result[0];
  answer[1] = result[1];
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  for (const ServedTable& served : kServed) {
    if (std::memcmp(served.id.bytes, id->bytes, sizeof id->bytes) == 0) {
      *table = served.table;
      if (trace_enabled()) std::fprintf(stderr, "simgpu: export table %s served\n", served.name);
      return CUDA_SUCCESS;
    }
  }
  if (trace_enabled()) {
    char text[37];
    print_uuid(*id, text);
    std::fprintf(stderr, "simgpu: export table %s not served\n", text);
  }
  // Also the answer to f8cff951-2146-8b4e-b9e2-fb469e7c0dd9, which CUDA 13's runtime asks first
  // and must not get: it takes any table there as a different bootstrap.
  return CUDA_ERROR_NOT_FOUND;
}
