// cuda_backend.cpp — the CUDA backend's runtime hooks (engine/core/backend.h):
//   synchronize(i)  waits for all work queued on device i's compute stream;
//   properties(i)   name, compute capability, memory, SM count, driver / runtime / cuBLAS /
//                   cuDNN versions and the numerics switches in force (TF32 for matmul
//                   and cuDNN, cudnn benchmark, workspace limit) for results provenance,
//                   and driver_used_bytes (cudaMemGetInfo's total - free when the results
//                   are written: context, library workspaces, NCCL and the allocator's
//                   segments; less reserved_bytes.all.current it measures what `oomlab plan
//                   --reserve` stands for; left out if the query fails);
//   set_options     applies BackendOptions to cuda_settings (cached conv plans are keyed
//                   by those switches, so a change applies to the next call);
//   physical(i)     "cuda:<gpu> <name>": the GPU logical device cuda:i runs on;
//   pinned_*        the page-locked host pool (cuda_host_allocator.h).
// Device indexes are logical (cuda_device.h).
// Registered by the CUDA backend's registrar (register_cuda.cpp).
#include <cstdint>
#include <string>

#include "engine/core/backend.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_host_allocator.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {
namespace {
std::string version_str(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod);
}

void synchronize(int device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaStreamSynchronize(compute_stream(device)));
}

DeviceProperties properties(int device) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, physical_device(device)));
  int driver = 0, runtime = 0, cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &cublas_major));
  CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &cublas_minor));
  CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &cublas_patch));
  const size_t cudnn = cudnnGetVersion();   // cuDNN 9: major*10000 + minor*100 + patch
  const size_t ws = cudnn_workspace_limit();
  DeviceProperties out = {{"device_name", p.name},
          {"physical_device", std::to_string(physical_device(device))},
          {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
          {"total_memory_bytes", std::to_string(p.totalGlobalMem)},
          {"multiprocessors", std::to_string(p.multiProcessorCount)},
          {"cuda_driver", version_str(driver, 1000, 10, 100)},
          {"cuda_runtime", version_str(runtime, 1000, 10, 100)},
          {"cublas",
           std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." + std::to_string(cublas_patch)},
          {"cudnn",
           std::to_string(cudnn / 10000) + "." + std::to_string(cudnn / 100 % 100) + "." + std::to_string(cudnn % 100)},
          {"matmul_allow_tf32", cuda_matmul_allow_tf32() ? "true" : "false"},
          {"cudnn_allow_tf32", cudnn_allow_tf32() ? "true" : "false"},
          {"cudnn_benchmark", cudnn_benchmark() ? "true" : "false"},
          {"cudnn_deterministic", cudnn_deterministic() ? "true" : "false"},
          {"tiled_attention", cuda_tiled_attention() ? "true" : "false"},
          {"flash_attention", cuda_flash_attention() ? "true" : "false"},
          {"tc_attention", cuda_tc_attention() ? "true" : "false"},
          {"embedding_split", cuda_embedding_split() ? "true" : "false"},
          {"bn_cl_one_pass", cuda_bn_cl_one_pass() ? "true" : "false"},
          {"ln_unroll", cuda_ln_unroll() ? "true" : "false"},
          {"dropout_vec", cuda_dropout_vec() ? "true" : "false"},
          {"copy_fastdiv", cuda_copy_fastdiv() ? "true" : "false"},
          {"linear_lt", cuda_linear_lt() ? "true" : "false"},
          {"bias_planes", cuda_bias_planes() ? "true" : "false"},
          {"mma_attention", cuda_mma_attention() ? "true" : "false"},
          {"tc_attention_inputs", "16-bit"},  // float32 inputs run the flash kernels, TF32 or not
          {"cudnn_graph_api", cudnn_graph_api_setting()},
          {"compute_stream", uses_own_compute_stream(device) ? "own" : "legacy default"},
          {"cudnn_workspace_limit", ws == SIZE_MAX ? "unlimited" : std::to_string(ws)}};
  DeviceGuard guard(device);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    out.push_back({"driver_used_bytes", std::to_string(total_bytes - free_bytes)});
  else
    (void)cudaGetLastError();   // a provenance field, not worth failing the results for
  return out;
}

std::string physical(int device) {
  const int gpu = physical_device(device);
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, gpu));
  return "cuda:" + std::to_string(gpu) + " " + p.name;
}

void set_options(const BackendOptions& o) {   // unset fields keep their current value
  set_cuda_allow_tf32(o.matmul_allow_tf32.value_or(cuda_matmul_allow_tf32()),
                      o.cudnn_allow_tf32.value_or(cudnn_allow_tf32()));
  if (o.cudnn_benchmark) set_cudnn_benchmark(*o.cudnn_benchmark);
  if (o.cudnn_deterministic) set_cudnn_deterministic(*o.cudnn_deterministic);
  if (o.cudnn_workspace_limit)
    set_cudnn_workspace_limit(*o.cudnn_workspace_limit == 0 ? SIZE_MAX : *o.cudnn_workspace_limit);
}

// The batch from the loader's pageable buffer straight to the device (no host staging
// tensor): cudaMemcpyAsync returns once the pageable source has been staged.
void copy_from_host(void* device_dst, const void* host_src, size_t bytes, int device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, compute_stream(device)));
}
}  // namespace

void register_cuda_backend_hooks() {
  BackendHooks h;
  h.synchronize = &synchronize;
  h.properties = &properties;
  h.set_options = &set_options;
  h.physical = &physical;
  h.pinned_alloc = &pinned_alloc;
  h.pinned_free = &pinned_free;
  h.copy_from_pinned = &copy_from_pinned;
  h.copy_from_host = &copy_from_host;
  add_graph_hooks(h);
  add_span_timer_hooks(h);
  register_backend_hooks(DeviceType::cuda, h);
}
}  // namespace oomlab::cuda
