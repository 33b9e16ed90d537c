#include "kernels/cross_entropy/cross_entropy_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace flame::kernels {

float CrossEntropyReference(const float* logits, const int64_t* labels, int64_t rows, int vocab,
                            int64_t ignore_index, float* dlogits, float* lse) {
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) valid += labels[r] != ignore_index;
  const double scale = valid == 0 ? 0.0 : 1.0 / static_cast<double>(valid);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    const double m = *std::max_element(x, x + vocab);
    double s = 0.0;
    for (int j = 0; j < vocab; ++j) s += std::exp(x[j] - m);
    const double row_lse = m + std::log(s);
    if (lse) lse[r] = static_cast<float>(row_lse);
    const int64_t label = labels[r];
    const bool ignored = label == ignore_index;
    if (!ignored) {
      total += (label >= 0 && label < vocab) ? row_lse - x[label]
                                             : std::numeric_limits<double>::quiet_NaN();
    }
    for (int j = 0; j < vocab; ++j) {
      const double g = std::exp(x[j] - row_lse) - (j == label ? 1.0 : 0.0);
      dlogits[r * vocab + j] = ignored ? 0.0f : static_cast<float>(g * scale);
    }
  }
  return static_cast<float>(total * scale);
}

float LinearCrossEntropyReference(const float* hidden, const float* weight, const int64_t* labels,
                                  int64_t rows, int dim, int vocab, int64_t ignore_index,
                                  float* dhidden, float* dweight) {
  std::vector<float> logits(static_cast<size_t>(rows) * vocab), dlogits(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < vocab; ++v) {
      double acc = 0.0;
      for (int d = 0; d < dim; ++d) acc += static_cast<double>(hidden[r * dim + d]) * weight[v * dim + d];
      logits[r * vocab + v] = static_cast<float>(acc);
    }
  }
  const float loss = CrossEntropyReference(logits.data(), labels, rows, vocab, ignore_index,
                                           dlogits.data(), nullptr);
  std::vector<double> dh(static_cast<size_t>(rows) * dim, 0.0), dw(static_cast<size_t>(vocab) * dim, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < vocab; ++v) {
      const double g = dlogits[r * vocab + v];
      if (g == 0.0) continue;
      for (int d = 0; d < dim; ++d) {
        dh[r * dim + d] += g * weight[v * dim + d];
        dw[v * dim + d] += g * hidden[r * dim + d];
      }
    }
  }
  for (size_t i = 0; i < dh.size(); ++i) dhidden[i] = static_cast<float>(dh[i]);
  for (size_t i = 0; i < dw.size(); ++i) dweight[i] = static_cast<float>(dw[i]);
  return loss;
}

}  // namespace flame::kernels
