// A program written for the CUDA runtime API, as tenants write them, that prints what the runtime
// shows it as one JSON line: the GPU (count, totalGlobalMem, cudaMemGetInfo) or how much cudaMalloc
// obtained before the runtime refused. Built by nvcc against the static and the shared runtime
// and with --default-stream per-thread; check_runtime.py runs it bare and under shares.
//
//   runtime_probe query
//   runtime_probe fill <chunk bytes> [<max bytes> [hold]]
//       stops at the runtime's refusal or at max (0: no max); hold: after the report, keeps the
//       memory until stdin closes (a second process of the share fills beside it)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

__global__ void touch(float* data) {
  data[threadIdx.x] = 1.0f;
}

int query() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    std::printf("{\"error\":\"%s\"}\n", cudaGetErrorName(error));
    return 1;
  }
  cudaDeviceProp properties{};
  error = cudaGetDeviceProperties(&properties, 0);
  size_t free_bytes = 0, total_bytes = 0;
  if (error == cudaSuccess) error = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (error != cudaSuccess) {
    std::printf("{\"error\":\"%s\"}\n", cudaGetErrorName(error));
    return 1;
  }
  std::printf(
      "{\"device_count\":%d,\"name\":\"%s\",\"total_global_mem\":%zu,\"free\":%zu,"
      "\"total\":%zu,\"runtime_version\":%d}\n",
      count, properties.name, properties.totalGlobalMem, free_bytes, total_bytes, CUDART_VERSION);
  return 0;
}

int fill(size_t chunk, size_t max, bool hold) {
  std::vector<void*> chunks;
  size_t obtained = 0;
  cudaError_t refusal = cudaSuccess;
  while (max == 0 || obtained + chunk <= max) {
    void* pointer = nullptr;
    refusal = cudaMalloc(&pointer, chunk);
    if (refusal != cudaSuccess) break;
    chunks.push_back(pointer);
    obtained += chunk;
  }
  // A launch after the refusal proves the context still works (the error was not sticky).
  cudaGetLastError();
  cudaError_t launch = cudaSuccess;
  if (!chunks.empty()) {
    touch<<<1, 32>>>(static_cast<float*>(chunks.front()));
    launch = cudaDeviceSynchronize();
  }
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  std::printf(
      "{\"obtained\":%zu,\"chunks\":%zu,\"refusal\":\"%s\",\"launch\":\"%s\",\"free\":%zu,"
      "\"total\":%zu}\n",
      obtained, chunks.size(), cudaGetErrorName(refusal), cudaGetErrorName(launch), free_bytes,
      total_bytes);
  std::fflush(stdout);
  if (hold) {
    while (std::getchar() != EOF) {
    }
  }
  for (void* pointer : chunks) {
    if (cudaFree(pointer) != cudaSuccess) return 1;
  }
  const bool stopped_as_asked = max ? refusal == cudaSuccess : refusal == cudaErrorMemoryAllocation;
  return stopped_as_asked && launch == cudaSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "query") == 0) return query();
  if (argc >= 3 && std::strcmp(argv[1], "fill") == 0) {
    char* end = nullptr;
    const unsigned long long chunk = std::strtoull(argv[2], &end, 10);
    if (*end || chunk == 0) {
      std::fprintf(stderr, "runtime_probe: chunk %s is not a positive byte count\n", argv[2]);
      return 2;
    }
    unsigned long long max = 0;
    if (argc >= 4) {
      max = std::strtoull(argv[3], &end, 10);
      if (*end) {
        std::fprintf(stderr, "runtime_probe: max %s is not a byte count\n", argv[3]);
        return 2;
      }
    }
    return fill(chunk, max, argc >= 5 && std::strcmp(argv[4], "hold") == 0);
  }
  std::fprintf(stderr, "usage: runtime_probe query | fill <chunk bytes> [<max bytes> [hold]]\n");
  return 2;
}
