// concat.h — cat, split and chunk, as torch.cat / torch.split / torch.chunk.
//   cat(tensors, dim): one new tensor; each input (any strides) is copied into its slice
//     by the strided copy kernel (kernels/copy.h); backward gives narrow views of the
//     output gradient. Saves only the sizes along `dim`.
//   split(x, sizes, dim) / chunk(x, chunks, dim): narrow() views of x (no copies), each
//     with its own "narrow" node; chunk sizes follow torch.chunk (ceil(size / chunks)
//     each, the last smaller, possibly fewer than `chunks` pieces).
// Shapes must agree off `dim` (ShapeError naming both shapes); rank <= 8 for cat.
#pragma once
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

}  // namespace oomlab
