// channels_last.cpp — model.to(memory_format=torch.channels_last) (channels_last.h).
#include "engine/train/channels_last.h"

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

namespace {
bool convert_in_place(Tensor& t) {
  if (t.dim() != 4 || !dtype_is_floating(t.dtype()) || t.memory_format() == MemoryFormat::channels_last) return false;
  OOMLAB_CHECK(!t.grad().defined(), "channels_last_model: ", t.name(),
               " already has a gradient (convert before training)");
  // torch's .to(memory_format=...): a copy, or only new strides where the elements already
  // lie in channels_last order (a [K, 1, R, S] or [K, C, 1, 1] weight)
  Tensor c = to_memory_format(t.detach(), MemoryFormat::channels_last);
  TensorImpl* impl = t.impl();
  impl->storage = c.storage();
  impl->strides = c.strides();
  impl->offset = c.offset();
  return true;
}
}  // namespace

int64_t channels_last_model(nn::Module& model) {
  NoGradGuard ng;
  MemoryContext ctx("model", "channels_last");
  int64_t converted = 0;
  for (auto& [name, t] : model.named_parameters()) converted += convert_in_place(t);
  for (auto& [name, t] : model.named_buffers()) converted += convert_in_place(t);
  return converted;
}

}  // namespace oomlab
