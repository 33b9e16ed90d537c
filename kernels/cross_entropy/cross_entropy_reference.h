// fp32 CPU references of cross_entropy.h and linear_cross_entropy.h (contiguous arrays).
#pragma once

#include <cstdint>

namespace flame::kernels {

// Returns the mean loss; writes d(loss)/d(logits) and, if not null, the per-row lse.
float CrossEntropyReference(const float* logits, const int64_t* labels, int64_t rows, int vocab,
                            int64_t ignore_index, float* dlogits, float* lse);

// hidden (N, D), weight (V, D). Returns the mean loss; writes dhidden (N, D) and dweight (V, D).
float LinearCrossEntropyReference(const float* hidden, const float* weight, const int64_t* labels,
                                  int64_t rows, int dim, int vocab, int64_t ignore_index,
                                  float* dhidden, float* dweight);

}  // namespace flame::kernels
