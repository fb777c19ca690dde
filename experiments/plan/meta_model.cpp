// meta_model.cpp — a RunSpec's model and batch on meta (meta_model.h).
#include "experiments/plan/meta_model.h"

#include "engine/core/error.h"
#include "experiments/plan/memory_report.h"
#include "engine/nn/checkpoint_plan.h"
#include "models/graph_model.h"

namespace oomlab {

Built build_on_meta(const RunSpec& spec, Device device) {
  Built b;
  b.model_name = spec.model;
  b.tokens = model_input_kind(spec.model) == InputKind::tokens;
  b.segmentation = model_task_kind(spec.model) == TaskKind::segmentation;
  b.classes = spec.num_classes > 0 ? spec.num_classes : default_classes_for(spec.model);
  spec.arch.check_fits(spec.model);
  ModelConfig cfg = default_model_config(spec.model);
  cfg.num_classes = b.classes;
  cfg.device = device;
  spec.arch.apply(cfg);
  if (b.tokens) {
    OOMLAB_CHECK(spec.input.empty(), spec.model, " takes token ids: give --seq-len N, not --input");
    OOMLAB_CHECK(spec.seq_len >= 0, "--seq-len must be >= 1 (got ", spec.seq_len, ")");
    if (spec.seq_len > 0) cfg.seq_len = spec.seq_len;
    check_seq_fits(spec.model, spec.arch, cfg.seq_len, spec.seq_len > 0 ? "--seq-len" : "the default --seq-len");
  } else {
    OOMLAB_CHECK(spec.seq_len == 0, "--seq-len is for token models; ", spec.model, " takes images (--input C,H,W)");
    Shape in = spec.input.empty() ? default_input_for(spec.model) : spec.input;
    OOMLAB_CHECK_T(ShapeError, in.size() == 3, "--input must be C,H,W (got ", shape_str(in), ")");
    cfg.in_channels = in[0];
    cfg.height = in[1];
    cfg.width = in[2];
  }
  Shape s = model_input_shape(spec.model, cfg, 1);
  b.input = Shape(s.begin() + 1, s.end());
  b.cfg = cfg;
  b.model = build_model(spec.model, cfg);
  apply_checkpoint_plan(*b.model, plan_checkpoints(*b.model, model_probe_input(spec.model, cfg), spec.checkpoint));
  return b;
}

// The batch's input on meta (token ids are never read there, so their values do not matter).
// The batch as the trainer hands it to the step (--channels-last: laid out so, 4-D inputs).
Tensor make_input(const Built& b, int64_t batch, bool channels_last) {
  const Shape shape = model_input_shape(b.model_name, b.cfg, batch);
  const MemoryFormat f = channels_last && shape.size() == 4 ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  return Tensor::empty_format(shape, b.tokens ? DType::i64 : DType::f32, meta_device(), f);
}

Tensor make_target(const Built& b, int64_t batch) {
  if (!b.segmentation) return Tensor::empty({batch}, DType::i64, meta_device());
  return Tensor::empty({batch, b.input[1], b.input[2]}, DType::i64, meta_device());
}

int64_t bytes_of(const nn::NamedTensors& ts) {
  int64_t s = 0;
  for (const auto& [n, t] : ts) s += int64_t(t.nbytes());
  return s;
}

}  // namespace oomlab
