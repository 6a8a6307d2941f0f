// CUDA IPC through the runtime API across two processes, as tenants use it (one process allocates,
// another maps it): the exporter cudaMallocs, exports the allocation and an interprocess event,
// and starts a copy of itself (fork + exec, so it is a CUDA process of its own, in the same share
// under `tessera run`) that reads the handles from its stdin, opens them and then fills what is
// left of the GPU. One JSON line; check_ipc.py runs it bare and under a share.
//
//   ipc_probe <bytes> <chunk bytes>    the exporter (starts the opener)
//   ipc_probe open <chunk bytes>       the opener (reads two hex handles from stdin)
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string to_hex(const void* data, size_t size) {
  std::string hex;
  char byte[3];
  for (size_t i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<const unsigned char*>(data)[i]);
    hex += byte;
  }
  return hex;
}

bool from_hex(const char* hex, void* data, size_t size) {
  if (std::strlen(hex) < 2 * size) return false;
  for (size_t i = 0; i < size; ++i) {
    unsigned value = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &value) != 1) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(value);
  }
  return true;
}

int fail(const char* what, cudaError_t error) {
  std::printf("{\"error\":\"%s: %s\"}\n", what, cudaGetErrorName(error));
  return 1;
}

int open_side(size_t chunk) {
  char line[512];
  cudaIpcMemHandle_t memory_handle;
  cudaIpcEventHandle_t event_handle;
  if (!std::fgets(line, sizeof line, stdin) ||
      !from_hex(line, &memory_handle, sizeof memory_handle))
    return fail("reading the memory handle", cudaErrorInvalidValue);
  if (!std::fgets(line, sizeof line, stdin) || !from_hex(line, &event_handle, sizeof event_handle))
    return fail("reading the event handle", cudaErrorInvalidValue);
  size_t free_before = 0, free_after = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_before, &total); e) return fail("cudaMemGetInfo", e);
  void* opened = nullptr;
  void* again = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&opened, memory_handle, cudaIpcMemLazyEnablePeerAccess);
      e)
    return fail("cudaIpcOpenMemHandle", e);
  if (cudaError_t e = cudaIpcOpenMemHandle(&again, memory_handle, cudaIpcMemLazyEnablePeerAccess);
      e)
    return fail("cudaIpcOpenMemHandle (again)", e);
  if (cudaError_t e = cudaMemGetInfo(&free_after, &total); e) return fail("cudaMemGetInfo", e);
  const cudaError_t memset = cudaMemset(opened, 1, chunk);
  cudaEvent_t event;
  if (cudaError_t e = cudaIpcOpenEventHandle(&event, event_handle); e)
    return fail("cudaIpcOpenEventHandle", e);
  const cudaError_t synchronize = cudaEventSynchronize(event);
  // What is left of the GPU (or the share) with the mapping open: the opened memory is not charged
  // here, so the fill stops where the exporter's allocation and both contexts leave off.
  std::vector<void*> chunks;
  size_t obtained = 0;
  cudaError_t refusal = cudaSuccess;
  for (;;) {
    void* pointer = nullptr;
    refusal = cudaMalloc(&pointer, chunk);
    if (refusal != cudaSuccess) break;
    chunks.push_back(pointer);
    obtained += chunk;
  }
  cudaGetLastError();
  for (void* pointer : chunks) cudaFree(pointer);
  const cudaError_t close = cudaIpcCloseMemHandle(opened);
  const cudaError_t close_again = cudaIpcCloseMemHandle(again);
  const cudaError_t close_extra = cudaIpcCloseMemHandle(opened);
  cudaGetLastError();
  std::printf(
      "{\"free_before\":%zu,\"free_after\":%zu,\"total\":%zu,\"same_pointer\":%s,"
      "\"memset\":\"%s\",\"event_synchronize\":\"%s\",\"obtained\":%zu,\"refusal\":\"%s\","
      "\"close\":\"%s\",\"close_again\":\"%s\",\"close_extra\":\"%s\"}\n",
      free_before, free_after, total, opened == again ? "true" : "false", cudaGetErrorName(memset),
      cudaGetErrorName(synchronize), obtained, cudaGetErrorName(refusal), cudaGetErrorName(close),
      cudaGetErrorName(close_again), cudaGetErrorName(close_extra));
  return 0;
}

int export_side(const char* self, size_t bytes, size_t chunk) {
  void* pointer = nullptr;
  if (cudaError_t e = cudaMalloc(&pointer, bytes); e) return fail("cudaMalloc", e);
  cudaIpcMemHandle_t memory_handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&memory_handle, pointer); e)
    return fail("cudaIpcGetMemHandle", e);
  cudaEvent_t event;
  if (cudaError_t e =
          cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming);
      e)
    return fail("cudaEventCreateWithFlags", e);
  cudaIpcEventHandle_t event_handle;
  if (cudaError_t e = cudaIpcGetEventHandle(&event_handle, event); e)
    return fail("cudaIpcGetEventHandle", e);
  if (cudaError_t e = cudaEventRecord(event, 0); e) return fail("cudaEventRecord", e);
  void* own = nullptr;
  const cudaError_t open_own = cudaIpcOpenMemHandle(&own, memory_handle, 0);
  cudaGetLastError();
  size_t free_bytes = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total); e) return fail("cudaMemGetInfo", e);

  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return fail("pipe", cudaErrorUnknown);
  const pid_t child = fork();
  if (child == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    const std::string chunk_text = std::to_string(chunk);
    execl(self, self, "open", chunk_text.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  const std::string handles = to_hex(&memory_handle, sizeof memory_handle) + "\n" +
                              to_hex(&event_handle, sizeof event_handle) + "\n";
  if (write(to_child[1], handles.data(), handles.size()) != static_cast<ssize_t>(handles.size()))
    return fail("writing the handles", cudaErrorUnknown);
  close(to_child[1]);
  std::string report;
  char buffer[1024];
  for (ssize_t n; (n = read(from_child[0], buffer, sizeof buffer)) > 0;) report.append(buffer, n);
  close(from_child[0]);
  int status = 0;
  waitpid(child, &status, 0);
  while (!report.empty() && report.back() == '\n') report.pop_back();
  if (report.empty()) report = "null";
  if (const size_t newline = report.rfind('\n'); newline != std::string::npos) {
    report = report.substr(newline + 1);
  }
  const cudaError_t freed = cudaFree(pointer);
  std::printf(
      "{\"bytes\":%zu,\"free\":%zu,\"total\":%zu,\"open_own\":\"%s\",\"free_status\":\"%s\","
      "\"opener_status\":%d,\"opener\":%s}\n",
      bytes, free_bytes, total, cudaGetErrorName(open_own), cudaGetErrorName(freed),
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), report.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "open") == 0) {
    return open_side(std::strtoull(argv[2], nullptr, 10));
  }
  if (argc == 3) {
    return export_side("/proc/self/exe", std::strtoull(argv[1], nullptr, 10),
                       std::strtoull(argv[2], nullptr, 10));
  }
  std::fprintf(stderr, "usage: ipc_probe <bytes> <chunk> | ipc_probe open <chunk>\n");
  return 2;
}
