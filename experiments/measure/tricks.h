// tricks.h — `oomlab trick --name NAME`: exact memory probes (meta device) of the source's practical
// tricks that are about how a training script is written, not about a flag of `train`
// (SOURCE_TABLES.md T9; experiment 09 reads them):
//   graph-history      T9.2  `total_loss += loss` vs `+= loss.detach()` over iterations, in a
//                            training loop (backward frees the saved activations) and in an
//                            evaluation loop run without no_grad (nothing frees them)
//   del-intermediates  T9.3  a forward that keeps every intermediate alive (`x1 = f(x); x2 =
//                            g(x1) ...`) vs one that rebinds `x`, under no_grad and with grad
//   inplace-relu       T9.4  conv-BN-ReLU blocks with ReLU(inplace=True) vs out of place
//   empty-cache        T9.6  allocated / reserved before and after empty_cache(), and the
//                            next step's reserved peak
// Contracts: every figure is an allocator stat under PyTorch's names, read on a freshly reset
// meta allocator per variant (the same trace a CUDA device records); results are
// deterministic. An unknown trick is a ValueError listing the known ones.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace oomlab {

std::vector<std::string> trick_names();
// {"trick", "claim", "variants": [...], ...} for one trick at `batch` samples.
nlohmann::json measure_trick(const std::string& name, int64_t batch);

}  // namespace oomlab
