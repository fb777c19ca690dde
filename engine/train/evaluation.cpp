// evaluation.cpp — the trainer's evaluation pass (evaluation.h).
#include "engine/train/evaluation.h"

#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/memory/pinned_host.h"

namespace oomlab {
namespace {
// Scores one batch (or, under --on-oom split, its halves when it does not fit; under skip,
// nothing when it does not fit). Adds to loss_sum / correct / scored and r.
void evaluate_batch(nn::Module& model, const Tensor& x_in, const Tensor& y, StepStrategy* io, OnOom on_oom,
                    int64_t per_sample, std::vector<int64_t>* confusion, double& loss_sum, int64_t& correct,
                    int64_t& scored, EvalResult& r) {
  const int64_t n = x_in.size(0);
  try {
    Tensor x = io ? io->model_input(x_in) : x_in;
    Tensor logits = model(x);
    if (io) logits = io->model_output(logits);
    const double loss = task_loss(logits, y).item();
    const int64_t hits = count_task_correct(logits, y, confusion);
    loss_sum += loss * double(n);
    correct += hits;
    r.samples += n;
    scored += n * per_sample;
  } catch (const OutOfMemoryError& e) {
    if (on_oom == OnOom::skip) { r.skipped_samples += n; return; }
    if (on_oom != OnOom::split || n == 1) throw OutOfMemoryError(str_cat("in evaluation: ", e.what()));
    const int64_t h = n / 2;
    evaluate_batch(model, x_in.narrow(0, 0, h), y.narrow(0, 0, h), io, on_oom, per_sample, confusion, loss_sum,
                   correct, scored, r);
    evaluate_batch(model, x_in.narrow(0, h, n - h), y.narrow(0, h, n - h), io, on_oom, per_sample, confusion,
                   loss_sum, correct, scored, r);
  }
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
                    StepStrategy* io, OnOom on_oom, int workers, bool pin_memory, CommQueue* comm) {
  NoGradGuard ng;
  model.eval();
  DataLoader loader(test, batch, /*shuffle=*/false, /*drop_last=*/false, 0, workers);
  // Distributed: this rank's shard; its padding (the shard's tail) is not scored.
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
  const int64_t K = test.num_classes(), per_sample = test.target_numel();
  std::vector<int64_t> confusion(size_t(seg ? K * K : 0), 0);
  while ((max_batches < 0 || nb < max_batches) && visited < real && loader.next(b)) {
    Tensor x = batch_input_to_device(b, dev);
    Tensor y = batch_target_to_device(b, dev);
    if (visited + b.n > real) {   // DistributedSampler's padding
      x = x.narrow(0, 0, real - visited);
      y = y.narrow(0, 0, real - visited);
    }
    visited += b.n;
    evaluate_batch(model, x, y, io, on_oom, per_sample, seg ? &confusion : nullptr, loss_sum, correct, scored, r);
    ++nb;
  }
  model.train();
  if (world > 1) {   // every rank's outputs: the metric sums (and confusion) of all shards
    std::vector<double> v = {loss_sum, double(correct), double(r.samples), double(scored), double(r.skipped_samples)};
    for (int64_t c : confusion) v.push_back(double(c));
    all_reduce_host(*comm, v);
    loss_sum = v[0];
    correct = int64_t(v[1]);
    r.samples = int64_t(v[2]);
    scored = int64_t(v[3]);
    r.skipped_samples = int64_t(v[4]);
    for (size_t i = 0; i < confusion.size(); ++i) confusion[i] = int64_t(v[5 + i]);
  }
  if (r.samples) { r.loss = loss_sum / double(r.samples); r.accuracy = double(correct) / double(scored); }
  if (seg) r.mean_iou = mean_iou(confusion, K);
  return r;
}

}  // namespace oomlab
