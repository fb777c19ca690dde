// planner.h — `oomlab plan` as a library call: which precision, activation checkpointing,
// attention, memory layout, ReLU fusion and micro-batch x accumulation train a model at a
// given batch on a given card fastest, each candidate's peak exact (a steady training step
// on meta, estimate_memory) and its step time predicted by the calibrated time model
// (time_model.h) over that meta step's counted work.
// Contracts:
//  * The search: precision fp32 (--allow-tf32 none), TF32 (all), bf16 / fp16 autocast
//    (PyTorch's default cuDNN TF32; fp16 with dynamic loss scaling), half (model.half() with
//    float32 master weights and dynamic loss scaling, when every op of the step has a CUDA
//    float16 kernel); a precision the card has no tensor-core path for is left out.
//    Checkpoint none, sqrt, all (and selective for the zoo's BERT); attention eager and fused
//    (models with that use); channels-last on and off (image models that take it); fuse-relu
//    on and off (models with that use). For each, the largest micro-batch that divides the
//    per-rank batch and fits: peak reserved <= capacity - reserve. The peak grows with the
//    micro-batch, so a binary search over the divisors finds it; a candidate whose
//    micro-batch 1 does not fit is out. With accumulate false (plan --batch B) the only
//    micro-batch is the whole per-rank batch: it fits or the candidate is out.
//  * Time: predicted_ms = the time model's prediction for the micro-step x accumulate (the
//    optimizer's share counted per micro-step: an over-estimate of accumulate - 1 optimizer
//    passes), when a calibration exists and the card's peaks are known; compute_bound_ms =
//    the step's FLOPs over the card's dense peaks x accumulate (a lower bound) always.
//  * gpus > 1: each rank trains its share under DDP (PyTorch's 25 MiB buckets): a rank's
//    peak is a meta step with the reducer (ddp_on_meta.h: its buckets count); the all-reduce
//    of the synchronised micro-step (comm_time.h: the link's datasheet rate) is added whole
//    to predicted_ms (no overlap with backward), its last bucket to compute_bound_ms; every
//    such candidate's `unseen` names the communication (no multi-GPU record).
//  * gpus > 1 also searches ZeRO stages 1-3 (zoo models; stage 3 refuses checkpointing and
//    channels-last: those candidates say so): exact peaks from meta ranks; stages 1 and 2
//    communicate as DDP, stage 3 1.5 times that (parameters gathered for forward and
//    backward); the time model counts each rank's share of the optimizer's work.
//  * 1 < gpus <= kDataParallelMaxGpus also searches DataParallel (one process, N devices of
//    one machine; not with half; past 16 cards no box holds them, and each candidate's meta
//    step of every replica would take minutes): exact
//    peaks of every device from one meta step of the whole micro-step (dp_on_meta.h), the
//    fullest one fitting; micro_batch is each device's share. Time: device 0's work (its
//    replica's, the loss's, the reduction's, the optimizer's) plus the slowest device's excess
//    over device 0's replica, and DataParallel's copies every micro-step (comm_time.h).
//    Then balanced DataParallel from the fastest DataParallel candidate (or, none fitting,
//    the smallest): the largest share some device-0 share gpu0_bsz <= it lets fit (the
//    largest gpu0_bsz device 0 holds), searched from that candidate's share up.
//  * ZeRO-Offload when nothing else fits (zoo models): stage 2 with the optimizer offloaded,
//    stage 3 with it and with the parameters too, over the ranks or on one GPU (a world of
//    one); exact device peaks (the host's bytes are not the card's); time adds the copies at
//    the host link's datasheet rate (gpu_table.h) and names the host's step as unseen, so
//    such a candidate is recommended only where nothing measured fits.
//  * Pruning: once a precision's first meta step says its weights, gradients, optimizer
//    state, master weights and buckets alone exceed the capacity less the reserve, its other
//    candidates are out without a meta step (counted in `pruned`).
//  * recommended: the fitting candidate with the least time (predicted, else the bound),
//    then the smallest peak, among those whose every time term and precision the
//    calibration measured (`unseen` empty) when any fits; none when nothing fits
//    (smallest_peak_bytes then says what the smallest needs, at the least micro-batch
//    searched (1, or --batch's): more cards
//    shrink only the batch, never below that) or when the card's peaks are unknown
//    (--device-memory: every time is 0).
//  * A request no candidate can even run (every one refused before its meta step: a
//    sequence past the position table, a shape the layers refuse) is one ValueError naming
//    the distinct reasons, not a plan.
//  * technique_reasons: for each technique choice the recommendation did not take, the
//    candidate that differs from it in that choice alone and why it lost (does not fit, or
//    its time; a faster one names the uncalibrated terms that kept it out).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/plan/gpu_table.h"
#include "experiments/plan/run_spec.h"
#include "experiments/plan/time_model.h"

namespace oomlab {

// DataParallel drives one machine's cards from one process; the largest boxes hold 16.
constexpr int kDataParallelMaxGpus = 16;
// Whether a plan over `gpus` cards searches DataParallel (and balanced DataParallel).
constexpr bool searches_data_parallel(int gpus) { return gpus > 1 && gpus <= kDataParallelMaxGpus; }

struct PlanRequest {
  RunSpec model;                        // model, input / seq_len, classes, arch (attention is searched)
  GpuSpec gpu;                          // its memory_bytes is the capacity
  uint64_t reserve_bytes = 0;           // CUDA context and library workspaces, kept free
  int gpus = 1;
  int64_t global_batch = 0;             // samples per optimizer step over all ranks
  bool accumulate = true;               // false (plan --batch): micro-batch = global_batch / gpus
  std::string optimizer = "adamw";
  const TimeModel* time_model = nullptr;   // nullptr: rank by the compute bound
};

struct PlanCandidate {
  std::string precision;                // fp32 | tf32 | bf16 | fp16 | half
  std::string checkpoint;               // a checkpoint policy's text
  std::string attention;                // eager | fused | "" (no attention use)
  bool channels_last = false, fuse_relu = false;
  int zero = 0;                         // ZeRO stage (gpus > 1)
  std::string parallel;                 // gpus > 1: ddp | dp | bdp ("" on one GPU, but with offload: ddp)
  std::string offload;                  // ZeRO-Offload: optimizer | params ("" without)
  int64_t gpu0_bsz = -1;                // bdp: device 0's samples per micro-step
  int64_t micro_batch = 0, accumulate = 0;   // 0: does not fit; per rank (dp, bdp: per device)
  int64_t peak_reserved_bytes = -1;     // at micro_batch (or, not fitting, at micro-batch 1)
  double step_flops = 0;                // per optimizer step
  double compute_bound_ms = 0;
  double predicted_ms = 0;              // 0: no time model
  double comm_ms = 0;                   // DDP's all-reduce per optimizer step (0: one GPU; < 0: link unknown)
  double offload_ms = 0;                // ZeRO-Offload's host-link copies per optimizer step
  std::vector<std::string> unseen;      // features the calibration never saw (time_model.h)
  std::string why_not;                  // "" when it fits
  double time_ms() const { return predicted_ms > 0 ? predicted_ms : compute_bound_ms; }
  std::string techniques() const;       // "bf16, checkpoint sqrt, channels-last", ...
  nlohmann::json to_json() const;
};

struct Plan {
  std::vector<PlanCandidate> candidates;
  std::optional<size_t> recommended;
  std::vector<size_t> frontier;         // fitting candidates no other beats on both peak and bound
  int64_t meta_steps = 0;               // estimate_memory calls made
  int64_t pruned = 0;                   // candidates ruled out by a precision's static bytes
  std::map<std::string, int64_t> static_bytes;   // per "precision/zeroN", from its first meta step
  int64_t smallest_peak_bytes = -1;     // the least any candidate needs (least micro-batch)
  int64_t params = 0;                   // the model's parameters (its first meta step's)
  std::vector<std::string> technique_reasons;
};

Plan make_plan(const PlanRequest& r, const std::function<void(const std::string&)>& progress = {});

// A candidate as a training run (what train_flags prints: synthetic data of its model's
// kind, its micro-batch and accumulation; the caller sets device and steps) and the
// --allow-tf32 it runs under (none | cudnn | all).
RunSpec candidate_train_spec(const PlanRequest& r, const PlanCandidate& c);
std::string candidate_allow_tf32(const PlanRequest& r, const PlanCandidate& c);
// The recommended candidate as `oomlab train` flags and as PyTorch settings.
std::string train_flags(const PlanRequest& r, const PlanCandidate& c);
std::string pytorch_settings(const PlanRequest& r, const PlanCandidate& c);
// The GPU table's cards whose memory less the reserve holds `peak_bytes`.
std::vector<std::string> cards_that_hold(int64_t peak_bytes, uint64_t reserve_bytes);

}  // namespace oomlab
