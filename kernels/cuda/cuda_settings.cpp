// cuda_settings.cpp — storage of the CUDA dense-kernel switches (see cuda_settings.h):
// atomics initialised once from the environment, then changed only by the setters.
#include "kernels/cuda/cuda_settings.h"

#include "kernels/cuda/conv_graph_rules.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace oomlab {
namespace {
bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  return std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 && std::strcmp(v, "off") != 0;
}

// 1 or 0 when the variable says so (as env_flag), -1 when it is unset or empty (auto).
int env_tristate(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  return env_flag(name, false) ? 1 : 0;
}

size_t env_size(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return (end && *end == '\0') ? size_t(n) : dflt;   // malformed: keep the default
}

struct Settings {
  std::atomic<bool> matmul_tf32{env_flag("OOMLAB_MATMUL_TF32", false)};
  std::atomic<bool> cudnn_tf32{env_flag("OOMLAB_CUDNN_TF32", true)};
  std::atomic<bool> benchmark{env_flag("OOMLAB_CUDNN_BENCHMARK", false)};
  std::atomic<bool> deterministic{env_flag("OOMLAB_CUDNN_DETERMINISTIC", false)};
  std::atomic<size_t> ws_limit{env_size("OOMLAB_CUDNN_WORKSPACE_LIMIT", SIZE_MAX)};
  std::atomic<bool> tiled_attention{env_flag("OOMLAB_CUDA_TILED_ATTENTION", true)};
  std::atomic<int> cudnn_graph{env_tristate("OOMLAB_CUDNN_GRAPH")};   // -1: auto
  std::atomic<bool> flash_attention{env_flag("OOMLAB_CUDA_FLASH_ATTENTION", true)};
  std::atomic<bool> tc_attention{env_flag("OOMLAB_CUDA_TC_ATTENTION", true)};
  std::atomic<bool> embedding_split{env_flag("OOMLAB_CUDA_EMBEDDING_SPLIT", false)};
  std::atomic<bool> bn_cl_one_pass{env_flag("OOMLAB_CUDA_BN_CL_ONE_PASS", false)};
  std::atomic<bool> ln_unroll{env_flag("OOMLAB_CUDA_LN_UNROLL", false)};
  std::atomic<bool> dropout_vec{env_flag("OOMLAB_CUDA_DROPOUT_VEC", false)};
  std::atomic<bool> copy_fastdiv{env_flag("OOMLAB_CUDA_COPY_FASTDIV", false)};
  std::atomic<bool> linear_lt{env_flag("OOMLAB_CUDA_LINEAR_LT", false)};
  std::atomic<bool> bias_planes{env_flag("OOMLAB_CUDA_BIAS_PLANES", false)};
  std::atomic<bool> mma_attention{env_flag("OOMLAB_CUDA_MMA_ATTENTION", false)};
};

Settings& settings() {
  static Settings s;
  return s;
}
}  // namespace

void set_cuda_allow_tf32(bool matmul, bool cudnn) {
  settings().matmul_tf32.store(matmul);
  settings().cudnn_tf32.store(cudnn);
}
bool cuda_matmul_allow_tf32() { return settings().matmul_tf32.load(); }
bool cudnn_allow_tf32() { return settings().cudnn_tf32.load(); }

void set_cudnn_benchmark(bool on) { settings().benchmark.store(on); }
bool cudnn_benchmark() { return settings().benchmark.load(); }
void set_cudnn_deterministic(bool on) { settings().deterministic.store(on); }
bool cudnn_deterministic() { return settings().deterministic.load(); }

void set_cudnn_workspace_limit(size_t bytes) { settings().ws_limit.store(bytes); }
size_t cudnn_workspace_limit() { return settings().ws_limit.load(); }

void set_cuda_tiled_attention(bool on) { settings().tiled_attention.store(on); }
bool cuda_tiled_attention() { return settings().tiled_attention.load(); }

void set_cudnn_graph_api(bool on) { settings().cudnn_graph.store(on ? 1 : 0); }
bool cudnn_graph_api(bool channels_last) {
  return cudnn_graph::graph_api_in_effect(settings().cudnn_graph.load(), cudnn_benchmark(), channels_last);
}
std::string cudnn_graph_api_setting() {
  if (cudnn_graph_api(false)) return "true";
  return cudnn_graph_api(true) ? "channels_last" : "false";
}
void set_cuda_flash_attention(bool on) { settings().flash_attention.store(on); }
bool cuda_flash_attention() { return settings().flash_attention.load(); }
void set_cuda_tc_attention(bool on) { settings().tc_attention.store(on); }
bool cuda_tc_attention() { return settings().tc_attention.load(); }
void set_cuda_embedding_split(bool on) { settings().embedding_split.store(on); }
bool cuda_embedding_split() { return settings().embedding_split.load(); }
void set_cuda_bn_cl_one_pass(bool on) { settings().bn_cl_one_pass.store(on); }
bool cuda_bn_cl_one_pass() { return settings().bn_cl_one_pass.load(); }
void set_cuda_ln_unroll(bool on) { settings().ln_unroll.store(on); }
bool cuda_ln_unroll() { return settings().ln_unroll.load(); }
void set_cuda_dropout_vec(bool on) { settings().dropout_vec.store(on); }
bool cuda_dropout_vec() { return settings().dropout_vec.load(); }
void set_cuda_copy_fastdiv(bool on) { settings().copy_fastdiv.store(on); }
bool cuda_copy_fastdiv() { return settings().copy_fastdiv.load(); }
void set_cuda_linear_lt(bool on) { settings().linear_lt.store(on); }
bool cuda_linear_lt() { return settings().linear_lt.load(); }
void set_cuda_bias_planes(bool on) { settings().bias_planes.store(on); }
bool cuda_bias_planes() { return settings().bias_planes.load(); }
void set_cuda_mma_attention(bool on) { settings().mma_attention.store(on); }
bool cuda_mma_attention() { return settings().mma_attention.load(); }

}  // namespace oomlab
