// The chunked delta rule (fla's chunk_delta_rule / chunk_gated_delta_rule) in plain,
// differentiable ATen ops: the WY representation that the kernels in kernels/delta_rule use.
//
// Write the step as S_t = α_t S_{t−1} + k_t u_tᵀ with the "new value" u_t = β_t (v_t − α_t
// S_{t−1}ᵀ k_t). Inside a chunk of C = 64 rows that enters with state S, and with γ = the
// chunk-local inclusive cumulative sum of g (in log2 units, as the kernels use exp2), unrolling
// the recurrence gives a unit lower-triangular system for all the u of the chunk at once:
//   (I + A) U = β V − (β 2^γ K) S,    A_ij = β_i (k_i · k_j) 2^(γ_i − γ_j)   (j < i)
// so U = U0 − W S with U0 = (I + A)⁻¹ β V and W = (I + A)⁻¹ β 2^γ K, found by one triangular
// solve per chunk (fla forms the inverse explicitly; the solve is the same product). Then
//   o      = scale · [ (Q ⊙ 2^γ) S  +  (Q Kᵀ ⊙ 2^(γ_i − γ_j), j <= i) U ]
//   S_next = 2^γ_last S + (K ⊙ 2^(γ_last − γ))ᵀ U
// Only U depends on S, so the scan over chunks is two small matrix products per chunk and the rest
// is batched over all chunks. Every exponent above is <= 0 (γ only decreases along a chunk), and
// masked exponents are set to 0 *before* exp2, so neither the forward nor the backward ever sees
// inf, however strong the decay. Without g every decay factor is 1 and is skipped.
#include <torch/torch.h>

#include <vector>

#include "worker/ops/delta_rule.h"
#include "worker/ops/delta_rule_internal.h"

namespace flame::worker::ops {
namespace {

constexpr int64_t C = kDeltaRuleChunkSize;
constexpr double kRcpLn2 = 1.4426950408889634;  // 1 / ln 2

// [B, N·C, H, D] -> [B, H, N, C, D]
torch::Tensor ToChunks(const torch::Tensor& x, int64_t num_chunks) {
  const int64_t B = x.size(0), H = x.size(2), D = x.size(3);
  return x.reshape({B, num_chunks, C, H, D}).permute({0, 3, 1, 2, 4});
}

// [B, T, H] zero-padded to N·C rows -> [B, H, N, C]
torch::Tensor PerHeadToChunks(const torch::Tensor& x, int64_t num_chunks, torch::ScalarType type) {
  const int64_t T = x.size(1);
  const torch::Tensor padded = torch::constant_pad_nd(x.to(type), {0, 0, 0, num_chunks * C - T});
  return padded.reshape({x.size(0), num_chunks, C, x.size(2)}).permute({0, 3, 1, 2});
}

DeltaRuleOutput ChunkDense(const torch::Tensor& q_in, const torch::Tensor& k_in,
                           const torch::Tensor& v_in, const torch::Tensor& g_in,
                           const torch::Tensor& beta_in, double scale,
                           const torch::Tensor& initial_state, bool output_final_state) {
  const torch::ScalarType type =
      q_in.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2);
  const int64_t K = q_in.size(3), V = v_in.size(3);
  const int64_t N = (T + C - 1) / C;
  // Zero padding to whole chunks: β = k = v = 0 and g = 0 leave the state untouched (the padded
  // rows of U are 0), and the padded rows of the output are cut off again below.
  const std::vector<int64_t> pad = {0, 0, 0, 0, 0, N * C - T};
  const torch::Tensor q = ToChunks(torch::constant_pad_nd(q_in.to(type) * scale, pad), N);
  const torch::Tensor k = ToChunks(torch::constant_pad_nd(k_in.to(type), pad), N);  // [B,H,N,C,K]
  const torch::Tensor v = ToChunks(torch::constant_pad_nd(v_in.to(type), pad), N);  // [B,H,N,C,V]
  const torch::Tensor beta = PerHeadToChunks(beta_in, N, type).unsqueeze(-1);       // [B,H,N,C,1]

  const auto options = q.options().dtype(torch::kBool);
  const torch::Tensor causal = torch::ones({C, C}, options).tril();    // [i, j]: j <= i
  const torch::Tensor strict = torch::ones({C, C}, options).tril(-1);  // [i, j]: j < i
  const bool gated = g_in.defined();
  torch::Tensor gamma, decay;  // [B, H, N, C, 1] and [B, H, N, C, C]
  if (gated) {
    gamma = (PerHeadToChunks(g_in, N, type).cumsum(3) * kRcpLn2).unsqueeze(-1);
    torch::Tensor exponent = gamma - gamma.transpose(-1, -2);  // γ_i − γ_j
    exponent = torch::where(causal, exponent, torch::zeros_like(exponent));
    decay = torch::exp2(exponent);
  }
  const auto decayed = [&](const torch::Tensor& x) { return gated ? x * decay : x; };

  // U0 and W by one unit lower-triangular solve over [β V | β 2^γ K]: [B, H, N, C, V + K].
  const torch::Tensor k_beta = k * beta;  // [B, H, N, C, K]
  const torch::Tensor a = decayed(torch::matmul(k_beta, k.transpose(-1, -2))) * strict;
  const torch::Tensor rhs =
      torch::cat({v * beta, gated ? k_beta * torch::exp2(gamma) : k_beta}, -1);
  const torch::Tensor solved =
      torch::linalg_solve_triangular(a + torch::eye(C, a.options()), rhs, /*upper=*/false,
                                     /*left=*/true, /*unitriangular=*/true);
  const torch::Tensor u0 = solved.narrow(-1, 0, V);  // [B, H, N, C, V]
  const torch::Tensor w = solved.narrow(-1, V, K);   // [B, H, N, C, K]

  // The scan over chunks: the state entering each chunk and the chunk's U = U0 − W S.
  torch::Tensor k_to_end = k, chunk_decay;  // [B, H, N, C, K], [B, H, N, 1, 1]
  if (gated) {
    const torch::Tensor gamma_last = gamma.narrow(3, C - 1, 1);  // [B, H, N, 1, 1]
    k_to_end = k * torch::exp2(gamma_last - gamma);
    chunk_decay = torch::exp2(gamma_last);
  }
  torch::Tensor state = initial_state.defined()
                            ? initial_state.to(type)
                            : torch::zeros({B, H, K, V}, q.options());  // [B, H, K, V]
  std::vector<torch::Tensor> entering, values;
  entering.reserve(static_cast<size_t>(N));
  values.reserve(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    entering.push_back(state);
    const torch::Tensor u = u0.select(2, n) - torch::matmul(w.select(2, n), state);  // [B,H,C,V]
    values.push_back(u);
    const torch::Tensor carried = gated ? chunk_decay.select(2, n) * state : state;
    state = carried + torch::matmul(k_to_end.select(2, n).transpose(-1, -2), u);
  }
  const torch::Tensor states = torch::stack(entering, 2);  // [B, H, N, K, V]
  const torch::Tensor u = torch::stack(values, 2);         // [B, H, N, C, V]

  const torch::Tensor scores = decayed(torch::matmul(q, k.transpose(-1, -2))) * causal;
  const torch::Tensor q_from_start = gated ? q * torch::exp2(gamma) : q;
  const torch::Tensor o = torch::matmul(q_from_start, states) + torch::matmul(scores, u);

  DeltaRuleOutput result;
  result.output = o.permute({0, 2, 3, 1, 4})  // [B, N, C, H, V]
                      .reshape({B, N * C, H, V})
                      .narrow(1, 0, T)
                      .to(v_in.scalar_type());
  if (output_final_state) result.final_state = state;
  return result;
}

}  // namespace

DeltaRuleOutput ChunkDeltaRuleReference(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& beta, double scale,
                                        const torch::Tensor& initial_state, bool output_final_state,
                                        const torch::Tensor& cu_seqlens) {
  internal::CheckDeltaRuleArguments(g.defined() ? "gated delta rule" : "delta rule", q, k, v, g,
                                    beta, initial_state, cu_seqlens);
  return internal::SplitDeltaRuleSequences(ChunkDense, q, k, v, g, beta, scale, initial_state,
                                           output_final_state, cu_seqlens);
}

}  // namespace flame::worker::ops
