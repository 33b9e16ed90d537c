// fp32 CPU reference of short_conv.h over contiguous (tokens, dim) arrays; cu_seqlens, if not
// null, is a host array of num_seqs + 1 offsets. weight is (dim, W), bias (dim) or null.
#pragma once

#include <cstdint>

namespace flame::kernels {

void ShortConvForwardReference(const float* x, const float* weight, const float* bias,
                               int64_t tokens, int dim, int kernel_size, int seq_len,
                               const int32_t* cu_seqlens, int num_seqs, bool silu, float* y);

void ShortConvBackwardReference(const float* x, const float* weight, const float* bias,
                                const float* dy, int64_t tokens, int dim, int kernel_size,
                                int seq_len, const int32_t* cu_seqlens, int num_seqs, bool silu,
                                float* dx, float* dweight, float* dbias);

}  // namespace flame::kernels
