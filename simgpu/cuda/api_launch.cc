// Streams, events and kernel launches. A launch is asynchronous: it queues the kernel's simulated
// time on the device's engine and returns; synchronisation waits in wall-clock time.
#include <algorithm>

#include "driver.h"

using namespace simgpu::driver;

namespace {

struct LaunchShape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
};

CUresult launch(CUfunction handle, const LaunchShape& shape, CUstream stream_handle,
                bool cooperative) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  Function* function = resolve_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t threads = uint64_t{shape.block[0]} * shape.block[1] * shape.block[2];
  if (threads == 0 || threads > kMaxThreadsPerBlock || shape.block[2] > 64) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shape.grid[0] == 0 || shape.grid[1] == 0 || shape.grid[2] == 0 || shape.grid[1] > 65535 ||
      shape.grid[2] > 65535 || shape.grid[0] > 2147483647u) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shape.shared_bytes > static_cast<unsigned>(std::max(function->max_dynamic_shared, 49152))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Stream* stream = resolve_stream(driver, stream_handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (function->module->context->device != stream->context->device) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (stream->capture) {
    KernelLaunch captured;
    captured.function = function;
    std::copy(std::begin(shape.grid), std::end(shape.grid), captured.grid);
    std::copy(std::begin(shape.block), std::end(shape.block), captured.block);
    captured.shared_bytes = shape.shared_bytes;
    stream->capture->kernels.push_back(captured);
    return CUDA_SUCCESS;
  }
  if (cooperative) {
    const uint64_t blocks = uint64_t{shape.grid[0]} * shape.grid[1] * shape.grid[2];
    const uint64_t co_resident =
        uint64_t{driver.device_config(stream->context->device).sm_count} *
        resident_blocks_per_sm(static_cast<unsigned>(threads), shape.shared_bytes);
    if (blocks > co_resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  const uint64_t duration =
      kernel_duration_ns(driver, *function, shape.grid, shape.block, shape.shared_bytes);
  enqueue_work(driver, *stream, duration, lock);
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction function) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (!config->attrs) return CUDA_ERROR_INVALID_VALUE;
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE &&
        config->attrs[i].value.cooperative) {
      cooperative = true;
    }
  }
  const LaunchShape shape{{config->gridDimX, config->gridDimY, config->gridDimZ},
                          {config->blockDimX, config->blockDimY, config->blockDimZ},
                          config->sharedMemBytes};
  return launch(function, shape, config->hStream, cooperative);
}

CUresult stream_synchronize(CUstream handle) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  synchronize_to(driver, stream->context->device, stream->last_mark, lock);
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  return driver.sim->done(stream->context->device) >= stream->last_mark ? CUDA_SUCCESS
                                                                        : CUDA_ERROR_NOT_READY;
}

// Every stream of a process shares one engine timeline, so cross-stream waits hold by construction.
CUresult stream_wait_event(CUstream handle, CUevent event_handle, unsigned flags) {
  (void)flags;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  auto* event = reinterpret_cast<Event*>(event_handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  stream->last_mark = std::max(stream->last_mark, event->mark);
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent event_handle, CUstream stream_handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<Event*>(event_handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  Stream* stream = resolve_stream(driver, stream_handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->context != event->context) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_SUCCESS;  // becomes a node of the captured graph
  event->recorded = true;
  event->mark = stream->last_mark;
  event->record_ns = simgpu::now_ns();
  event->completed_ns = 0;
  return CUDA_SUCCESS;
}

// Wall time at which the event completed, or 0 if it has not.
uint64_t event_completion(Driver& driver, Event& event) {
  if (event.completed_ns) return event.completed_ns;
  const int device = event.context->device;
  const uint64_t reached = driver.sim->completion_time(device, event.mark);
  if (reached == 0 && event.mark > 0) return 0;
  event.completed_ns = std::max(event.record_ns, reached);
  return event.completed_ns;
}

CUresult launch_host_function(CUstream handle, CUhostFn function, void* data) {
  if (!function) return CUDA_ERROR_INVALID_VALUE;
  {
    Driver& driver = Driver::get();
    std::unique_lock<std::mutex> lock(driver.mutex);
    if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
    Stream* stream = resolve_stream(driver, handle);
    if (!stream) return CUDA_ERROR_INVALID_HANDLE;
    // Runs once the stream's earlier work has finished (on the calling thread: stream order holds,
    // only the call itself is synchronous). Not a synchronisation of the program's: the pools keep
    // their memory (the real driver trims them only at stream, event and context synchronisation).
    const int device = stream->context->device;
    const uint64_t mark = stream->last_mark;
    lock.unlock();
    driver.sim->wait_for(device, mark);
  }
  function(data);
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                      CUstream stream, void** params, void** extra) {
  (void)params, (void)extra;
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, stream, false);
}
SIMGPU_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                           CUstream stream, void** params, void** extra) {
  (void)params, (void)extra;
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, stream, false);
}
SIMGPU_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                                 unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                                 unsigned shared, CUstream stream, void** params) {
  (void)params;
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, stream, true);
}
SIMGPU_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                      unsigned gz, unsigned bx, unsigned by,
                                                      unsigned bz, unsigned shared, CUstream stream,
                                                      void** params) {
  (void)params;
  return launch(f, {{gx, gy, gz}, {bx, by, bz}, shared}, stream, true);
}
SIMGPU_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                        void** extra) {
  (void)params, (void)extra;
  return launch_ex(config, f);
}
SIMGPU_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                             void** params, void** extra) {
  (void)params, (void)extra;
  return launch_ex(config, f);
}

SIMGPU_EXPORT CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  auto* stream = new Stream();
  stream->context = context;
  stream->flags = flags;
  stream->priority = std::clamp(priority, -5, 0);
  driver.streams.insert(stream);
  *out = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  return cuStreamCreateWithPriority(out, flags, 0);
}
SIMGPU_EXPORT CUresult cuStreamDestroy_v2(CUstream handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* stream = reinterpret_cast<Stream*>(handle);
  if (!driver.streams.count(stream)) return CUDA_ERROR_INVALID_HANDLE;
  driver.streams.erase(stream);  // queued work still completes, as on a real device
  delete stream;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  return stream_synchronize(stream);
}
SIMGPU_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  return stream_synchronize(stream);
}
SIMGPU_EXPORT CUresult cuStreamQuery(CUstream stream) {
  return stream_query(stream);
}
SIMGPU_EXPORT CUresult cuStreamQuery_ptsz(CUstream stream) {
  return stream_query(stream);
}
SIMGPU_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return stream_wait_event(stream, event, flags);
}
SIMGPU_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return stream_wait_event(stream, event, flags);
}
SIMGPU_EXPORT CUresult cuStreamGetPriority(CUstream handle, int* priority) {
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *priority = stream->priority;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamGetFlags(CUstream handle, unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *flags = stream->flags;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream handle, int* priority) {
  return cuStreamGetPriority(handle, priority);
}
SIMGPU_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream handle, unsigned int* flags) {
  return cuStreamGetFlags(handle, flags);
}
// A context's default streams (legacy and per-thread) have ids of their own, distinct from every
// created stream's.
SIMGPU_EXPORT CUresult cuStreamGetId(CUstream handle, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *id = stream_id(*stream);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamGetId_ptsz(CUstream handle, unsigned long long* id) {
  return cuStreamGetId(handle, id);
}
SIMGPU_EXPORT CUresult cuStreamGetDevice(CUstream handle, CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *device = driver.ordinal_of_device(stream->context->device);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream handle, CUdevice* device) {
  return cuStreamGetDevice(handle, device);
}
SIMGPU_EXPORT CUresult cuStreamGetCtx(CUstream handle, CUcontext* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *out = reinterpret_cast<CUcontext>(stream->context);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* data) {
  return launch_host_function(stream, fn, data);
}
SIMGPU_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream stream, CUhostFn fn, void* data) {
  return launch_host_function(stream, fn, data);
}

SIMGPU_EXPORT CUresult cuEventCreate(CUevent* out, unsigned int flags) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* event = new Event();
  event->context = context;
  event->flags = flags;
  driver.events.insert(event);
  *out = reinterpret_cast<CUevent>(event);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuEventDestroy_v2(CUevent handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<Event*>(handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  driver.events.erase(event);
  delete event;
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  return event_record(event, stream);
}
SIMGPU_EXPORT CUresult cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return event_record(event, stream);
}
SIMGPU_EXPORT CUresult cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  return event_record(event, stream);
}
SIMGPU_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream,
                                                   unsigned int flags) {
  return cuEventRecordWithFlags(event, stream, flags);
}
SIMGPU_EXPORT CUresult cuEventQuery(CUevent handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<Event*>(handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (!event->recorded) return CUDA_SUCCESS;
  return driver.sim->done(event->context->device) >= event->mark ? CUDA_SUCCESS
                                                                 : CUDA_ERROR_NOT_READY;
}
SIMGPU_EXPORT CUresult cuEventSynchronize(CUevent handle) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<Event*>(handle);
  if (!driver.events.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (!event->recorded) return CUDA_SUCCESS;
  synchronize_to(driver, event->context->device, event->mark, lock);
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuEventElapsedTime_v2(float* milliseconds, CUevent start_handle,
                                             CUevent end_handle) {
  if (!milliseconds) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* start = reinterpret_cast<Event*>(start_handle);
  auto* end = reinterpret_cast<Event*>(end_handle);
  if (!driver.events.count(start) || !driver.events.count(end)) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t t0 = event_completion(driver, *start);
  const uint64_t t1 = event_completion(driver, *end);
  if (t0 == 0 || t1 == 0) return CUDA_ERROR_NOT_READY;
  *milliseconds = static_cast<float>((static_cast<double>(t1) - static_cast<double>(t0)) / 1e6);
  return CUDA_SUCCESS;
}
