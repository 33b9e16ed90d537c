// Direct formulas per output element (no sliding window), so the kernel's window bookkeeping is
// checked against something written differently.
#include "kernels/conv/short_conv_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace flame::kernels {
namespace {

// [start, end) of every token's sequence; tokens past the last offset form one more sequence.
void SequenceBounds(int64_t tokens, int seq_len, const int32_t* cu_seqlens, int num_seqs,
                    std::vector<int64_t>& start, std::vector<int64_t>& end) {
  start.resize(tokens);
  end.resize(tokens);
  int n = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (cu_seqlens == nullptr) {
      start[t] = t / seq_len * seq_len;
      end[t] = std::min<int64_t>(start[t] + seq_len, tokens);
      continue;
    }
    while (n < num_seqs && cu_seqlens[n + 1] <= t) ++n;
    start[t] = cu_seqlens[n];
    end[t] = n < num_seqs ? cu_seqlens[n + 1] : tokens;
  }
}

double PreActivation(const float* x, const float* weight, const float* bias, int dim, int width,
                     int64_t t, int d, int64_t start) {
  double z = bias ? bias[d] : 0.0;
  for (int k = 0; k < width; ++k) {
    const int64_t s = t - (width - 1) + k;
    if (s >= start) z += static_cast<double>(weight[d * width + k]) * x[s * dim + d];
  }
  return z;
}

}  // namespace

void ShortConvForwardReference(const float* x, const float* weight, const float* bias,
                               int64_t tokens, int dim, int kernel_size, int seq_len,
                               const int32_t* cu_seqlens, int num_seqs, bool silu, float* y) {
  std::vector<int64_t> start, end;
  SequenceBounds(tokens, seq_len, cu_seqlens, num_seqs, start, end);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int d = 0; d < dim; ++d) {
      const double z = PreActivation(x, weight, bias, dim, kernel_size, t, d, start[t]);
      y[t * dim + d] = static_cast<float>(silu ? z / (1.0 + std::exp(-z)) : z);
    }
  }
}

void ShortConvBackwardReference(const float* x, const float* weight, const float* bias,
                                const float* dy, int64_t tokens, int dim, int kernel_size,
                                int seq_len, const int32_t* cu_seqlens, int num_seqs, bool silu,
                                float* dx, float* dweight, float* dbias) {
  std::vector<int64_t> start, end;
  SequenceBounds(tokens, seq_len, cu_seqlens, num_seqs, start, end);
  std::vector<double> dz(tokens * dim);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int d = 0; d < dim; ++d) {
      double g = dy[t * dim + d];
      if (silu) {
        const double z = PreActivation(x, weight, bias, dim, kernel_size, t, d, start[t]);
        const double s = 1.0 / (1.0 + std::exp(-z));
        g *= s * (1.0 + z * (1.0 - s));
      }
      dz[t * dim + d] = g;
    }
  }
  std::vector<double> dw(static_cast<size_t>(dim) * kernel_size, 0.0), db(dim, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int d = 0; d < dim; ++d) {
      // x[t] feeds z[t + (W-1) - k] through tap k, inside its own sequence.
      double g = 0.0;
      for (int k = 0; k < kernel_size; ++k) {
        const int64_t u = t + (kernel_size - 1) - k;
        if (u < end[t]) g += weight[d * kernel_size + k] * dz[u * dim + d];
      }
      dx[t * dim + d] = static_cast<float>(g);
      db[d] += dz[t * dim + d];
      for (int k = 0; k < kernel_size; ++k) {
        const int64_t s = t - (kernel_size - 1) + k;
        if (s >= start[t]) dw[d * kernel_size + k] += dz[t * dim + d] * x[s * dim + d];
      }
    }
  }
  for (size_t i = 0; i < dw.size(); ++i) dweight[i] = static_cast<float>(dw[i]);
  if (dbias) {
    for (int d = 0; d < dim; ++d) dbias[d] = static_cast<float>(db[d]);
  }
}

}  // namespace flame::kernels
