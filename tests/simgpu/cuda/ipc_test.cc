// CUDA IPC on the simulated GPU: a process exports device memory (or an event) with
// cuIpcGet*Handle and another process opens it. Every scenario runs between forked children, as
// on a real machine: the exporter and the opener are two CUDA processes, the parent carries the
// handle from one to the other and reads the state file to see who is charged.
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/shared_state.h"
#include "sim_test_support.h"

namespace simgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kOverhead = 500 * kMiB;

std::map<int, uint64_t> charged_by_pid(const std::string& state_path) {
  std::map<int, uint64_t> charged;
  const int fd = open(state_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return charged;
  void* memory = mmap(nullptr, sizeof(SharedState), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) return charged;
  const auto* state = static_cast<const SharedState*>(memory);
  for (const ProcessSlot& slot : state->processes) {
    if (slot.pid != 0) charged[slot.pid] = slot.used_memory[0];
  }
  munmap(memory, sizeof(SharedState));
  return charged;
}

std::string to_hex(const void* data, size_t size) {
  std::string hex;
  char byte[3];
  for (size_t i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<const unsigned char*>(data)[i]);
    hex += byte;
  }
  return hex;
}

bool from_hex(const std::string& hex, void* data, size_t size) {
  if (hex.size() != 2 * size) return false;
  for (size_t i = 0; i < size; ++i) {
    static_cast<unsigned char*>(data)[i] =
        static_cast<unsigned char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return true;
}

// A CUDA child the parent drives: it reads commands (lines) from the parent and writes replies.
class Peer {
 public:
  using Body = std::function<int(FILE* output, FILE* input)>;
  explicit Peer(const Body& body) {
    if (pipe(to_child_) != 0) std::abort();
    child_ = std::make_unique<Child>([this, &body](FILE* output) {
      close(to_child_[1]);
      FILE* input = fdopen(to_child_[0], "r");
      return body(output, input);
    });
    close(to_child_[0]);
  }
  ~Peer() { close(to_child_[1]); }
  void send(const std::string& line) {
    const std::string text = line + "\n";
    ASSERT_EQ(write(to_child_[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  std::string read_line() { return child_->read_line(); }
  int finish() { return child_->wait_exit(); }
  pid_t pid() const { return child_->pid(); }
  void kill_now() { child_->kill_now(); }

 private:
  int to_child_[2] = {-1, -1};
  std::unique_ptr<Child> child_;
};

std::string next_command(FILE* input) {
  char line[512];
  if (!std::fgets(line, sizeof line, input)) return "";
  std::string command(line);
  if (!command.empty() && command.back() == '\n') command.pop_back();
  return command;
}

// Child-side check: reports the first failure as a line (the parent prints it) and an exit code.
#define CHILD_EXPECT(output, condition)                                 \
  do {                                                                  \
    if (!(condition)) {                                                 \
      std::fprintf(output, "FAIL line %d: %s\n", __LINE__, #condition); \
      return 1;                                                         \
    }                                                                   \
  } while (0)

// Exports a `bytes` allocation and prints its handle; then "free" frees it, "exit" ends.
int exporter(FILE* output, FILE* input, uint64_t bytes) {
  CUcontext context;
  CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
  CUdeviceptr pointer = 0;
  CHILD_EXPECT(output, cuMemAlloc_v2(&pointer, bytes) == CUDA_SUCCESS);
  CUipcMemHandle handle;
  CHILD_EXPECT(output, cuIpcGetMemHandle(&handle, pointer) == CUDA_SUCCESS);
  std::fprintf(output, "%s\n", to_hex(&handle, sizeof handle).c_str());
  for (std::string command = next_command(input); !command.empty(); command = next_command(input)) {
    if (command == "free") {
      CHILD_EXPECT(output, cuMemFree_v2(pointer) == CUDA_SUCCESS);
      std::fprintf(output, "freed\n");
    } else if (command == "exit") {
      return 0;
    }
  }
  return 0;
}

bool read_mem_handle(const std::string& hex, CUipcMemHandle* handle) {
  return from_hex(hex, handle, sizeof *handle);
}

TEST(SimIpc, OpenedMemoryIsChargedOnceToTheExporterAndRefcounted) {
  SimEnvironment env;
  Peer owner([](FILE* output, FILE* input) { return exporter(output, input, 1 * kGiB); });
  const std::string hex = owner.read_line();
  CUipcMemHandle handle;
  ASSERT_TRUE(read_mem_handle(hex, &handle)) << hex;

  Peer user([&handle](FILE* output, FILE* input) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    size_t free_before = 0, free_after = 0, total = 0;
    CHILD_EXPECT(output, cuMemGetInfo_v2(&free_before, &total) == CUDA_SUCCESS);
    CUdeviceptr first = 0, second = 0;
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&first, handle,
                                               CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHILD_EXPECT(output, first != 0);
    CHILD_EXPECT(output, cuIpcOpenMemHandle(&second, handle, 0) == CUDA_SUCCESS);
    CHILD_EXPECT(output, second == first);  // one mapping per handle in a process
    CHILD_EXPECT(output, cuMemGetInfo_v2(&free_after, &total) == CUDA_SUCCESS);
    CHILD_EXPECT(output, free_after == free_before);  // not charged again
    CUdeviceptr base = 0;
    size_t size = 0;
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, first + 4096) == CUDA_SUCCESS);
    CHILD_EXPECT(output, base == first && size == 1 * kGiB);
    CHILD_EXPECT(output, cuMemsetD8_v2(first, 7, 1 * kGiB) == CUDA_SUCCESS);
    char bytes[64] = {};
    CHILD_EXPECT(output, cuMemcpyHtoD_v2(first + 1 * kGiB - 64, bytes, 64) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuMemcpyHtoD_v2(first + 1 * kGiB - 32, bytes, 64) != CUDA_SUCCESS);
    std::fprintf(output, "opened\n");
    CHILD_EXPECT(output, next_command(input) == "close");
    CHILD_EXPECT(output, cuIpcCloseMemHandle(first) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, first) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcCloseMemHandle(first) == CUDA_SUCCESS);  // the last reference
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, first) == CUDA_ERROR_NOT_FOUND);
    CHILD_EXPECT(output, cuIpcCloseMemHandle(first) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuIpcCloseMemHandle(0x1234) == CUDA_ERROR_INVALID_VALUE);
    // Opened again after closing: a fresh mapping of the same memory.
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&second, handle, 0) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, second) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcCloseMemHandle(second) == CUDA_SUCCESS);
    std::fprintf(output, "closed\n");
    return 0;
  });
  ASSERT_EQ(user.read_line(), "opened");
  const auto charged = charged_by_pid(env.state_path());
  EXPECT_EQ(charged.at(owner.pid()), 1 * kGiB + kOverhead);
  EXPECT_EQ(charged.at(user.pid()), kOverhead);  // its context only: the memory is the owner's
  user.send("close");
  EXPECT_EQ(user.read_line(), "closed");
  EXPECT_EQ(user.finish(), 0);
  owner.send("exit");
  EXPECT_EQ(owner.finish(), 0);
}

// The handle's checksum, as api_ipc.cc computes it (FNV-1a of the first 56 bytes): a test that
// forges a handle must get past it to reach the nonce check.
void reseal(CUipcMemHandle* handle) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int i = 0; i < 56; ++i) {
    hash = (hash ^ static_cast<unsigned char>(handle->reserved[i])) * 0x100000001b3ull;
  }
  std::memcpy(handle->reserved + 56, &hash, sizeof hash);
}

TEST(SimIpc, OwnForgedAndMalformedHandlesAreRefused) {
  SimEnvironment env;
  Peer owner([](FILE* output, FILE* input) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    CUdeviceptr pointer = 0, managed = 0;
    CHILD_EXPECT(output, cuMemAlloc_v2(&pointer, 64 * kMiB) == CUDA_SUCCESS);
    CUipcMemHandle handle, again, inner;
    CHILD_EXPECT(output, cuIpcGetMemHandle(nullptr, pointer) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuIpcGetMemHandle(&handle, pointer) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcGetMemHandle(&again, pointer) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcGetMemHandle(&inner, pointer + 4096) == CUDA_SUCCESS);
    CHILD_EXPECT(output, std::memcmp(&handle, &again, sizeof handle) == 0);
    CHILD_EXPECT(output, std::memcmp(&handle, &inner, sizeof handle) == 0);
    CHILD_EXPECT(output, cuIpcGetMemHandle(&again, 0x1000) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcGetMemHandle(&again, managed) == CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr opened = 0;
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, handle, 0) == CUDA_ERROR_INVALID_CONTEXT);
    std::fprintf(output, "%s\n", to_hex(&handle, sizeof handle).c_str());
    CHILD_EXPECT(output, next_command(input) == "exit");
    return 0;
  });
  const std::string hex = owner.read_line();
  CUipcMemHandle handle;
  ASSERT_TRUE(read_mem_handle(hex, &handle)) << hex;

  Peer user([&handle](FILE* output, FILE*) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    CUdeviceptr opened = 0;
    CUipcMemHandle bad = handle;
    bad.reserved[40] ^= 1;  // a nonce bit, checksum not resealed
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, bad, 0) == CUDA_ERROR_INVALID_VALUE);
    reseal(&bad);  // a well-formed handle with a guessed nonce
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, bad, 0) == CUDA_ERROR_INVALID_VALUE);
    bad = handle;
    bad.reserved[32] ^= 1;  // claims another size
    reseal(&bad);
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, bad, 0) == CUDA_ERROR_INVALID_VALUE);
    CUipcMemHandle zero{};
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, zero, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, handle, 2) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(nullptr, handle, 0) == CUDA_ERROR_INVALID_VALUE);
    // And the genuine handle opens: the refusals above were the handle's doing.
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, handle, 0) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);
    std::fprintf(output, "done\n");
    return 0;
  });
  EXPECT_EQ(user.read_line(), "done");
  EXPECT_EQ(user.finish(), 0);
  owner.send("exit");
  EXPECT_EQ(owner.finish(), 0);
}

TEST(SimIpc, FreeingOrExitingRevokesTheHandleAndTheOpenersMapping) {
  SimEnvironment env;
  Peer owner([](FILE* output, FILE* input) { return exporter(output, input, 256 * kMiB); });
  CUipcMemHandle handle;
  ASSERT_TRUE(read_mem_handle(owner.read_line(), &handle));
  Peer second_owner([](FILE* output, FILE* input) { return exporter(output, input, 128 * kMiB); });
  CUipcMemHandle second_handle;
  ASSERT_TRUE(read_mem_handle(second_owner.read_line(), &second_handle));

  Peer user([&](FILE* output, FILE* input) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    CUdeviceptr opened = 0, other = 0, base = 0;
    size_t size = 0;
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&opened, handle, 0) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&other, second_handle, 0) == CUDA_SUCCESS);
    std::fprintf(output, "opened\n");
    CHILD_EXPECT(output, next_command(input) == "freed");
    // The exporter freed it: the handle no longer opens, and the mapping is gone.
    CUdeviceptr again = 0;
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&again, handle, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, opened) == CUDA_ERROR_NOT_FOUND);
    CHILD_EXPECT(output, cuMemsetD8_v2(opened, 0, 16) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, other) == CUDA_SUCCESS);
    std::fprintf(output, "checked\n");
    CHILD_EXPECT(output, next_command(input) == "killed");
    // The second exporter was killed: its handle is stale too.
    CHILD_EXPECT(output,
                 cuIpcOpenMemHandle_v2(&again, second_handle, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuMemGetAddressRange_v2(&base, &size, other) == CUDA_ERROR_NOT_FOUND);
    std::fprintf(output, "done\n");
    return 0;
  });
  ASSERT_EQ(user.read_line(), "opened");
  owner.send("free");
  ASSERT_EQ(owner.read_line(), "freed");
  user.send("freed");
  ASSERT_EQ(user.read_line(), "checked");
  second_owner.kill_now();
  EXPECT_EQ(second_owner.finish(), 128 + SIGKILL);
  user.send("killed");
  EXPECT_EQ(user.read_line(), "done");
  EXPECT_EQ(user.finish(), 0);
  owner.send("exit");
  EXPECT_EQ(owner.finish(), 0);
}

TEST(SimIpc, InterprocessEventsOpenInAnotherProcess) {
  SimEnvironment env;
  Peer owner([](FILE* output, FILE* input) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    CUevent plain, shared;
    CUipcEventHandle handle;
    CHILD_EXPECT(output, cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcGetEventHandle(&handle, plain) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuEventCreate(&shared, CU_EVENT_INTERPROCESS) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(output, cuEventCreate(&shared, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) ==
                             CUDA_SUCCESS);
    CHILD_EXPECT(output, cuIpcGetEventHandle(&handle, shared) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuEventRecord(shared, nullptr) == CUDA_SUCCESS);
    CUevent own;
    CHILD_EXPECT(output, cuIpcOpenEventHandle(&own, handle) == CUDA_ERROR_INVALID_CONTEXT);
    std::fprintf(output, "%s\n", to_hex(&handle, sizeof handle).c_str());
    CHILD_EXPECT(output, next_command(input) == "destroy");
    CHILD_EXPECT(output, cuEventDestroy_v2(shared) == CUDA_SUCCESS);
    std::fprintf(output, "destroyed\n");
    CHILD_EXPECT(output, next_command(input) == "exit");
    return 0;
  });
  CUipcEventHandle handle;
  ASSERT_TRUE(from_hex(owner.read_line(), &handle, sizeof handle));
  Peer user([&handle](FILE* output, FILE* input) {
    CUcontext context;
    CHILD_EXPECT(output, init_primary(&context) == CUDA_SUCCESS);
    CUevent event;
    CHILD_EXPECT(output, cuIpcOpenEventHandle(&event, handle) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuEventQuery(event) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuEventSynchronize(event) == CUDA_SUCCESS);
    CHILD_EXPECT(output, cuStreamWaitEvent(nullptr, event, 0) == CUDA_SUCCESS);
    float ms = 0;
    CHILD_EXPECT(output, cuEventElapsedTime_v2(&ms, event, event) == CUDA_ERROR_INVALID_HANDLE);
    CHILD_EXPECT(output, cuEventDestroy_v2(event) == CUDA_SUCCESS);
    CUipcMemHandle as_memory;
    std::memcpy(&as_memory, &handle, sizeof handle);
    CUdeviceptr pointer = 0;  // an event handle is not a memory handle
    CHILD_EXPECT(output, cuIpcOpenMemHandle_v2(&pointer, as_memory, 0) == CUDA_ERROR_INVALID_VALUE);
    std::fprintf(output, "opened\n");
    CHILD_EXPECT(output, next_command(input) == "destroyed");
    CHILD_EXPECT(output, cuIpcOpenEventHandle(&event, handle) == CUDA_ERROR_INVALID_VALUE);
    std::fprintf(output, "done\n");
    return 0;
  });
  ASSERT_EQ(user.read_line(), "opened");
  owner.send("destroy");
  ASSERT_EQ(owner.read_line(), "destroyed");
  user.send("destroyed");
  EXPECT_EQ(user.read_line(), "done");
  EXPECT_EQ(user.finish(), 0);
  owner.send("exit");
  EXPECT_EQ(owner.finish(), 0);
}

}  // namespace
}  // namespace simgpu::testing
