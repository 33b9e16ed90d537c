#include "worker/ops/attention.h"

#include <torch/torch.h>

#include <vector>

namespace flame::worker::ops {
namespace {

void CheckAttentionArguments(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             int64_t window_size) {
  TORCH_CHECK(q.dim() == 4 && q.is_floating_point(),
              "CausalAttention: q must be floating [B, T, H, D], got ", q.sizes());
  TORCH_CHECK(
      k.dim() == 4 && k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3),
      "CausalAttention: k must be [B, T, H_kv, D] with q's B, T, D; got ", k.sizes(), " for q ",
      q.sizes());
  TORCH_CHECK(
      v.dim() == 4 && v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2),
      "CausalAttention: v must be [B, T, H_kv, Dv] with k's B, T, H_kv; got ", v.sizes());
  TORCH_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "CausalAttention: H_kv = ", k.size(2),
              " must divide H = ", q.size(2));
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "CausalAttention: q, k, v must share one dtype");
  TORCH_CHECK(window_size >= 0, "CausalAttention: window_size must be >= 0, got ", window_size);
}

// Sequence starts of cu_seqlens on the host, checked against the T of the packed row.
std::vector<int64_t> SequenceBounds(const torch::Tensor& cu_seqlens, int64_t batch,
                                    int64_t tokens) {
  TORCH_CHECK(batch == 1,
              "CausalAttention: cu_seqlens needs B == 1 (packed sequences), got B = ", batch);
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2,
              "CausalAttention: cu_seqlens must be [N + 1] with N >= 1");
  const torch::Tensor host = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> bounds(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  TORCH_CHECK(bounds.front() == 0 && bounds.back() == tokens,
              "CausalAttention: cu_seqlens must start at 0 and end at T = ", tokens);
  for (size_t n = 1; n < bounds.size(); ++n) {
    TORCH_CHECK(bounds[n] > bounds[n - 1],
                "CausalAttention: cu_seqlens must be strictly increasing");
  }
  return bounds;
}

// One dense [B, T, *, *] problem.
torch::Tensor DenseCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, double scale, int64_t window_size) {
  const torch::ScalarType type = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const int64_t T = q.size(1), groups = q.size(2) / k.size(2);
  // SDPA takes [B, H, T, D]; every query head gets its own copy of its key/value head.
  const torch::Tensor qh = q.to(type).transpose(1, 2);
  torch::Tensor kh = k.to(type).transpose(1, 2), vh = v.to(type).transpose(1, 2);
  if (groups > 1) {
    kh = kh.repeat_interleave(groups, /*dim=*/1);
    vh = vh.repeat_interleave(groups, /*dim=*/1);
  }
  torch::Tensor out;
  if (window_size > 0 && window_size < T) {
    // allowed[i][j] = j <= i && i - j < window_size   [T, T]
    const torch::Tensor i = torch::arange(T, q.options().dtype(torch::kLong)).unsqueeze(1);
    const torch::Tensor j = torch::arange(T, q.options().dtype(torch::kLong)).unsqueeze(0);
    const torch::Tensor allowed = (j <= i).logical_and(i - j < window_size);
    out = at::scaled_dot_product_attention(qh, kh, vh, allowed, /*dropout_p=*/0.0,
                                           /*is_causal=*/false, scale);
  } else {
    out = at::scaled_dot_product_attention(qh, kh, vh, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                           /*is_causal=*/true, scale);
  }
  return out.transpose(1, 2).to(q.scalar_type());  // [B, T, H, Dv]
}

}  // namespace

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double scale, int64_t window_size,
                              const torch::Tensor& cu_seqlens) {
  CheckAttentionArguments(q, k, v, window_size);
  if (!cu_seqlens.defined()) return DenseCausalAttention(q, k, v, scale, window_size);
  const std::vector<int64_t> bounds = SequenceBounds(cu_seqlens, q.size(0), q.size(1));
  std::vector<torch::Tensor> parts;
  parts.reserve(bounds.size() - 1);
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    const int64_t begin = bounds[n], length = bounds[n + 1] - bounds[n];
    parts.push_back(DenseCausalAttention(q.narrow(1, begin, length), k.narrow(1, begin, length),
                                         v.narrow(1, begin, length), scale, window_size));
  }
  return torch::cat(parts, 1);
}

}  // namespace flame::worker::ops
