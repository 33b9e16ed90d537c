// fp32 CPU reference of rms_norm.h, the ground truth the GPU tests compare against. Contiguous
// (rows, dim) arrays; optional inputs and outputs may be null exactly as in the launchers.
#pragma once

#include <cstdint>

namespace flame::kernels {

void RmsNormForwardReference(const float* x, const float* residual, const float* weight,
                             const float* gate, int64_t rows, int dim, float eps, float* y,
                             float* residual_out, float* rstd);

// Recomputes rstd from h (= x + residual) rather than taking the forward's.
void RmsNormBackwardReference(const float* h, const float* weight, const float* gate,
                              const float* dy, const float* dresidual_out, int64_t rows, int dim,
                              float eps, float* dx, float* dgate, float* dweight);

}  // namespace flame::kernels
