// attention.h — kernel argument struct and tables of fused attention
// (engine/ops/attention.h: fused_scaled_dot_product_attention), the FlashAttention scheme
// (Dao et al. 2022): forward keeps only the output and each row's log-sum-exp; backward
// recomputes the scores row by row. Layout: q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv],
// out / dout [BH, Tq, Dv], lse [BH, Tq], contiguous; BH = B x heads, row bh belongs to batch
// bh / heads of the uint8 key_padding_mask [B, Tk] (1 = padded; may be null). Scores are
// scale * q.k; a row whose every key is padded gives zeros (lse -inf), as masked_softmax.
// Dropout on the probabilities (p > 0): element e = (bh * Tq + i) * Tk + j keeps iff
// uint_to_unit_float(Generator::block(seed, base, e / 4)[e % 4]) >= p, scaled by 1/(1-p):
// the mask eager attention's dropout draws over its [B, heads, Tq, Tk] probabilities from
// the same generator state, replayed in backward from (seed, base) alone. Backward
// overwrites dq, dk, dv. No [Tq, Tk] buffer is ever allocated: each row's Tk scores live
// in the kernel's scratch (CPU: per thread, at most 64 query rows x Tk). CPU kernels:
// kernels/cpu/attention_cpu.cpp (float32, float64; BLAS GEMMs on 64-row blocks).
#pragma once
#include <string_view>
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct FusedAttentionArgs {
  const void *q, *k, *v;
  const uint8_t* mask;
  void *out, *lse;
  const void* dout;
  void *dq, *dk, *dv;
  int64_t BH, heads, Tq, Tk, D, Dv;
  double scale, p;
  uint64_t seed, base;
  bool causal = false;   // keys j > query i masked too (torch's is_causal, top-left aligned)
  // q, k, v (and dout) are float32 copies of float16 / bfloat16 tensors: their values fit
  // TF32 exactly, so tensor-core kernels may round to TF32 without changing them.
  bool from_16bit = false;
  bool from_f16 = false;   // with from_16bit: the copies hold float16 values (else bfloat16)
};

// flop_counter.h: the forward's two products, 2 Tq Tk (D + Dv) per head; the backward
// recomputes the scores and forms dV, dP, dQ and dK: 2 Tq Tk (3 D + 2 Dv).
inline double kernel_flops(const FusedAttentionArgs& a, std::string_view op) {
  const double tt = 2.0 * double(a.BH) * double(a.Tq) * double(a.Tk);
  return op.find("backward") != std::string_view::npos ? tt * double(3 * a.D + 2 * a.Dv) : tt * double(a.D + a.Dv);
}
inline MatrixKind kernel_matrix_kind(const FusedAttentionArgs&) { return MatrixKind::attention; }
OOMLAB_KERNEL_TABLE(fused_attention_forward, FusedAttentionArgs, "fused_attention")
OOMLAB_KERNEL_TABLE(fused_attention_backward, FusedAttentionArgs, "fused_attention_backward")

}  // namespace oomlab
