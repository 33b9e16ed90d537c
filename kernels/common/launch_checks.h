// Argument checks that the launchers of several op families share: the alignment of pointers and
// of [B, T, H, D] strides that the kernels' 16-byte vector accesses (8 bf16 or 4 fp32) need.
// Host-side; plain C++.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/chunk_gated_params.h"  // TensorStrides

namespace flame::kernels {

inline bool IsAligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

inline bool IsAligned16(const void* ptr) { return IsAligned(ptr, 16); }

// Strides (in bf16 elements) that keep every row of a 16-byte aligned bf16 tensor 16-byte
// aligned: all multiples of 8.
inline bool Bf16RowsAligned(const TensorStrides& s) {
  return s.batch % 8 == 0 && s.token % 8 == 0 && s.head % 8 == 0;
}

}  // namespace flame::kernels
