// evaluation.h — the trainer's evaluation pass: the test set under no_grad in eval mode,
// loss, accuracy (samples, or pixels for segmentation) and mean IoU (segmentation).
// Contracts:
//  * --on-oom applies: a batch that does not fit is halved (split) or left out and counted
//    in skipped_samples (skip); raise rethrows, saying it happened in evaluation.
//  * Distributed (comm given, DDP): each rank scores its DistributedSampler shard of the test
//    set without the padding, then the metric sums and the confusion matrix are all-reduced
//    through the rank's queue, so every rank returns the single-device figures (up to the
//    order of float sums).
#pragma once
#include <cstdint>

#include "engine/data/dataset.h"
#include "engine/nn/module.h"
#include "engine/parallel/comm_queue.h"
#include "engine/train/oom_recovery.h"
#include "engine/train/train_step.h"

namespace oomlab {

// accuracy: samples (classification) or pixels (segmentation) whose argmax is right;
// mean_iou: segmentation only (-1 otherwise), over classes present in target or prediction.
// padding_*: distributed only -- the DistributedSampler padding (repeated samples that make
// the shards equal) and how many of them the model gets right: not in the figures, reported
// so that what a gather keeping them would say can be shown.
struct EvalResult {
  double loss = 0, accuracy = 0, mean_iou = -1;
  int64_t samples = 0, skipped_samples = 0, correct = 0, padding_samples = 0, padding_correct = 0;
};

// max_batches < 0: the whole (shard of the) test set. io: the --half input/output casts.
// tta_flip: score the mean of the softmax outputs of the inputs and of their mirror image
// (classification; the loss is then the mean -log of that probability at the label).
EvalResult evaluate(nn::Module& model, const Dataset& test, int64_t batch, int64_t max_batches, Device dev,
                    StepStrategy* io, OnOom on_oom, int workers, bool pin_memory, CommQueue* comm = nullptr,
                    bool tta_flip = false);

}  // namespace oomlab
