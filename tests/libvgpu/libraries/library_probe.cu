// NVIDIA's libraries as tenants call them, on whatever GPU the process sees (the simulated one in
// CI, a share of it under libvgpu): each mode runs a library from its handle to its destruction and
// prints one JSON line: each step's status (the library's own enum, as an integer and its name),
// the device memory the process held at its peak (cudaMemGetInfo), and whether it ran to the end.
//
//   library_probe cublas | cublaslt | cufft | curand | cudnn | nccl [ranks]
//
// With LIBRARY_PROBE_HOLD=1 it prints {"holding":true} at its peak (everything allocated, the
// work done) and waits there until stdin closes, so a checker can read the device's view of it.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cufft.h>
#include <curand.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Report {
  std::string library;
  std::string steps;  // JSON objects, comma separated
  size_t peak_used = 0;
  size_t total = 0;
  bool complete = true;

  void sample_memory() {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      total = total_bytes;
      if (total_bytes - free_bytes > peak_used) peak_used = total_bytes - free_bytes;
    }
  }

  // Records a step; false (and the report incomplete) when it failed.
  bool step(const char* name, int status, const char* text) {
    char line[256];
    std::snprintf(line, sizeof line, "%s{\"step\":\"%s\",\"status\":%d,\"text\":\"%s\"}",
                  steps.empty() ? "" : ",", name, status, text);
    steps += line;
    sample_memory();
    if (status != 0) complete = false;
    return status == 0;
  }

  // At the peak: hold there when asked.
  void hold() {
    sample_memory();
    const char* asked = std::getenv("LIBRARY_PROBE_HOLD");
    if (!asked || std::strcmp(asked, "1") != 0) return;
    std::printf("{\"holding\":true}\n");
    std::fflush(stdout);
    while (std::getchar() != EOF) {
    }
  }

  int print() const {
    std::printf(
        "{\"library\":\"%s\",\"complete\":%s,\"peak_used\":%zu,\"total\":%zu,\"steps\":[%s]}\n",
        library.c_str(), complete ? "true" : "false", peak_used, total, steps.c_str());
    return 0;
  }
};

// Once a library's work is queued: its completion, then (when asked) the hold at the peak.
void synchronize_and_hold(Report& report) {
  const cudaError_t synced = cudaDeviceSynchronize();
  report.step("cudaDeviceSynchronize", synced, cudaGetErrorName(synced));
  report.hold();
}

const char* curand_name(curandStatus_t status) {
  switch (status) {
    case CURAND_STATUS_SUCCESS:
      return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_ALLOCATION_FAILED:
      return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_INITIALIZATION_FAILED:
      return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_LAUNCH_FAILURE:
      return "CURAND_STATUS_LAUNCH_FAILURE";
    default:
      return "other";
  }
}

int run_curand(Report& report) {
  curandGenerator_t generator = nullptr;
  curandStatus_t status = curandCreateGenerator(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  if (!report.step("curandCreateGenerator", status, curand_name(status))) return report.print();
  float* data = nullptr;
  const size_t count = 64u << 20;  // 256 MiB of floats
  const cudaError_t allocated = cudaMalloc(&data, count * sizeof(float));
  if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
    status = curandGenerateUniform(generator, data, count);
    report.step("curandGenerateUniform", status, curand_name(status));
    synchronize_and_hold(report);
    cudaFree(data);
  }
  status = curandDestroyGenerator(generator);
  report.step("curandDestroyGenerator", status, curand_name(status));
  return report.print();
}

// A square GEMM's three matrices, allocated together (any failure frees what was allocated).
struct Matrices {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  cudaError_t allocate(size_t n) {
    const size_t bytes = n * n * sizeof(float);
    cudaError_t result = cudaMalloc(&a, bytes);
    if (result == cudaSuccess) result = cudaMalloc(&b, bytes);
    if (result == cudaSuccess) result = cudaMalloc(&c, bytes);
    return result;
  }
  ~Matrices() {
    for (float* pointer : {a, b, c}) cudaFree(pointer);
  }
};

constexpr int kGemmSize = 1024;  // 4 MiB per matrix
constexpr int kGemmLoops = 10;

// cuBLAS's handle with a workspace of its own, a loop of SGEMMs on it, and its destruction.
int run_cublas(Report& report) {
  cublasHandle_t handle = nullptr;
  cublasStatus_t status = cublasCreate(&handle);
  if (!report.step("cublasCreate", status, cublasGetStatusName(status))) return report.print();
  void* workspace = nullptr;
  const size_t workspace_bytes = 32u << 20;  // cuBLAS's own default on Hopper
  Matrices matrices;
  cudaError_t allocated = cudaMalloc(&workspace, workspace_bytes);
  if (allocated == cudaSuccess) allocated = matrices.allocate(kGemmSize);
  if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
    status = cublasSetWorkspace(handle, workspace, workspace_bytes);
    report.step("cublasSetWorkspace", status, cublasGetStatusName(status));
    const float alpha = 1.0f, beta = 0.0f;
    const int n = kGemmSize;
    for (int i = 0; i < kGemmLoops && status == CUBLAS_STATUS_SUCCESS; ++i) {
      status = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, matrices.a, n,
                           matrices.b, n, &beta, matrices.c, n);
    }
    report.step("cublasSgemm", status, cublasGetStatusName(status));
    synchronize_and_hold(report);
  }
  status = cublasDestroy(handle);
  report.step("cublasDestroy", status, cublasGetStatusName(status));
  cudaFree(workspace);
  return report.print();
}

// cuBLASLt on its own: a matmul chosen by its heuristic within a workspace the caller gives.
int run_cublaslt(Report& report) {
  cublasLtHandle_t handle = nullptr;
  cublasStatus_t status = cublasLtCreate(&handle);
  if (!report.step("cublasLtCreate", status, cublasGetStatusName(status))) return report.print();
  const uint64_t n = kGemmSize;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  status = cublasLtMatmulDescCreate(&operation, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, n, n, static_cast<int64_t>(n));
  }
  if (status == CUBLAS_STATUS_SUCCESS) status = cublasLtMatmulPreferenceCreate(&preference);
  size_t workspace_bytes = 32u << 20;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status =
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof workspace_bytes);
  }
  report.step("cublasLtDescriptors", status, cublasGetStatusName(status));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle, operation, layout, layout, layout, layout,
                                            preference, 1, &heuristic, &found);
    if (status == CUBLAS_STATUS_SUCCESS && found == 0) status = CUBLAS_STATUS_NOT_SUPPORTED;
    report.step("cublasLtMatmulAlgoGetHeuristic", status, cublasGetStatusName(status));
  }
  void* workspace = nullptr;
  Matrices matrices;
  if (status == CUBLAS_STATUS_SUCCESS) {
    cudaError_t allocated = cudaMalloc(&workspace, workspace_bytes);
    if (allocated == cudaSuccess) allocated = matrices.allocate(kGemmSize);
    if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
      const float alpha = 1.0f, beta = 0.0f;
      for (int i = 0; i < kGemmLoops && status == CUBLAS_STATUS_SUCCESS; ++i) {
        status = cublasLtMatmul(handle, operation, &alpha, matrices.a, layout, matrices.b, layout,
                                &beta, matrices.c, layout, matrices.c, layout, &heuristic.algo,
                                workspace, workspace_bytes, nullptr);
      }
      report.step("cublasLtMatmul", status, cublasGetStatusName(status));
      synchronize_and_hold(report);
    }
  }
  if (preference) cublasLtMatmulPreferenceDestroy(preference);
  if (layout) cublasLtMatrixLayoutDestroy(layout);
  if (operation) cublasLtMatmulDescDestroy(operation);
  cudaFree(workspace);
  status = cublasLtDestroy(handle);
  report.step("cublasLtDestroy", status, cublasGetStatusName(status));
  return report.print();
}

const char* cufft_name(cufftResult result) {
  switch (result) {
    case CUFFT_SUCCESS:
      return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN:
      return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED:
      return "CUFFT_ALLOC_FAILED";
    case CUFFT_INTERNAL_ERROR:
      return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED:
      return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED:
      return "CUFFT_SETUP_FAILED";
    default:
      return "other";
  }
}

// cuFFT: a batched 1-D complex transform large enough to need a work area of its own, executed in
// place, and the plan's destruction.
int run_cufft(Report& report) {
  cufftHandle plan = 0;
  cufftResult result = cufftCreate(&plan);
  if (!report.step("cufftCreate", result, cufft_name(result))) return report.print();
  const int length = 1 << 20, batch = 16;  // 128 MiB of complex floats
  size_t work_bytes = 0;
  result = cufftMakePlan1d(plan, length, CUFFT_C2C, batch, &work_bytes);
  if (report.step("cufftMakePlan1d", result, cufft_name(result))) {
    cufftComplex* data = nullptr;
    const cudaError_t allocated =
        cudaMalloc(&data, sizeof(cufftComplex) * static_cast<size_t>(length) * batch);
    if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
      result = cufftExecC2C(plan, data, data, CUFFT_FORWARD);
      report.step("cufftExecC2C", result, cufft_name(result));
      synchronize_and_hold(report);
    }
    cudaFree(data);
  }
  result = cufftDestroy(plan);
  report.step("cufftDestroy", result, cufft_name(result));
  return report.print();
}

int run_cudnn(Report& report) {
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t status = cudnnCreate(&handle);
  if (!report.step("cudnnCreate", status, cudnnGetErrorString(status))) return report.print();
  cudnnTensorDescriptor_t input, output;
  cudnnFilterDescriptor_t filter;
  cudnnConvolutionDescriptor_t convolution;
  cudnnCreateTensorDescriptor(&input);
  cudnnCreateTensorDescriptor(&output);
  cudnnCreateFilterDescriptor(&filter);
  cudnnCreateConvolutionDescriptor(&convolution);
  // A ResNet-50 stage-1 3x3 convolution, batch 32.
  cudnnSetTensor4dDescriptor(input, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 32, 64, 56, 56);
  cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 64, 64, 3, 3);
  cudnnSetConvolution2dDescriptor(convolution, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                  CUDNN_DATA_FLOAT);
  int n = 0, c = 0, h = 0, w = 0;
  cudnnGetConvolution2dForwardOutputDim(convolution, input, filter, &n, &c, &h, &w);
  cudnnSetTensor4dDescriptor(output, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w);
  const cudnnConvolutionFwdAlgo_t algorithm = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  size_t workspace_bytes = 0;
  status = cudnnGetConvolutionForwardWorkspaceSize(handle, input, filter, convolution, output,
                                                   algorithm, &workspace_bytes);
  report.step("cudnnGetConvolutionForwardWorkspaceSize", status, cudnnGetErrorString(status));
  const size_t tensor_bytes = size_t{32} * 64 * 56 * 56 * sizeof(float);
  void *workspace = nullptr, *x = nullptr, *y = nullptr, *filter_data = nullptr;
  cudaError_t allocated = cudaMalloc(&workspace, workspace_bytes ? workspace_bytes : 1);
  if (allocated == cudaSuccess) allocated = cudaMalloc(&x, tensor_bytes);
  if (allocated == cudaSuccess) allocated = cudaMalloc(&y, tensor_bytes);
  if (allocated == cudaSuccess) allocated = cudaMalloc(&filter_data, 64 * 64 * 9 * sizeof(float));
  if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
    const float alpha = 1.0f, beta = 0.0f;
    status = cudnnConvolutionForward(handle, &alpha, input, x, filter, filter_data, convolution,
                                     algorithm, workspace, workspace_bytes, &beta, output, y);
    report.step("cudnnConvolutionForward", status, cudnnGetErrorString(status));
    synchronize_and_hold(report);
  }
  for (void* pointer : {workspace, x, y, filter_data}) cudaFree(pointer);
  cudnnDestroyTensorDescriptor(input);
  cudnnDestroyTensorDescriptor(output);
  cudnnDestroyFilterDescriptor(filter);
  cudnnDestroyConvolutionDescriptor(convolution);
  status = cudnnDestroy(handle);
  report.step("cudnnDestroy", status, cudnnGetErrorString(status));
  return report.print();
}

int run_nccl(Report& report, int ranks) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(ranks));
  std::vector<int> devices(static_cast<size_t>(ranks));
  for (int i = 0; i < ranks; ++i) devices[static_cast<size_t>(i)] = i;
  ncclResult_t result = ncclCommInitAll(comms.data(), ranks, devices.data());
  if (!report.step("ncclCommInitAll", result, ncclGetErrorString(result))) return report.print();
  const size_t count = 32u << 20;  // 128 MiB of floats per rank
  std::vector<float*> buffers(static_cast<size_t>(ranks), nullptr);
  std::vector<cudaStream_t> streams(static_cast<size_t>(ranks), nullptr);
  cudaError_t allocated = cudaSuccess;
  for (int i = 0; i < ranks && allocated == cudaSuccess; ++i) {
    cudaSetDevice(i);
    allocated = cudaMalloc(&buffers[static_cast<size_t>(i)], count * sizeof(float));
    if (allocated == cudaSuccess) allocated = cudaStreamCreate(&streams[static_cast<size_t>(i)]);
  }
  if (report.step("cudaMalloc", allocated, cudaGetErrorName(allocated))) {
    ncclGroupStart();
    for (int i = 0; i < ranks; ++i) {
      const auto r = static_cast<size_t>(i);
      ncclAllReduce(buffers[r], buffers[r], count, ncclFloat, ncclSum, comms[r], streams[r]);
    }
    result = ncclGroupEnd();
    report.step("ncclAllReduce", result, ncclGetErrorString(result));
    for (int i = 0; i < ranks; ++i) {
      cudaSetDevice(i);
      const cudaError_t synced = cudaStreamSynchronize(streams[static_cast<size_t>(i)]);
      report.step("cudaStreamSynchronize", synced, cudaGetErrorName(synced));
    }
    report.hold();
  }
  for (int i = 0; i < ranks; ++i) {
    result = ncclCommDestroy(comms[static_cast<size_t>(i)]);
    report.step("ncclCommDestroy", result, ncclGetErrorString(result));
  }
  return report.print();
}

}  // namespace

int main(int argc, char** argv) {
  Report report;
  report.library = argc > 1 ? argv[1] : "";
  if (report.library == "cublas") return run_cublas(report);
  if (report.library == "cublaslt") return run_cublaslt(report);
  if (report.library == "cufft") return run_cufft(report);
  if (report.library == "curand") return run_curand(report);
  if (report.library == "cudnn") return run_cudnn(report);
  if (report.library == "nccl") {
    const int ranks = argc > 2 ? std::atoi(argv[2]) : 1;
    if (ranks < 1 || ranks > 8) {
      std::fprintf(stderr, "library_probe: ranks %s is not 1 to 8\n", argv[2]);
      return 2;
    }
    report.library += std::to_string(ranks);
    return run_nccl(report, ranks);
  }
  std::fprintf(stderr,
               "usage: library_probe cublas | cublaslt | cufft | curand | cudnn | nccl [ranks]\n");
  return 2;
}
