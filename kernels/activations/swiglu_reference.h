// fp32 CPU reference of swiglu.h over contiguous (rows, dim) arrays.
#pragma once

#include <cstdint>

namespace flame::kernels {

void SwiGluForwardReference(const float* gate, const float* up, int64_t n, float* y);
void SwiGluBackwardReference(const float* gate, const float* up, const float* dy, int64_t n,
                             float* dgate, float* dup);

}  // namespace flame::kernels
