// view.h — the view family: reshape (-1 allowed once), flatten, transpose, permute,
// narrow, contiguous, clone, to(dtype) and detach, as torch.Tensor methods. They are
// Tensor's member functions (declared in engine/core/tensor.h, defined in view.cpp);
// this header is the family's entry point and states their contracts.
//  * reshape of a contiguous tensor, flatten, transpose, permute, narrow and detach are
//    views: they share storage, allocate nothing and save nothing for backward (shapes
//    only); reshape of a non-contiguous tensor copies first (contiguous()).
//  * contiguous() (when not already), clone() and to() allocate one copy through the copy
//    kernel (kernels/copy.h); their backward saves nothing. detach() has no history.
// Errors: ShapeError naming the op (bad shape, dim out of range, repeated permute dim).
#pragma once
#include "engine/core/tensor.h"
