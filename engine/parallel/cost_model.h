// cost_model.h — the alpha-beta (latency-bandwidth) cost of an all-reduce, per algorithm:
//   time = fixed + alpha x steps(n) + beta x bottleneck_bytes(n, S)
// steps: messages in sequence on the critical path; bottleneck bytes: what the busiest rank
// receives. Ring (reduce-scatter + all-gather): 2(n-1) steps, 2(n-1)/n x S per rank, the
// same at every rank (flat in n). Parameter server: 2(n-1) messages through the server in
// sequence, (n-1) x S received at rank 0 (linear in n). fixed is the per-call software cost.
// fit_cost: least squares of the relative error over measured (n, S, time) samples (sizes
// span orders of magnitude: small calls must weigh as much as large ones); r2 is that of
// log time. With fewer than 3 distinct rank counts alpha cannot be told from fixed and is 0
// (fixed absorbs it); a negative fixed is refitted as 0 (alpha and beta alone).
#pragma once
#include <vector>

#include "engine/parallel/local_comm.h"

namespace oomlab {

struct CostSample { int ranks; double bytes, time_us; };
struct CollectiveCost {
  double fixed_us = 0, alpha_us = 0, beta_us_per_byte = 0;
  double r2 = 0;
  int samples = 0;
  double bandwidth_GBps() const { return beta_us_per_byte > 0 ? 1e-3 / beta_us_per_byte : 0.0; }
};

double all_reduce_steps(AllReduceAlgo algo, int ranks);
double bottleneck_bytes(AllReduceAlgo algo, int ranks, double bytes);
CollectiveCost fit_cost(AllReduceAlgo algo, const std::vector<CostSample>& samples);
double predict_us(const CollectiveCost& c, AllReduceAlgo algo, int ranks, double bytes);

}  // namespace oomlab
