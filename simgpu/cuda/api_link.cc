// The JIT linker (cuLink*): cuBLASLt resolves these at load and will not create a handle without
// them. A link state collects images (PTX, cubins, fat binaries, as cuModuleLoadData reads them);
// cuLinkComplete hands out one image holding every kernel added: the only input as it was, or for
// several inputs a PTX text with an entry per kernel (the simulator runs no code, so the kernel
// names are what a module loaded from the output needs). Variables of inputs linked together are
// not carried into that PTX.
#include <cstring>
#include <fstream>
#include <sstream>

#include "driver.h"

using namespace simgpu::driver;

namespace {

struct LinkState {
  Context* context = nullptr;
  std::vector<std::string> inputs;  // each image's bytes
  ImageKernels kernels;             // every input's kernels, in order
  std::string output;               // valid until cuLinkDestroy
  bool completed = false;
};

std::mutex g_link_mutex;  // guards g_links (images are read without the driver's state)
std::unordered_set<LinkState*> g_links;

LinkState* valid_link(CUlinkState handle) {
  auto* state = reinterpret_cast<LinkState*>(handle);
  return g_links.count(state) ? state : nullptr;
}

bool known_input_type(CUjitInputType type) {
  switch (type) {
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_PTX:
    case CU_JIT_INPUT_FATBINARY:
    case CU_JIT_INPUT_OBJECT:
    case CU_JIT_INPUT_LIBRARY:
      return true;
    default:
      return false;  // NVVM IR (LTO) needs a compiler the simulator does not have
  }
}

CUresult add_image(LinkState& state, CUjitInputType type, std::string bytes) {
  if (!known_input_type(type)) return CUDA_ERROR_INVALID_VALUE;
  if (state.completed) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_JIT_INPUT_PTX) bytes.push_back('\0');  // PTX is read as text up to a NUL
  ImageKernels kernels;
  if (CUresult r = read_image(bytes.data(), bytes.size(), kernels); r != CUDA_SUCCESS) return r;
  for (std::string& name : kernels.names) state.kernels.names.push_back(std::move(name));
  for (auto& global : kernels.globals) state.kernels.globals.push_back(std::move(global));
  state.kernels.open = state.kernels.open || kernels.open;
  state.inputs.push_back(std::move(bytes));
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuLinkCreate_v2(unsigned int count, CUjit_option* options, void** values,
                                       CUlinkState* out) {
  if (!out || (count && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  Context* context = nullptr;
  {
    std::lock_guard<std::mutex> lock(driver.mutex);
    if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  }
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
  }
  auto* state = new LinkState();
  state->context = context;
  std::lock_guard<std::mutex> lock(g_link_mutex);
  g_links.insert(state);
  *out = reinterpret_cast<CUlinkState>(state);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLinkAddData_v2(CUlinkState handle, CUjitInputType type, void* data,
                                        size_t size, const char*, unsigned int count,
                                        CUjit_option* options, void** values) {
  if (!data || size == 0 || (count && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  return add_image(*state, type, std::string(static_cast<const char*>(data), size));
}

SIMGPU_EXPORT CUresult cuLinkAddFile_v2(CUlinkState handle, CUjitInputType type, const char* path,
                                        unsigned int count, CUjit_option* options, void** values) {
  if (!path || (count && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream bytes;
  bytes << file.rdbuf();
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  return add_image(*state, type, bytes.str());
}

SIMGPU_EXPORT CUresult cuLinkComplete(CUlinkState handle, void** image, size_t* size) {
  if (!image || !size) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_link_mutex);
  LinkState* state = valid_link(handle);
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  if (state->inputs.empty()) return CUDA_ERROR_INVALID_VALUE;  // nothing to link
  if (!state->completed) {
    if (state->inputs.size() == 1) {
      state->output = state->inputs.front();
    } else {
      std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
      for (const std::string& name : state->kernels.names) {
        ptx += ".visible .entry " + name + "()\n{\n\tret;\n}\n";
      }
      state->output = ptx;
      state->output.push_back('\0');
    }
    state->completed = true;
  }
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

// The CUDA 5.5 names, which the runtime looks up at version 5050: the same arguments.
#undef cuLinkCreate
#undef cuLinkAddData
#undef cuLinkAddFile
SIMGPU_EXPORT CUresult cuLinkCreate(unsigned int count, CUjit_option* options, void** values,
                                    CUlinkState* out) {
  return cuLinkCreate_v2(count, options, values, out);
}
SIMGPU_EXPORT CUresult cuLinkAddData(CUlinkState handle, CUjitInputType type, void* data,
                                     size_t size, const char* name, unsigned int count,
                                     CUjit_option* options, void** values) {
  return cuLinkAddData_v2(handle, type, data, size, name, count, options, values);
}
SIMGPU_EXPORT CUresult cuLinkAddFile(CUlinkState handle, CUjitInputType type, const char* path,
                                     unsigned int count, CUjit_option* options, void** values) {
  return cuLinkAddFile_v2(handle, type, path, count, options, values);
}
