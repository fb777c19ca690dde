// comm_time.cpp — DDP's all-reduce time on a peer link (comm_time.h).
#include "experiments/plan/comm_time.h"

#include "engine/core/error.h"
#include "engine/parallel/cost_model.h"

namespace oomlab {

nlohmann::json CommTime::to_json() const {
  return {{"ranks", ranks}, {"total_ms", total_ms}, {"last_bucket_ms", last_bucket_ms}, {"link", link},
          {"model", model}};
}

CommTime ddp_comm_time(const std::vector<int64_t>& bucket_bytes, int ranks, const GpuSpec& g, int zero_stage) {
  CommTime t;
  t.model = "ring all-reduce: 2(n-1)/n x bucket bytes at the link's datasheet rate per direction, no latency "
            "term (a lower bound)";
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

CommTime dp_comm_time(const DpCopyBytes& b, const GpuSpec& g) {
  CommTime t;
  t.model = "DataParallel's copies from and to device 0, one after another: (n-1) x (parameters + buffers + "
            "gradients) + the scattered input at the link's datasheet rate per direction (a lower bound)";
  t.ranks = int(b.chunks.size());
  t.link = g.link.empty() ? "unknown link" : str_cat(g.link, ", ", g.link_gbps, " GB/s per direction");
  if (t.ranks <= 1) return t;
  if (g.link_gbps <= 0) {
    t.total_ms = t.last_bucket_ms = -1;
    return t;
  }
  int64_t batch = 0;
  for (int64_t c : b.chunks) batch += c;
  const double others = double(t.ranks - 1), rate = g.link_gbps * 1e9;
  const double scattered = batch > 0 ? double(b.input) * double(batch - b.chunks[0]) / double(batch) : 0;
  t.last_bucket_ms = others * double(b.grads) / rate * 1e3;
  t.total_ms = (others * double(b.params_and_buffers) + scattered) / rate * 1e3 + t.last_bucket_ms;
  return t;
}

}  // namespace oomlab
