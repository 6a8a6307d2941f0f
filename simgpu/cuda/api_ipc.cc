// CUDA IPC: device memory and events one process exports and another process of the same
// simulated machine opens (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle,
// cuIpcGetEventHandle / cuIpcOpenEventHandle). docs/simulator.md ("IPC") explains the choices.
//
// A handle names an entry of the shared state's export table (SharedState::ipc_exports) and
// repeats what that entry holds: the exporter's pid, process start time and slot, the base address,
// size and device, and a random nonce. An open is refused unless the entry still holds exactly
// that (the exporter has not freed the allocation) and the exporter is alive. The opener maps the
// memory at an address of its own and is charged nothing: the exporter's allocation is counted
// once, as on a real GPU.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/process_id.h"
#include "driver.h"

using namespace simgpu::driver;

namespace {

constexpr uint32_t kHandleMagic = 0x4350'4953;  // "SIPC"
constexpr uint32_t kKindMemory = 1;
constexpr uint32_t kKindEvent = 2;

// The 64 bytes of a CUipcMemHandle / CUipcEventHandle.
struct HandleBody {
  uint32_t magic;
  uint32_t kind;
  uint32_t entry;
  int32_t pid;
  uint64_t start_time;
  uint64_t base;
  uint64_t size;
  uint64_t nonce;
  uint32_t device;
  int32_t slot;
  uint64_t check;  // of the bytes above: a corrupted handle is refused before any lookup
};
static_assert(sizeof(HandleBody) == CU_IPC_HANDLE_SIZE);
static_assert(sizeof(CUipcMemHandle) == CU_IPC_HANDLE_SIZE);
static_assert(sizeof(CUipcEventHandle) == CU_IPC_HANDLE_SIZE);

uint64_t checksum(const HandleBody& body) {
  uint64_t hash = 0xcbf2'9ce4'8422'2325ull;  // FNV-1a
  const auto* bytes = reinterpret_cast<const unsigned char*>(&body);
  for (size_t i = 0; i < offsetof(HandleBody, check); ++i) {
    hash = (hash ^ bytes[i]) * 0x100'0000'01b3ull;
  }
  return hash;
}

uint64_t random_nonce() {
  uint64_t nonce = 0;
  while (nonce == 0) {
    if (getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
      nonce = simgpu::now_ns() * 0x9e37'79b9'7f4a'7c15ull ^ static_cast<uint64_t>(getpid());
    }
  }
  return nonce;
}

// Call with the simulator lock held.
bool entry_matches(const simgpu::SharedState& state, const HandleBody& body) {
  if (body.entry >= static_cast<uint32_t>(simgpu::kMaxIpcExports)) return false;
  if (body.slot < 0 || body.slot >= simgpu::kMaxProcesses) return false;
  const simgpu::IpcExport& entry = state.ipc_exports[body.entry];
  const simgpu::ProcessSlot& owner = state.processes[body.slot];
  return body.nonce != 0 && entry.nonce == body.nonce && entry.kind == body.kind &&
         entry.pid == body.pid && entry.slot == body.slot && entry.start_time == body.start_time &&
         entry.base == body.base && entry.size == body.size && entry.device == body.device &&
         owner.pid == body.pid && owner.start_time == body.start_time;
}

// The handle's entry is live: exported, not revoked, its exporter still running.
bool handle_live(Driver& driver, const HandleBody& body) {
  {
    simgpu::Simulator::LockGuard guard(*driver.sim);
    if (!entry_matches(*driver.sim->state(), body)) return false;
  }
  return simgpu::process_alive(body.pid, body.start_time);
}

// Writes a new export entry and the handle naming it. Call with the driver mutex held.
CUresult export_object(Driver& driver, uint32_t kind, uint64_t base, uint64_t size, int device,
                       std::shared_ptr<IpcExportRecord>& record) {
  if (record) return CUDA_SUCCESS;  // exported before: the same handle again
  HandleBody body{};
  body.magic = kHandleMagic;
  body.kind = kind;
  body.pid = simgpu::current_pid();
  body.slot = driver.sim->slot();
  body.base = base;
  body.size = size;
  body.device = static_cast<uint32_t>(device);
  body.nonce = random_nonce();
  int found = -1;
  {
    simgpu::Simulator::LockGuard guard(*driver.sim);
    simgpu::SharedState& state = *driver.sim->state();
    body.start_time = state.processes[body.slot].start_time;
    for (int i = 0; i < simgpu::kMaxIpcExports && found < 0; ++i) {
      if (state.ipc_exports[i].nonce == 0) found = i;
    }
    if (found < 0) {  // entries of exporters that died without clearing theirs
      for (int i = 0; i < simgpu::kMaxIpcExports && found < 0; ++i) {
        const simgpu::IpcExport& entry = state.ipc_exports[i];
        const simgpu::ProcessSlot& owner = state.processes[entry.slot];
        if (owner.pid != entry.pid || owner.start_time != entry.start_time) found = i;
      }
    }
    if (found < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    body.entry = static_cast<uint32_t>(found);
    simgpu::IpcExport& entry = state.ipc_exports[found];
    entry.nonce = body.nonce;
    entry.pid = body.pid;
    entry.slot = body.slot;
    entry.start_time = body.start_time;
    entry.base = body.base;
    entry.size = body.size;
    entry.device = body.device;
    entry.kind = body.kind;
  }
  body.check = checksum(body);
  record = std::make_shared<IpcExportRecord>();
  record->entry = found;
  record->nonce = body.nonce;
  std::memcpy(record->handle, &body, sizeof body);
  return CUDA_SUCCESS;
}

// Reads a handle another process gave: INVALID_VALUE if it is not one, INVALID_CONTEXT if this
// process exported it (the real driver refuses to open one's own handle), INVALID_VALUE if it is
// stale (freed, or its exporter gone) or forged.
CUresult read_handle(Driver& driver, const void* bytes, uint32_t kind, HandleBody& body) {
  std::memcpy(&body, bytes, sizeof body);
  if (body.magic != kHandleMagic || body.kind != kind || body.check != checksum(body)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (body.pid == simgpu::current_pid() && body.slot == driver.sim->slot()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return handle_live(driver, body) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// What this process opened, by handle (entry, nonce): one mapping per handle, refcounted.
struct OpenMapping {
  CUdeviceptr address = 0;
  int references = 0;
  HandleBody body{};
};
std::map<std::pair<uint32_t, uint64_t>, OpenMapping>& open_mappings() {
  static auto* mappings = new std::map<std::pair<uint32_t, uint64_t>, OpenMapping>();
  return *mappings;
}

// The opened allocation at `address`, if it is still there (its context may have gone).
Allocation* opened_allocation(Driver& driver, CUdeviceptr address) {
  auto it = driver.allocations.find(address);
  if (it == driver.allocations.end() || it->second.kind != AllocationKind::kIpc) return nullptr;
  return &it->second;
}

}  // namespace

namespace simgpu::driver {

IpcExportRecord::~IpcExportRecord() {
  if (entry < 0) return;
  Simulator* sim = Simulator::get();
  if (!sim) return;
  Simulator::LockGuard guard(*sim);
  IpcExport& shared = sim->state()->ipc_exports[entry];
  if (shared.nonce == nonce) std::memset(&shared, 0, sizeof shared);
}

void sweep_revoked_ipc_mappings(Driver& driver) {
  for (auto& [key, mapping] : open_mappings()) {
    if (!mapping.address) continue;
    if (!opened_allocation(driver, mapping.address) || !handle_live(driver, mapping.body)) {
      if (opened_allocation(driver, mapping.address)) driver.allocations.erase(mapping.address);
      mapping.address = 0;  // revoked: only cuIpcCloseMemHandle is left to do
    }
  }
}

}  // namespace simgpu::driver

SIMGPU_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  CUdeviceptr base = 0;
  Allocation* allocation = find_allocation(driver, ptr, 1, &base);
  // cuMemAlloc / cuMemAllocPitch memory only (pool memory is shared with cuMemPoolExportPointer,
  // managed memory not at all); a pointer inside an allocation exports the whole of it.
  if (!allocation ||
      (allocation->kind != AllocationKind::kDevice && allocation->kind != AllocationKind::kPitch)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = export_object(driver, kKindMemory, base, allocation->size, allocation->device,
                                 allocation->ipc_export);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::memcpy(handle->reserved, allocation->ipc_export->handle, sizeof handle->reserved);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle handle,
                                             unsigned int flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  sweep_revoked_ipc_mappings(driver);
  HandleBody body{};
  if (CUresult r = read_handle(driver, handle.reserved, kKindMemory, body); r != CUDA_SUCCESS) {
    return r;
  }
  if (body.device >= static_cast<uint32_t>(driver.sim->device_count()) ||
      driver.ordinal_of_device(static_cast<int>(body.device)) < 0) {
    return CUDA_ERROR_INVALID_DEVICE;  // on a GPU this process cannot see
  }
  OpenMapping& mapping = open_mappings()[{body.entry, body.nonce}];
  if (mapping.address && opened_allocation(driver, mapping.address)) {
    ++mapping.references;
    *out = mapping.address;
    return CUDA_SUCCESS;
  }
  // Mapped at an address of this process, charged to nobody here: the exporter holds it.
  const CUdeviceptr address = driver.take_address_range(body.size, kPageBytes);
  Allocation allocation;
  allocation.size = body.size;
  allocation.charged = 0;
  allocation.device = static_cast<int>(body.device);
  allocation.kind = AllocationKind::kIpc;
  allocation.context = context;
  driver.allocations.emplace(address, allocation);
  mapping.address = address;
  mapping.references = 1;
  mapping.body = body;
  *out = address;
  return CUDA_SUCCESS;
}

#undef cuIpcOpenMemHandle
SIMGPU_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* out, CUipcMemHandle handle,
                                          unsigned int flags) {
  return cuIpcOpenMemHandle_v2(out, handle, flags);
}

SIMGPU_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  sweep_revoked_ipc_mappings(driver);
  auto& mappings = open_mappings();
  for (auto it = mappings.begin(); it != mappings.end(); ++it) {
    OpenMapping& mapping = it->second;
    // A revoked mapping (address 0) cannot be named any more; its handle's next open fails.
    if (mapping.address != ptr || ptr == 0) continue;
    if (--mapping.references > 0) return CUDA_SUCCESS;
    if (opened_allocation(driver, ptr)) driver.allocations.erase(ptr);
    mappings.erase(it);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event_handle) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<Event*>(event_handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  // cuEventCreate allows CU_EVENT_INTERPROCESS only together with CU_EVENT_DISABLE_TIMING.
  if (!(event->flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = export_object(driver, kKindEvent, reinterpret_cast<uint64_t>(event), 0,
                                 event->context ? event->context->device : 0, event->ipc_export);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::memcpy(handle->reserved, event->ipc_export->handle, sizeof handle->reserved);
  return CUDA_SUCCESS;
}

// A new event of this process, as the real driver returns one per open. Cross-process ordering is
// not modelled: the opened event has no record of its own and queries as complete.
SIMGPU_EXPORT CUresult cuIpcOpenEventHandle(CUevent* out, CUipcEventHandle handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  HandleBody body{};
  if (CUresult r = read_handle(driver, handle.reserved, kKindEvent, body); r != CUDA_SUCCESS) {
    return r;
  }
  auto* event = new Event();
  event->context = context;
  event->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  driver.events.insert(event);
  *out = reinterpret_cast<CUevent>(event);
  return CUDA_SUCCESS;
}
