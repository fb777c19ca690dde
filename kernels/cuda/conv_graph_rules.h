// conv_graph_rules.h — the host-side rules of the cuDNN graph-API convolution path
// (conv_graph.cu), plain C++ (no CUDA header) so that CPU CI tests them
// (tests/test_cudnn_graph_rules.cpp):
//   * engine_refusal(notes, dtype, tf32, deterministic): why an engine configuration that cuDNN's
//     heuristics offer is not used, or nullptr when it is usable. PyTorch's filter for its
//     cuDNN v8 convolutions (aten/src/ATen/native/cudnn/Conv_v8.cpp): engines that
//     down-convert their inputs, or reduce in a precision below the compute type, never
//     run; float32 engines with tensor-core math only when TF32 is allowed (that is how
//     the graph API encodes strict fp32: the legacy API's CUDNN_FMA_MATH); under cuDNN
//     deterministic (torch.backends.cudnn.deterministic), none with the NONDETERMINISTIC note.
//   * graph_api_in_effect(setting, benchmark, channels_last): whether the graph API plans a
//     convolution (auto: under cuDNN benchmark, and for channels_last tensors, as measured).
//   * pointer_alignment(p): the byte alignment a tensor descriptor promises cuDNN: the
//     largest power of two dividing the address, at most 16 (an engine planned for
//     16-byte vector loads must not get a less aligned view); it is part of the plan key.
//   * engine_tag(index, knobs): how results and traces name a graph-API engine, as cuDNN's
//     frontend does: "eng<global index>" then " k<type>=<value>" per knob choice.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/dtype.h"

namespace oomlab::cudnn_graph {

// An engine's numerical notes (cuDNN's cudnnBackendNumericalNote_t, the ones the rule reads).
struct EngineNotes {
  bool tensor_core = false;                    // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
  bool down_convert_inputs = false;            // CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
  bool reduced_precision_reduction = false;    // CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION
  bool nondeterministic = false;               // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
};

inline const char* engine_refusal(const EngineNotes& n, DType t, bool tf32, bool deterministic) {
  if (deterministic && n.nondeterministic) return "is nondeterministic (cuDNN deterministic is on)";
  if (n.down_convert_inputs) return "down-converts its inputs";
  if (n.reduced_precision_reduction) return "reduces in reduced precision";
  if (t == DType::f32 && !tf32 && n.tensor_core) return "tensor-core math on float32 with TF32 off";
  return nullptr;
}

// Whether a convolution plans with the graph API: `setting` 1 / 0 (set_cudnn_graph_api, or
// OOMLAB_CUDNN_GRAPH=1 / 0), or -1 (neither: auto) = under cuDNN benchmark, or when its tensors
// are channels_last (NHWC). On an H200 (kit run of cbc8729) ResNet-50 b128 TF32 under
// --cudnn-benchmark on took 78.5 ms with the graph API's timed plans against the legacy Find's
// 82.8, and peaked at 11.29 GB against 16.90 GB (Find allocates the largest workspace of every
// algorithm at once; PyTorch 11.51). On an H100 (kit run of aa21f01) channels_last ResNet-50
// b128 took 58.0 ms with it against the legacy heuristics' 67.0 in AMP bf16 and 81.2 against
// 82.8 in TF32, the same losses (its parity rows passed). NCHW without benchmark stays on the
// legacy heuristics: within noise on both GPUs (0.98-1.01x).
inline bool graph_api_in_effect(int setting, bool benchmark, bool channels_last) {
  return setting < 0 ? benchmark || channels_last : setting != 0;
}

inline int64_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

inline std::string engine_tag(int64_t index, const std::vector<std::pair<int64_t, int64_t>>& knobs) {
  std::string s = "eng" + std::to_string(index);
  for (const auto& [type, value] : knobs) s += " k" + std::to_string(type) + "=" + std::to_string(value);
  return s;
}

}  // namespace oomlab::cudnn_graph
