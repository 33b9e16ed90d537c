// fp32 CPU reference of l2norm.h over contiguous (rows, dim) arrays.
#pragma once

#include <cstdint>

namespace flame::kernels {

void L2NormForwardReference(const float* x, int64_t rows, int dim, float eps, float* y);
void L2NormBackwardReference(const float* x, const float* dy, int64_t rows, int dim, float eps,
                             float* dx);

}  // namespace flame::kernels
