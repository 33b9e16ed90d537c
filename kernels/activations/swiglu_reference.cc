#include "kernels/activations/swiglu_reference.h"

#include <cmath>

namespace flame::kernels {

void SwiGluForwardReference(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void SwiGluBackwardReference(const float* gate, const float* up, const float* dy, int64_t n,
                             float* dgate, float* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double s = 1.0 / (1.0 + std::exp(-g));
    dgate[i] = static_cast<float>(dy[i] * up[i] * s * (1.0 + g * (1.0 - s)));
    dup[i] = static_cast<float>(dy[i] * g * s);
  }
}

}  // namespace flame::kernels
