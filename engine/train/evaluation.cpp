// evaluation.cpp — the trainer's evaluation pass (evaluation.h).
#include "engine/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/memory/pinned_host.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/softmax.h"

namespace oomlab {
namespace {
Tensor to_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype(), cpu_device());
  h.copy_(t);
  return h;
}

// The model's output for x and the targets it is scored against (task_targets: a causal
// LM's next tokens, as in training); with xf (the mirrored inputs, test-time augmentation)
// the mean of the two softmax outputs, and the loss computed here from those probabilities
// (the mean of -log p[label]) -- argmax, and so accuracy, is the same for probabilities as
// for logits.
struct Scored {
  Tensor out;
  TaskTargets targets;
};
Scored scored_output(nn::Module& model, const Tensor& x_in, const Tensor& xf_in, const Tensor& y, StepStrategy* io,
                     double& loss) {
  auto forward = [&](const Tensor& in) {
    Tensor out = model(io ? io->model_input(in) : in);
    return io ? io->model_output(out) : out;
  };
  Tensor logits = forward(x_in);
  if (!xf_in.defined()) {
    TaskTargets t = task_targets(logits, x_in, y);
    loss = task_loss(logits, t.y).item();
    return {logits, std::move(t)};
  }
  Tensor p = scale(add(softmax(logits.to(DType::f32)), softmax(forward(xf_in).to(DType::f32))), 0.5);
  const std::vector<double> probs = to_host(p).to_vector();
  const std::vector<int64_t> labels = to_host(y).to_vector_i64();
  const int64_t k = p.size(1);
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i)
    sum -= std::log(std::max(probs[i * size_t(k) + size_t(labels[i])], 1e-300));
  loss = labels.empty() ? 0.0 : sum / double(labels.size());
  return {p, {y, y.numel()}};
}

// Scores one batch (or, under --on-oom split, its halves when it does not fit; under skip,
// nothing when it does not fit). Adds to loss_sum / correct / scored and r.
void evaluate_batch(nn::Module& model, const Tensor& x_in, const Tensor& xf_in, const Tensor& y, StepStrategy* io,
                    OnOom on_oom, std::vector<int64_t>* confusion, double& loss_sum,
                    int64_t& correct, int64_t& scored, EvalResult& r) {
  const int64_t n = x_in.size(0);
  try {
    double loss = 0;
    const Scored s = scored_output(model, x_in, xf_in, y, io, loss);
    const int64_t hits = count_task_correct(s.out, s.targets.y, confusion);
    loss_sum += loss * double(n);
    correct += hits;
    r.samples += n;
    scored += s.targets.scored;
  } catch (const OutOfMemoryError& e) {
    if (on_oom == OnOom::skip) { r.skipped_samples += n; return; }
    if (on_oom != OnOom::split || n == 1) throw OutOfMemoryError(str_cat("in evaluation: ", e.what()));
    const int64_t h = n / 2;
    auto part = [&](const Tensor& t, int64_t from, int64_t len) { return t.defined() ? t.narrow(0, from, len) : t; };
    evaluate_batch(model, part(x_in, 0, h), part(xf_in, 0, h), y.narrow(0, 0, h), io, on_oom, confusion,
                   loss_sum, correct, scored, r);
    evaluate_batch(model, part(x_in, h, n - h), part(xf_in, h, n - h), y.narrow(0, h, n - h), io, on_oom,
                   confusion, loss_sum, correct, scored, r);
  }
}

// The batch's images mirrored along the width (test-time augmentation), as a pageable batch.
HostBatch mirrored(const HostBatch& b) {
  HostBatch f = b;
  f.pinned.reset();
  const int64_t w = b.shape.back(), rows = int64_t(b.images.size()) / std::max<int64_t>(w, 1);
  for (int64_t r = 0; r < rows; ++r) std::reverse(f.images.begin() + r * w, f.images.begin() + (r + 1) * w);
  return f;
}

// Sums a few host values over the ranks (through the rank's queue; values travel in float64).
void all_reduce_host(CommQueue& q, std::vector<double>& v) {
  Tensor host = Tensor::from_vector(v, {int64_t(v.size())}, DType::f64);
  Tensor dev = Tensor::empty(host.shape(), DType::f64, q.device());
  dev.copy_(host);
  q.run([&](Communicator& c) { c.all_reduce(dev, ReduceOp::sum); });
  host.copy_(dev);
  v = host.to_vector();
}
}  // namespace

EvalResult evaluate(nn::Module& model, const Dataset& test, int64_t batch, int64_t max_batches, Device dev,
                    StepStrategy* io, OnOom on_oom, int workers, bool pin_memory, CommQueue* comm, bool tta_flip) {
  NoGradGuard ng;
  model.eval();
  DataLoader loader(test, batch, /*shuffle=*/false, /*drop_last=*/false, 0, workers);
  // Distributed: this rank's shard; its padding (the shard's tail) is not scored, only
  // counted (padding_samples / padding_correct: what a gather that keeps it would add).
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  if (world > 1) loader.set_shard(rank, world);
  const int64_t real = (test.size() - rank + world - 1) / world;
  int64_t visited = 0;
  if (pin_memory) loader.set_pinner([dev](size_t n) { return pinned_host_alloc(dev, n); });
  HostBatch b;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0, nb = 0, scored = 0;
  const bool seg = !test.target_shape().empty();
  const int64_t K = test.num_classes();
  std::vector<int64_t> confusion(size_t(seg ? K * K : 0), 0);
  while ((max_batches < 0 || nb < max_batches) && loader.next(b)) {
    Tensor x = batch_input_to_device(b, dev);
    Tensor xf = tta_flip ? batch_input_to_device(mirrored(b), dev) : Tensor();
    Tensor y = batch_target_to_device(b, dev);
    if (visited + b.n > real) {   // DistributedSampler's padding: counted, not scored
      const int64_t keep = std::max<int64_t>(real - visited, 0), pad = b.n - keep;
      double unused = 0;
      r.padding_samples += pad;
      const Scored s = scored_output(model, x.narrow(0, keep, pad), xf.defined() ? xf.narrow(0, keep, pad) : xf,
                                     y.narrow(0, keep, pad), io, unused);
      r.padding_correct += count_task_correct(s.out, s.targets.y, nullptr);
      x = x.narrow(0, 0, keep);
      if (xf.defined()) xf = xf.narrow(0, 0, keep);
      y = y.narrow(0, 0, keep);
    }
    visited += b.n;
    if (x.size(0) == 0) continue;   // a batch of padding only
    evaluate_batch(model, x, xf, y, io, on_oom, seg ? &confusion : nullptr, loss_sum, correct, scored, r);
    ++nb;
  }
  model.train();
  if (world > 1) {   // every rank's outputs: the metric sums (and confusion) of all shards
    std::vector<double> v = {loss_sum, double(correct), double(r.samples), double(scored), double(r.skipped_samples),
                             double(r.padding_samples), double(r.padding_correct)};
    for (int64_t c : confusion) v.push_back(double(c));
    all_reduce_host(*comm, v);
    loss_sum = v[0];
    correct = int64_t(v[1]);
    r.samples = int64_t(v[2]);
    scored = int64_t(v[3]);
    r.skipped_samples = int64_t(v[4]);
    r.padding_samples = int64_t(v[5]);
    r.padding_correct = int64_t(v[6]);
    for (size_t i = 0; i < confusion.size(); ++i) confusion[i] = int64_t(v[7 + i]);
  }
  r.correct = correct;
  if (r.samples) { r.loss = loss_sum / double(r.samples); r.accuracy = double(correct) / double(scored); }
  if (seg) r.mean_iou = mean_iou(confusion, K);
  return r;
}

}  // namespace oomlab
