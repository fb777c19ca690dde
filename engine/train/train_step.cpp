// train_step.cpp — the training step in phases (TrainStep) and host->device batch copies.
#include "engine/train/train_step.h"

#include <cstring>

#include "engine/core/backend.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/pinned_host.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/loss.h"
#include "engine/parallel/data_parallel.h"

namespace oomlab {

nlohmann::json StepMemory::to_json() const {
  return {{"start_allocated", start_allocated}, {"after_forward", after_forward},
          {"forward_peak", forward_peak},       {"after_backward", after_backward},
          {"backward_peak", backward_peak},     {"after_step", after_step},
          {"step_peak", step_peak},             {"reserved_peak", reserved_peak}};
}

TrainStep::TrainStep(nn::Module& model, Optimizer& opt, std::vector<StepStrategy*> strategies)
    : model_(model), opt_(opt), strategies_(std::move(strategies)) {}

void TrainStep::zero_grad() {
  MemoryContext ctx("step", "zero_grad");
  opt_.zero_grad(/*set_to_none=*/true);
}

Tensor TrainStep::forward_loss(const Tensor& x, const Tensor& y_in, StepOutput* counts) {
  Tensor logits = model_(x);   // each layer labels its own frame ("features.0/fwd")
  for (StepStrategy* s : strategies_) logits = s->model_output(logits);
  MemoryContext ctx("loss", "fwd");
  const TaskTargets t = task_targets(logits, x, y_in);
  Tensor loss = task_loss(logits, t.y);
  if (counts) {
    counts->correct += count_task_correct(logits, t.y);
    counts->scored += t.scored;
  }
  return loss;                 // the graph keeps what backward needs; logits die here
}

void TrainStep::backward(const Tensor& root) {
  MemoryContext ctx("step", "bwd");
  root.backward();
}

bool TrainStep::optimizer_step() {
  bool go = true;
  for (StepStrategy* s : strategies_) go = s->before_optimizer_step(opt_) && go;
  if (go) {
    MemoryContext ctx("optimizer", "optim");
    opt_.step();
  }
  for (StepStrategy* s : strategies_) s->after_optimizer_step(opt_, go);
  return go;
}

StepOutput TrainStep::run(const Tensor& x_in, const Tensor& y, bool track_memory) {
  Tensor x = x_in;
  for (StepStrategy* s : strategies_) x = s->model_input(x);
  const int64_t batch = x.size(0);
  int64_t micro_count = 1;
  for (StepStrategy* s : strategies_) micro_count = std::max(micro_count, s->micro_batches(batch));
  OOMLAB_CHECK(micro_count >= 1 && micro_count <= batch, "cannot split a batch of ", batch, " into ", micro_count,
               " micro-batches");
  for (int64_t splits = 0;; ++splits) {
    const char* phase = "forward";
    try {
      StepOutput out = attempt(x, y, micro_count, track_memory, &phase);
      out.oom_splits = splits;
      return out;
    } catch (const OutOfMemoryError& e) {
      // The attempt's graph died with its locals; drop partial gradients too.
      opt_.zero_grad(/*set_to_none=*/true);
      OomAction action = OomAction::propagate;
      for (StepStrategy* s : strategies_)
        if ((action = s->on_out_of_memory(e, phase, micro_count, batch)) != OomAction::propagate) break;
      if (action == OomAction::propagate)
        throw OutOfMemoryError(str_cat("in the ", phase, " phase of a training step: ", e.what()));
      if (action == OomAction::skip) {
        StepOutput out;
        out.skipped = true;
        out.skip_reason = str_cat("out of memory in ", phase, ": ", e.what());
        out.skip_phase = phase;
        out.micro_batches = micro_count;
        out.oom_splits = splits;
        return out;
      }
      if (micro_count == batch)
        throw OutOfMemoryError(str_cat("in the ", phase, " phase of a training step: the batch of ", batch,
                                       " samples cannot be split further (", micro_count,
                                       " micro-batches of one sample each still run out of memory): ", e.what()));
      micro_count = std::min(batch, micro_count * 2);
    }
  }
}

StepOutput TrainStep::attempt(const Tensor& x, const Tensor& y, int64_t micro_count, bool track_memory,
                              const char** phase) {
  CachingAllocator& al = allocator_for(x.device());
  auto cur = [&] { return al.stat("allocated_bytes.all.current"); };
  auto peak = [&] { return al.window_peak("allocated_bytes.all"); };   // the phase's; stats() keep the run's
  StepOutput out;
  out.micro_batches = micro_count;
  out.correct_counted = count_correct_;
  StepMemory& m = out.memory;
  const int64_t batch = x.size(0);
  zero_grad();
  if (track_memory) { al.reset_window_peaks(); m.start_allocated = cur(); }
  double loss_sum = 0;
  Tensor loss_total, loss_acc;   // loss_acc: the micro-batches' weighted sum on the device (device_loss_)
  for (int64_t k = 0, start = 0; k < micro_count; ++k) {
    const int64_t len = batch / micro_count + (k < batch % micro_count ? 1 : 0);
    const Tensor xk = micro_count == 1 ? x : x.narrow(0, start, len);
    const Tensor yk = micro_count == 1 ? y : y.narrow(0, start, len);
    start += len;
    *phase = "forward";
    for (StepStrategy* s : strategies_) s->before_forward(k, micro_count);
    Tensor loss = forward_loss(xk, yk, count_correct_ ? &out : nullptr);
    for (StepStrategy* s : strategies_) s->after_forward(k, micro_count);
    // Each micro-batch's mean loss weighted by its share of the samples (1/K for K equal
    // ones): the gradients add up to those of the whole batch's mean loss.
    Tensor root = micro_count == 1 ? loss : scale(loss, double(len) / double(batch));
    for (StepStrategy* s : strategies_) root = s->backward_root(root, k, micro_count);
    if (track_memory) {
      m.after_forward = std::max(m.after_forward, cur());
      m.forward_peak = std::max(m.forward_peak, peak());
      m.reserved_peak = std::max(m.reserved_peak, al.window_peak("reserved_bytes.all"));
      al.reset_window_peaks();
    }
    *phase = "backward";
    for (StepStrategy* s : strategies_) s->before_backward(k, micro_count);
    backward(root);
    root = Tensor();
    for (StepStrategy* s : strategies_) s->after_backward(k, micro_count);
    if (track_memory) {
      m.after_backward = cur();
      m.backward_peak = std::max(m.backward_peak, peak());
      m.reserved_peak = std::max(m.reserved_peak, al.window_peak("reserved_bytes.all"));
      al.reset_window_peaks();
    }
    loss = loss.detach();
    if (micro_count == 1) {
      loss_total = loss;
    } else if (device_loss_) {   // no host read: a graph capture holds the sum as device work
      Tensor weighted = scale(loss.to(DType::f64), double(len));
      loss_acc = loss_acc.defined() ? add(loss_acc, weighted) : weighted;
    } else if (!loss.device().is_meta()) {
      loss_sum += loss.item() * double(len);
    }
  }
  *phase = "optimizer";
  optimizer_step();
  if (track_memory) {
    m.after_step = cur();
    m.step_peak = std::max({m.forward_peak, m.backward_peak, peak()});
    m.reserved_peak = std::max(m.reserved_peak, al.window_peak("reserved_bytes.all"));
  }
  if (micro_count == 1) out.loss = loss_total;
  else if (device_loss_) out.loss = scale(loss_acc, 1.0 / double(batch));
  else out.loss = Tensor::full({}, loss_sum / double(batch), DType::f64, cpu_device());
  return out;
}

StepOutput train_step(nn::Module& model, Optimizer& opt, const Tensor& x, const Tensor& y, bool track_memory) {
  return TrainStep(model, opt).run(x, y, track_memory);
}

Tensor images_to_device(const float* data, const Shape& shape, Device device) {
  MemoryContext ctx("input", "data");
  if (device.is_cpu() || device.is_meta()) {
    Tensor t = Tensor::empty(shape, DType::f32, device);
    if (device.is_cpu()) std::memcpy(t.raw_data(), data, t.nbytes());
    return t;
  }
  Tensor t = Tensor::empty(shape, DType::f32, device);
  if (copy_host_to_device(device, t.raw_data(), data, t.nbytes())) return t;   // no host staging copy
  Tensor host = Tensor::empty(shape, DType::f32, cpu_device());
  std::memcpy(host.raw_data(), data, host.nbytes());
  t.copy_(host);
  return t;
}

namespace {
Tensor i64_to_device(const int64_t* data, const Shape& shape, Device device) {
  MemoryContext ctx("input", "data");
  const size_t bytes = size_t(shape_numel(shape)) * 8;
  if (device.is_cpu() || device.is_meta()) {
    Tensor t = Tensor::empty(shape, DType::i64, device);
    if (device.is_cpu() && bytes) std::memcpy(t.raw_data(), data, bytes);
    return t;
  }
  Tensor t = Tensor::empty(shape, DType::i64, device);
  if (copy_host_to_device(device, t.raw_data(), data, bytes)) return t;   // no host staging copy
  Tensor host = Tensor::empty(shape, DType::i64, cpu_device());
  if (bytes) std::memcpy(host.raw_data(), data, bytes);
  t.copy_(host);
  return t;
}

template <class T>
int64_t pixel_hits(const T* logits, const int64_t* target, int64_t N, int64_t K, int64_t HW,
                   std::vector<int64_t>* confusion) {
  int64_t hits = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < HW; ++p) {
      const T* l = logits + n * K * HW + p;
      int64_t best = 0;
      for (int64_t k = 1; k < K; ++k)
        if (l[k * HW] > l[best * HW]) best = k;
      const int64_t t = target[n * HW + p];
      hits += best == t;
      if (confusion && t >= 0 && t < K) (*confusion)[size_t(t * K + best)] += 1;
    }
  return hits;
}
}  // namespace

Tensor labels_to_device(const int64_t* data, int64_t n, Device device) { return i64_to_device(data, {n}, device); }
Tensor tokens_to_device(const int64_t* data, const Shape& shape, Device device) {
  return i64_to_device(data, shape, device);
}
Tensor masks_to_device(const int64_t* data, const Shape& shape, Device device) {
  return i64_to_device(data, shape, device);
}

namespace {
// A batch the loader pinned, on an accelerator with pinned memory: one asynchronous copy
// from the pinned block (PyTorch's .to(device, non_blocking=True) after pin_memory).
Tensor from_pinned(const HostBatch& b, size_t offset, size_t bytes, const Shape& shape, DType dtype,
                   Device device) {
  MemoryContext ctx("input", "data");
  Tensor t = Tensor::empty(shape, dtype, device);
  OOMLAB_CHECK_T(InternalError, t.nbytes() == bytes, "pinned batch: ", bytes, " bytes for a tensor of ",
                 t.nbytes());
  copy_from_pinned(device, t.raw_data(), static_cast<const char*>(b.pinned.get()) + offset, bytes);
  return t;
}
bool use_pinned(const HostBatch& b, Device device) { return b.pinned && has_pinned_host_memory(device); }
}  // namespace

Tensor batch_input_to_device(const HostBatch& b, Device device) {
  if (use_pinned(b, device)) return from_pinned(b, 0, b.input_bytes(), b.shape, b.input_dtype, device);
  return b.is_tokens() ? tokens_to_device(b.tokens.data(), b.shape, device)
                       : images_to_device(b.images.data(), b.shape, device);
}

Shape batch_target_shape(const HostBatch& b) { return b.target_shape.size() <= 1 ? Shape{b.n} : b.target_shape; }

Tensor batch_target_to_device(const HostBatch& b, Device device) {
  if (use_pinned(b, device))
    return from_pinned(b, b.pinned_target_offset, b.target_bytes(), batch_target_shape(b), DType::i64, device);
  return b.target_shape.size() <= 1 ? labels_to_device(b.labels.data(), b.n, device)
                                    : masks_to_device(b.masks.data(), b.target_shape, device);
}

namespace {
// `bytes` of host memory into the existing device tensor dst (pinned: one asynchronous
// copy; pageable: the backend's direct copy, or a staged one); nothing on meta.
void upload_into(Tensor dst, const void* host, size_t bytes, bool pinned) {
  OOMLAB_CHECK_T(InternalError, dst.nbytes() == bytes && dst.is_contiguous(), "upload_into: ", bytes,
                 " bytes for ", dst.str());
  const Device d = dst.device();
  if (d.is_meta() || bytes == 0) return;
  if (d.is_cpu()) { std::memcpy(dst.raw_data(), host, bytes); return; }
  if (pinned) { copy_from_pinned(d, dst.raw_data(), host, bytes); return; }
  if (copy_host_to_device(d, dst.raw_data(), host, bytes)) return;
  Tensor staged = Tensor::empty(dst.shape(), dst.dtype(), cpu_device());
  std::memcpy(staged.raw_data(), host, bytes);
  dst.copy_(staged);
}
}  // namespace

void batch_into(const HostBatch& b, const Tensor& x, const Tensor& y) {
  MemoryContext ctx("input", "data");
  OOMLAB_CHECK_T(InternalError, x.shape() == b.shape && y.numel() == int64_t(b.targets().size()),
                 "batch_into: a batch of shape ", shape_str(b.shape), " into ", x.str(), " and ", y.str());
  const bool pinned = use_pinned(b, x.device());
  const char* base = pinned ? static_cast<const char*>(b.pinned.get()) : nullptr;
  const void* input = pinned ? static_cast<const void*>(base)
                             : b.is_tokens() ? static_cast<const void*>(b.tokens.data()) : b.images.data();
  upload_into(x, input, b.input_bytes(), pinned);
  upload_into(y, pinned ? base + b.pinned_target_offset : static_cast<const void*>(b.targets().data()),
              b.target_bytes(), pinned);
}

Tensor next_token_targets(const Tensor& ids) {
  const int64_t B = ids.size(0), T = ids.size(1);
  Tensor last = ids.device().is_meta()
                    ? Tensor::empty({B, 1}, DType::i64, ids.device())
                    : copy_to_device(Tensor::from_vector_i64(std::vector<int64_t>(size_t(B), kNllIgnoreIndex), {B, 1}),
                                     ids.device());
  return cat({ids.narrow(1, 1, T - 1), last}, 1);
}

TaskTargets task_targets(const Tensor& logits, const Tensor& x, const Tensor& y) {
  if (logits.dim() == 3 && x.dim() == 2 && x.dtype() == DType::i64 && y.dim() == 1)
    return {next_token_targets(x), x.size(0) * std::max<int64_t>(x.size(1) - 1, 0)};
  return {y, y.numel()};
}

Tensor task_loss(const Tensor& logits, const Tensor& target) {
  if (logits.dim() == 3 && target.dim() == 2)   // tokens: [B, T, V] against [B, T]
    return cross_entropy(logits.reshape({logits.size(0) * logits.size(1), logits.size(2)}),
                         target.reshape({target.numel()}));
  return target.dim() == 1 ? cross_entropy(logits, target) : pixel_cross_entropy(logits, target);
}

int64_t count_task_correct(const Tensor& logits, const Tensor& target, std::vector<int64_t>* confusion) {
  if (logits.dim() == 3 && target.dim() == 2 && !confusion)   // next-token hits (ignored positions never hit)
    return count_correct(logits.reshape({logits.size(0) * logits.size(1), logits.size(2)}),
                         target.reshape({target.numel()}));
  if (target.dim() == 1 && !confusion) return count_correct(logits, target);
  OOMLAB_CHECK_T(ShapeError, logits.dim() >= 2 && logits.size(0) == target.size(0) &&
                     logits.dim() == target.dim() + 1,
                 "count_task_correct: logits ", shape_str(logits.shape()), " do not match target ",
                 shape_str(target.shape()));
  if (logits.device().is_meta()) return 0;
  Tensor l = logits, t = target;
  if (!l.device().is_cpu()) {   // accelerator: copy to host (cpu allocator only)
    Tensor hl = Tensor::empty(l.shape(), l.dtype(), cpu_device()),
           ht = Tensor::empty(t.shape(), DType::i64, cpu_device());
    hl.copy_(l);
    ht.copy_(t);
    l = hl; t = ht;
  }
  l = l.contiguous(); t = t.contiguous();
  const int64_t N = l.size(0), K = l.size(1), HW = l.numel() / std::max<int64_t>(1, N * K);
  if (confusion) OOMLAB_CHECK(int64_t(confusion->size()) == K * K, "count_task_correct: confusion must have K*K = ",
                              K * K, " entries, got ", confusion->size());
  if (l.dtype() == DType::f64) return pixel_hits(l.data<double>(), t.data<int64_t>(), N, K, HW, confusion);
  if (l.dtype() == DType::f16 || l.dtype() == DType::bf16) {   // autocast logits: widened on the host
    std::vector<float> wide(size_t(l.numel()));
    low_to_float(l.dtype(), l.data<uint16_t>(), wide.data(), l.numel());
    return pixel_hits(wide.data(), t.data<int64_t>(), N, K, HW, confusion);
  }
  OOMLAB_CHECK_T(DTypeError, l.dtype() == DType::f32, "count_task_correct: unsupported logits dtype ",
                 dtype_name(l.dtype()));
  return pixel_hits(l.data<float>(), t.data<int64_t>(), N, K, HW, confusion);
}

double mean_iou(const std::vector<int64_t>& confusion, int64_t K) {
  double sum = 0;
  int64_t present = 0;
  for (int64_t k = 0; k < K; ++k) {
    int64_t tp = confusion[size_t(k * K + k)], fn = 0, fp = 0;
    for (int64_t j = 0; j < K; ++j)
      if (j != k) { fn += confusion[size_t(k * K + j)]; fp += confusion[size_t(j * K + k)]; }
    if (tp + fn + fp == 0) continue;   // class absent from both: not counted
    sum += double(tp) / double(tp + fn + fp);
    ++present;
  }
  return present ? sum / double(present) : 0.0;
}

}  // namespace oomlab
