// How the CPU references walk a [B, T, H, D] batch: one slice per sequence, either each batch
// row (dense) or each cu_seqlens segment of the packed row (varlen).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/gated_recurrence_reference.h"

namespace flame::kernels::reference {

// One sequence: token rows [first_row, first_row + len) of the flattened [B*T] token axis.
struct Slice {
  int64_t first_row;
  int len;
  int seq;  // sequence index: the row of initial/final states
};

inline std::vector<Slice> Slices(const RecurrenceShape& s) {
  std::vector<Slice> out;
  if (s.cu_seqlens.empty()) {
    for (int b = 0; b < s.batch; ++b) out.push_back({int64_t{b} * s.seq_len, s.seq_len, b});
  } else {
    for (int n = 0; n + 1 < static_cast<int>(s.cu_seqlens.size()); ++n) {
      out.push_back({s.cu_seqlens[n], s.cu_seqlens[n + 1] - s.cu_seqlens[n], n});
    }
  }
  return out;
}

// Offset of token row `row`, head h, in a [*, H, D] tensor.
inline int64_t At(int64_t row, int h, int heads, int dim) { return (row * heads + h) * dim; }

}  // namespace flame::kernels::reference
