#include "worker/ops/retention.h"

#include <torch/torch.h>

#include "worker/ops/simple_gla.h"

namespace flame::worker::ops {

torch::Tensor RetentionLogDecay(int64_t num_heads, torch::ScalarType dtype, torch::Device device) {
  const auto options = torch::TensorOptions()
                           .dtype(dtype == torch::kDouble ? torch::kDouble : torch::kFloat)
                           .device(device);
  const torch::Tensor h = torch::arange(num_heads, options);
  return torch::log(1 - torch::pow(2.0, -5.0 - h));  // [H]
}

GlaOutput ChunkRetention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         double scale, const torch::Tensor& initial_state, bool output_final_state,
                         const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(q.dim() == 4, "ChunkRetention: q must be [B, T, H, K], got ", q.sizes());
  const torch::Tensor g_gamma = RetentionLogDecay(q.size(2), q.scalar_type(), q.device());
  return ChunkSimpleGla(q, k, v, /*g=*/{}, g_gamma, scale, initial_state, output_final_state,
                        cu_seqlens);
}

}  // namespace flame::worker::ops
