#include "kernels/rotary/rotary_reference.h"

#include <cmath>

namespace flame::kernels {

void RotaryReference(const float* x, int64_t tokens, int heads, int head_dim, int rotary_dim,
                     int seq_len, const int32_t* cu_seqlens, int num_seqs, int position_offset,
                     float base, bool inverse, float* y) {
  const int half = rotary_dim / 2;
  int seq = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t position = 0;
    if (cu_seqlens != nullptr) {
      while (seq < num_seqs && cu_seqlens[seq + 1] <= t) ++seq;
      position = t - cu_seqlens[seq];
    } else {
      position = t % seq_len;
    }
    const float pos = static_cast<float>(position + position_offset);
    for (int h = 0; h < heads; ++h) {
      const float* xr = x + (t * heads + h) * head_dim;
      float* yr = y + (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        // fp32 angle as fla computes it; cos and sin of it in double.
        const float inv_freq = 1.0f / std::pow(base, static_cast<float>(2 * i) / rotary_dim);
        const float theta = pos * inv_freq;
        const double c = std::cos(static_cast<double>(theta));
        const double s = (inverse ? -1.0 : 1.0) * std::sin(static_cast<double>(theta));
        yr[i] = static_cast<float>(xr[i] * c - xr[i + half] * s);
        yr[i + half] = static_cast<float>(xr[i + half] * c + xr[i] * s);
      }
      for (int i = rotary_dim; i < head_dim; ++i) yr[i] = xr[i];
    }
  }
}

}  // namespace flame::kernels
