// comm_time.cpp — DDP's all-reduce time on a peer link (comm_time.h).
#include "experiments/plan/comm_time.h"

#include "engine/core/error.h"
#include "engine/parallel/cost_model.h"

namespace oomlab {

nlohmann::json CommTime::to_json() const {
  return {{"ranks", ranks}, {"allreduce_ms", total_ms}, {"last_bucket_ms", last_bucket_ms}, {"link", link},
          {"model", "ring: 2(n-1)/n x bucket bytes at the link's datasheet rate per direction, no latency term "
                    "(a lower bound)"}};
}

CommTime ddp_comm_time(const std::vector<int64_t>& bucket_bytes, int ranks, const GpuSpec& g, int zero_stage) {
  CommTime t;
  t.ranks = ranks;
  t.link = g.link.empty() ? "unknown link" : str_cat(g.link, ", ", g.link_gbps, " GB/s per direction");
  if (ranks <= 1 || bucket_bytes.empty()) return t;
  if (g.link_gbps <= 0) {
    t.total_ms = t.last_bucket_ms = -1;
    return t;
  }
  const double times = zero_stage == 3 ? 1.5 : 1.0;
  for (int64_t b : bucket_bytes) {
    t.last_bucket_ms = times * bottleneck_bytes(AllReduceAlgo::ring, ranks, double(b)) / (g.link_gbps * 1e9) * 1e3;
    t.total_ms += t.last_bucket_ms;
  }
  return t;
}

}  // namespace oomlab
