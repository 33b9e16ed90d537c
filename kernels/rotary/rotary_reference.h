// fp32 CPU reference of rotary.h over contiguous (tokens, heads, head_dim) arrays; cu_seqlens, if
// not null, is a host array of num_seqs + 1 offsets. inverse = true rotates by -theta (backward).
#pragma once

#include <cstdint>

namespace flame::kernels {

void RotaryReference(const float* x, int64_t tokens, int heads, int head_dim, int rotary_dim,
                     int seq_len, const int32_t* cu_seqlens, int num_seqs, int position_offset,
                     float base, bool inverse, float* y);

}  // namespace flame::kernels
