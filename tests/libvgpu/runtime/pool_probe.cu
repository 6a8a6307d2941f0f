// Stream-ordered allocation through the CUDA runtime, as a program that mixes the device's default
// pool with a pool of its own uses it (RAPIDS' async memory resource creates one): cudaMallocAsync
// fills the GPU (or the share) from the default pool, cudaFreeAsync gives it all back to the pool,
// the pool releases it to the device (a synchronisation with the release threshold at 0, or
// cudaMemPoolTrimTo), and a pool made with cudaMemPoolCreate then fills what is free. Prints one
// JSON line; check_pools.py runs it bare and under shares.
//
//   pool_probe <release> <chunk bytes> [hold]
//       release: stream, event or device (cudaStreamSynchronize, cudaEventSynchronize,
//       cudaDeviceSynchronize, the default pool's release threshold at its default 0), or trim
//       (the threshold at UINT64_MAX, so a synchronisation keeps the memory, then
//       cudaMemPoolTrimTo(0)). hold: only the default pool's part, without a cudaMemGetInfo after
//       the fill (so only the synchronisation or the trim can have settled the share's charge),
//       then the report, then waits until stdin closes (a second process of the share fills
//       beside it).
//   pool_probe created <chunk bytes>
//       only the created pool's fill (the second process)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const char* what, cudaError_t error) {
  std::printf("{\"error\":\"%s: %s\"}\n", what, cudaGetErrorName(error));
  return 1;
}

size_t free_memory() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return SIZE_MAX;
  return free_bytes;
}

uint64_t reserved_of(cudaMemPool_t pool) {
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess) {
    return UINT64_MAX;
  }
  return reserved;
}

// Allocates `chunk` bytes at a time from `pool` (the default pool when null) until the runtime
// refuses; returns what was obtained and the refusal.
size_t fill(cudaMemPool_t pool, size_t chunk, cudaStream_t stream, std::vector<void*>* chunks,
            cudaError_t* refusal) {
  size_t obtained = 0;
  for (;;) {
    void* pointer = nullptr;
    *refusal = pool ? cudaMallocFromPoolAsync(&pointer, chunk, pool, stream)
                    : cudaMallocAsync(&pointer, chunk, stream);
    if (*refusal != cudaSuccess) break;
    chunks->push_back(pointer);
    obtained += chunk;
  }
  cudaGetLastError();  // the refusal is not sticky
  return obtained;
}

// The default pool's part: fill, free, release. Appends its JSON fields to `report`; `observe`:
// with cudaMemGetInfo after each step (else those fields are left out).
int default_pool(const std::string& release, size_t chunk, cudaStream_t stream, bool observe,
                 std::string* report) {
  cudaMemPool_t pool;
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, 0); e) {
    return fail("cudaDeviceGetDefaultMemPool", e);
  }
  uint64_t threshold = release == "trim" ? UINT64_MAX : 0;
  if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      e) {
    return fail("cudaMemPoolSetAttribute", e);
  }
  const size_t free_before = free_memory();
  std::vector<void*> chunks;
  cudaError_t refusal = cudaSuccess;
  const size_t obtained = fill(nullptr, chunk, stream, &chunks, &refusal);
  const size_t free_full = observe ? free_memory() : 0;
  for (void* pointer : chunks) {
    if (cudaError_t e = cudaFreeAsync(pointer, stream); e) return fail("cudaFreeAsync", e);
  }
  // Freed into the pool: the pool still holds it until it is released.
  const size_t free_freed = observe ? free_memory() : 0;
  cudaError_t synchronized = cudaSuccess;
  if (release == "event") {
    cudaEvent_t event;
    if (cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); e) {
      return fail("cudaEventCreateWithFlags", e);
    }
    if (cudaError_t e = cudaEventRecord(event, stream); e) return fail("cudaEventRecord", e);
    synchronized = cudaEventSynchronize(event);
  } else if (release == "device") {
    synchronized = cudaDeviceSynchronize();
  } else {
    synchronized = cudaStreamSynchronize(stream);
  }
  const size_t free_synchronized = observe ? free_memory() : 0;
  const uint64_t reserved_synchronized = reserved_of(pool);
  cudaError_t trimmed = cudaSuccess;
  if (release == "trim") trimmed = cudaMemPoolTrimTo(pool, 0);
  const size_t free_released = observe ? free_memory() : 0;
  char fields[640];
  std::snprintf(fields, sizeof fields,
                "\"release\":\"%s\",\"free_before\":%zu,\"default_obtained\":%zu,"
                "\"default_refusal\":\"%s\",\"synchronize\":\"%s\","
                "\"reserved_synchronized\":%llu,\"trim\":\"%s\",\"reserved_released\":%llu",
                release.c_str(), free_before, obtained, cudaGetErrorName(refusal),
                cudaGetErrorName(synchronized),
                static_cast<unsigned long long>(reserved_synchronized), cudaGetErrorName(trimmed),
                static_cast<unsigned long long>(reserved_of(pool)));
  *report += fields;
  if (observe) {
    std::snprintf(fields, sizeof fields,
                  ",\"free_full\":%zu,\"free_freed\":%zu,\"free_synchronized\":%zu,"
                  "\"free_released\":%zu",
                  free_full, free_freed, free_synchronized, free_released);
    *report += fields;
  }
  return 0;
}

// A pool of the program's own fills what is free. Appends its JSON fields to `report`.
int created_pool(size_t chunk, cudaStream_t stream, std::string* report) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  if (cudaError_t e = cudaMemPoolCreate(&pool, &props); e) return fail("cudaMemPoolCreate", e);
  const size_t free_before = free_memory();
  std::vector<void*> chunks;
  cudaError_t refusal = cudaSuccess;
  const size_t obtained = fill(pool, chunk, stream, &chunks, &refusal);
  for (void* pointer : chunks) cudaFreeAsync(pointer, stream);
  const cudaError_t synchronized = cudaStreamSynchronize(stream);
  const cudaError_t destroyed = cudaMemPoolDestroy(pool);
  char fields[320];
  std::snprintf(fields, sizeof fields,
                "\"created_free_before\":%zu,\"created_obtained\":%zu,\"created_refusal\":\"%s\","
                "\"created_synchronize\":\"%s\",\"created_destroy\":\"%s\",\"free_end\":%zu",
                free_before, obtained, cudaGetErrorName(refusal), cudaGetErrorName(synchronized),
                cudaGetErrorName(destroyed), free_memory());
  *report += fields;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: pool_probe stream|event|device|trim <chunk> [hold] | "
                 "pool_probe created <chunk>\n");
    return 2;
  }
  const std::string mode = argv[1];
  const size_t chunk = std::strtoull(argv[2], nullptr, 10);
  const bool hold = argc > 3 && std::strcmp(argv[3], "hold") == 0;
  if (cudaError_t e = cudaFree(nullptr); e) return fail("cudaFree(0)", e);
  size_t free_bytes = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total); e) return fail("cudaMemGetInfo", e);
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e) {
    return fail("cudaStreamCreateWithFlags", e);
  }
  std::string report = "{\"total\":" + std::to_string(total) + ",";
  if (mode == "created") {
    if (int status = created_pool(chunk, stream, &report); status) return status;
  } else {
    if (int status = default_pool(mode, chunk, stream, !hold, &report); status) return status;
    if (!hold) {
      report += ",";
      if (int status = created_pool(chunk, stream, &report); status) return status;
    }
  }
  std::printf("%s}\n", report.c_str());
  std::fflush(stdout);
  if (hold) {
    char buffer[64];
    while (std::fgets(buffer, sizeof buffer, stdin)) {
    }
  }
  return 0;
}
