// The JIT linker (cuLink*), which cuBLASLt resolves with dlsym at start-up and uses to build
// kernels at run time (cuTensorMapEncodeTiled is in api_memory.cc). Nothing is compiled on the
// simulator: a link collects the kernel names of what was added, and its output is a fat binary
// the module loader reads back (an entry it cannot read keeps the result open to any name, as the
// inputs were).
#include <algorithm>
#include <cstring>

#include "driver.h"
#include "fatbin.h"

using namespace simgpu::driver;

// cuda.h maps these names to their _v2 forms; the driver exports both ABIs (same arguments).
#undef cuLinkCreate
#undef cuLinkAddData
#undef cuLinkAddFile

namespace {

struct LinkState {
  ImageKernels kernels;
  std::vector<uint8_t> output;
};

std::mutex g_link_mutex;
std::unordered_set<LinkState*> g_links;

LinkState* valid_link(CUlinkState handle) {
  auto* state = reinterpret_cast<LinkState*>(handle);
  return g_links.count(state) ? state : nullptr;
}

CUresult add_image(LinkState& state, const void* data, size_t size) {
  ImageKernels kernels;
  if (CUresult r = read_image(data, size, kernels); r != CUDA_SUCCESS) return r;
  for (std::string& name : kernels.names) {
    if (std::find(state.kernels.names.begin(), state.kernels.names.end(), name) ==
        state.kernels.names.end()) {
      state.kernels.names.push_back(std::move(name));
    }
  }
  state.kernels.open = state.kernels.open || kernels.open;
  return CUDA_SUCCESS;
}

void append_entry(std::vector<uint8_t>& body, uint16_t kind, uint64_t flags,
                  const std::string& payload) {
  uint8_t header[64] = {};
  const uint32_t header_size = sizeof header;
  const auto payload_size = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &kind, sizeof kind);
  std::memcpy(header + 4, &header_size, sizeof header_size);
  std::memcpy(header + 8, &payload_size, sizeof payload_size);
  std::memcpy(header + 40, &flags, sizeof flags);
  body.insert(body.end(), header, header + sizeof header);
  body.insert(body.end(), payload.begin(), payload.end());
}

// A fat binary of one PTX entry naming the kernels; an open link adds an entry marked compressed,
// which read_fatbin reports unreadable.
std::vector<uint8_t> linked_image(const ImageKernels& kernels) {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
  for (const std::string& name : kernels.names)
    ptx += ".visible .entry " + name + "()\n{\n ret;\n}\n";
  std::vector<uint8_t> body;
  append_entry(body, 1, 0, ptx + '\0');
  if (kernels.open) append_entry(body, 2, 0x8000, std::string());
  std::vector<uint8_t> image(16);
  const uint32_t magic = kFatbinMagic;
  const uint16_t version = 1, header_size = 16;
  const uint64_t size = body.size();
  std::memcpy(image.data(), &magic, sizeof magic);
  std::memcpy(image.data() + 4, &version, sizeof version);
  std::memcpy(image.data() + 6, &header_size, sizeof header_size);
  std::memcpy(image.data() + 8, &size, sizeof size);
  image.insert(image.end(), body.begin(), body.end());
  return image;
}

}  // namespace

SIMGPU_EXPORT CUresult cuLinkCreate_v2(unsigned int count, CUjit_option* options, void** values,
                                       CUlinkState* out) {
  if (!out || (count > 0 && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_initialized(Driver::get()); r != CUDA_SUCCESS) return r;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* state = new LinkState();
  std::lock_guard<std::mutex> lock(g_link_mutex);
  g_links.insert(state);
  *out = reinterpret_cast<CUlinkState>(state);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLinkCreate(unsigned int count, CUjit_option* options, void** values,
                                    CUlinkState* out) {
  return cuLinkCreate_v2(count, options, values, out);
}

SIMGPU_EXPORT CUresult cuLinkAddData_v2(CUlinkState handle, CUjitInputType type, void* data,
                                        size_t size, const char*, unsigned int, CUjit_option*,
                                        void**) {
  if (!data || size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  if (type == CU_JIT_INPUT_LIBRARY || type == CU_JIT_INPUT_OBJECT) return CUDA_SUCCESS;
  // NVVM IR links only with link-time optimisation options, which the simulator does not take.
  if (type != CU_JIT_INPUT_PTX && type != CU_JIT_INPUT_CUBIN && type != CU_JIT_INPUT_FATBINARY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_JIT_INPUT_PTX) {
    // PTX need not be NUL-terminated within `size`.
    const std::string text(static_cast<const char*>(data), size);
    return add_image(*state, text.c_str(), text.size());
  }
  return add_image(*state, data, size);
}

SIMGPU_EXPORT CUresult cuLinkAddData(CUlinkState handle, CUjitInputType type, void* data,
                                     size_t size, const char* name, unsigned int count,
                                     CUjit_option* options, void** values) {
  return cuLinkAddData_v2(handle, type, data, size, name, count, options, values);
}

SIMGPU_EXPORT CUresult cuLinkAddFile_v2(CUlinkState handle, CUjitInputType type, const char* path,
                                        unsigned int count, CUjit_option* options, void** values) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::string image;
  if (CUresult r = read_image_file(path, image); r != CUDA_SUCCESS) return r;
  if (image.empty()) return CUDA_ERROR_INVALID_IMAGE;
  return cuLinkAddData_v2(handle, type, image.data(), image.size(), path, count, options, values);
}

SIMGPU_EXPORT CUresult cuLinkAddFile(CUlinkState handle, CUjitInputType type, const char* path,
                                     unsigned int count, CUjit_option* options, void** values) {
  return cuLinkAddFile_v2(handle, type, path, count, options, values);
}

SIMGPU_EXPORT CUresult cuLinkComplete(CUlinkState handle, void** image, size_t* size) {
  if (!image || !size) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  if (state->kernels.names.empty() && !state->kernels.open) return CUDA_ERROR_INVALID_VALUE;
  state->output = linked_image(state->kernels);  // owned by the state, as the driver's is
  *image = state->output.data();
  *size = state->output.size();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLinkDestroy(CUlinkState handle) {
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  g_links.erase(state);
  delete state;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap* map, void* address) {
  if (!map || !address || reinterpret_cast<uintptr_t>(address) % 16 != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(map, &address, sizeof address);
  return CUDA_SUCCESS;
}
