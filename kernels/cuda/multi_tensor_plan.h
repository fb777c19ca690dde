// multi_tensor_plan.h — how a list of tensors is cut into launches of a multi-tensor
// kernel (kernels/cuda/optim_foreach.cu; PyTorch's multi_tensor_apply does the same): each
// tensor is split into chunks of `chunk` elements, one block per chunk; a launch holds at
// most `max_tensors` tensors and `max_blocks` blocks (its argument struct is passed by
// value, so both are bounded), and a tensor whose chunks do not all fit continues in the
// next launch. Plain C++ (no CUDA): tests/test_optim_foreach.cpp checks on the CPU that
// every element of every tensor is covered exactly once.
#pragma once
#include <cstdint>
#include <vector>

namespace oomlab::cuda {

struct MultiTensorLaunch {
  std::vector<int64_t> tensors;   // indices into the list, in order, each at most once
  struct Block { int slot; int64_t chunk; };   // slot: position in `tensors`
  std::vector<Block> blocks;
};

inline std::vector<MultiTensorLaunch> plan_multi_tensor(const std::vector<int64_t>& sizes, int max_tensors,
                                                        int max_blocks, int64_t chunk) {
  std::vector<MultiTensorLaunch> plan;
  MultiTensorLaunch cur;
  auto flush = [&] {
    if (!cur.blocks.empty()) plan.push_back(std::move(cur));
    cur = MultiTensorLaunch{};
  };
  for (int64_t t = 0; t < int64_t(sizes.size()); ++t) {
    const int64_t chunks = (sizes[t] + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (int(cur.blocks.size()) == max_blocks) flush();
      if (cur.tensors.empty() || cur.tensors.back() != t) {
        if (int(cur.tensors.size()) == max_tensors) flush();
        cur.tensors.push_back(t);
      }
      cur.blocks.push_back({int(cur.tensors.size()) - 1, c});
    }
  }
  flush();
  return plan;
}

}  // namespace oomlab::cuda
