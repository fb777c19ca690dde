// dp_on_meta.cpp — DataParallel on meta devices for the estimate (dp_on_meta.h).
#include "experiments/plan/dp_on_meta.h"

#include "engine/memory/caching_allocator.h"

namespace oomlab {

DpOnMeta::DpOnMeta(nn::ModulePtr model, int64_t devices, int64_t gpu0_bsz, int64_t batch,
                   const std::function<nn::ModulePtr(Device)>& build) {
  std::vector<Device> ds;
  std::vector<nn::ModulePtr> replicas;
  for (int64_t i = 0; i < devices; ++i) ds.push_back(meta_device(int(i)));
  for (int64_t i = 1; i < devices; ++i) replicas.push_back(build(ds[size_t(i)]));
  dp = std::make_unique<DataParallel>(std::move(model), std::move(replicas), ds, gpu0_bsz);
  chunks = dp->chunk_sizes(batch);
}

void DpOnMeta::begin_steady_step() {
  for (const Device& d : dp->devices()) allocator_for(d).reset_peak_stats();
  dp->set_count_work(true);
}

std::vector<DpDeviceEstimate> DpOnMeta::devices() const {
  std::vector<DpDeviceEstimate> out;
  for (size_t i = 0; i < dp->devices().size(); ++i) {
    const CachingAllocator& al = allocator_for(dp->devices()[i]);
    DpDeviceEstimate d;
    d.device = dp->devices()[i].str();
    d.chunk = i < chunks.size() ? chunks[i] : 0;
    d.peak_allocated_bytes = al.stat("allocated_bytes.all.peak");
    d.peak_reserved_bytes = al.stat("reserved_bytes.all.peak");
    const DeviceWork& w = dp->device_work()[i];
    d.work.launches = w.launches;
    d.work.allocated_bytes = w.allocated_bytes;
    for (int k = 0; k < kNumMatrixKinds; ++k)
      for (int t = 0; t < kNumDTypes; ++t)
        if (w.flops[k][t] > 0) d.work.flops[matrix_kind_name(MatrixKind(k))][dtype_name(DType(t))] = w.flops[k][t];
    out.push_back(d);
  }
  return out;
}

}  // namespace oomlab
