#include "kernels/norm/rms_norm_reference.h"

#include <cmath>
#include <vector>

namespace flame::kernels {
namespace {

float RowRstd(const float* h, int dim, float eps) {
  double sum_sq = 0.0;
  for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(h[i]) * h[i];
  return static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
}

float SigmoidRef(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void RmsNormForwardReference(const float* x, const float* residual, const float* weight,
                             const float* gate, int64_t rows, int dim, float eps, float* y,
                             float* residual_out, float* rstd) {
  std::vector<float> h(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * dim;
    for (int i = 0; i < dim; ++i) h[i] = x[o + i] + (residual ? residual[o + i] : 0.0f);
    const float s = RowRstd(h.data(), dim, eps);
    if (rstd) rstd[r] = s;
    for (int i = 0; i < dim; ++i) {
      if (residual_out) residual_out[o + i] = h[i];
      float v = h[i] * s * (weight ? weight[i] : 1.0f);
      if (gate) v *= gate[o + i] * SigmoidRef(gate[o + i]);
      y[o + i] = v;
    }
  }
}

void RmsNormBackwardReference(const float* h, const float* weight, const float* gate,
                              const float* dy, const float* dresidual_out, int64_t rows, int dim,
                              float eps, float* dx, float* dgate, float* dweight) {
  std::vector<double> dw(dim, 0.0);
  std::vector<float> dn(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * dim;
    const float s = RowRstd(h + o, dim, eps);
    double dot = 0.0;  // sum of dn * w * xhat
    for (int i = 0; i < dim; ++i) {
      const float xhat = h[o + i] * s;
      const float w = weight ? weight[i] : 1.0f;
      float d = dy[o + i];
      if (gate) {
        const float g = gate[o + i];
        const float sg = SigmoidRef(g);
        dgate[o + i] = d * xhat * w * sg * (1.0f + g * (1.0f - sg));
        d *= g * sg;
      }
      dn[i] = d;
      dw[i] += static_cast<double>(d) * xhat;
      dot += static_cast<double>(d) * w * xhat;
    }
    const float mean_dot = static_cast<float>(dot / dim);
    for (int i = 0; i < dim; ++i) {
      const float w = weight ? weight[i] : 1.0f;
      dx[o + i] = s * (dn[i] * w - h[o + i] * s * mean_dot) +
                  (dresidual_out ? dresidual_out[o + i] : 0.0f);
    }
  }
  if (dweight) {
    for (int i = 0; i < dim; ++i) dweight[i] = static_cast<float>(dw[i]);
  }
}

}  // namespace flame::kernels
