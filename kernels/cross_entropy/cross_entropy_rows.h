// The stages of the fused cross-entropy, shared by cross_entropy.cu and linear_cross_entropy.cu
// (which runs the row stage once per chunk of rows). Internal to kernels/cross_entropy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

// num_valid[0] = number of labels != ignore_index.
cudaError_t CountValidLabels(const int64_t* labels, int64_t rows, int64_t ignore_index,
                             int32_t* num_valid, cudaStream_t stream);

// For each row: lse, row_loss (0 when ignored), and the gradient divided by *num_valid, written
// over the logits.
cudaError_t CrossEntropyRows(__nv_bfloat16* logits, int64_t stride, const int64_t* labels,
                             int64_t rows, int vocab, int64_t ignore_index,
                             const int32_t* num_valid, float* row_loss, float* lse,
                             cudaStream_t stream);

// loss[0] = sum(row_loss) / *num_valid (0 when there is none), summed in a fixed order.
cudaError_t MeanRowLoss(const float* row_loss, int64_t rows, const int32_t* num_valid,
                        float* loss, cudaStream_t stream);

}  // namespace flame::kernels
