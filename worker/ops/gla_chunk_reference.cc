// The chunked GLA algorithm (fla's chunk_gla) in plain, differentiable ATen ops.
//
// T is cut into chunks of C = 64. Inside a chunk, with γ = the chunk-local inclusive cumulative
// sum of g (in log2 units, as fla's kernels use exp2):
//   o = scale · [ (Q ⊙ 2^γ) S_prev  +  A V ],   A_ij = Σ_k q_ik k_jk 2^(γ_ik − γ_jk)  (j <= i)
//   S_next = diag(2^γ_last) S_prev + (K ⊙ 2^(γ_last − γ))ᵀ V
// Every exponent above is <= 0 because γ only decreases along a chunk, so nothing overflows
// however strong the decay.
//
// A is built like fla's chunk_gla_fwd_intra_gk, with sub-chunks of L = 16 rows:
//   off-diagonal blocks (query sub-chunk a > key sub-chunk b) factor through the first row n of
//   sub-chunk a:  (Q_a ⊙ 2^(γ_a − γ_n)) · (K_b ⊙ 2^(γ_n − γ_b))ᵀ, both exponents <= 0;
//   diagonal blocks are computed elementwise (pairwise exponents, masked above the diagonal).
// Masked exponents are replaced by 0 *before* exp2, so neither the forward nor the backward ever
// sees inf (an inf times a zero mask would make NaN gradients).
#include <torch/torch.h>

#include "worker/ops/gla.h"
#include "worker/ops/gla_internal.h"

namespace flame::worker::ops {
namespace {

constexpr int64_t kSubChunk = 16;
constexpr double kRcpLn2 = 1.4426950408889634;  // 1 / ln 2

// [B, N·C, H, D] -> [B, H, N, C, D]
torch::Tensor ToChunks(const torch::Tensor& x, int64_t num_chunks) {
  const int64_t B = x.size(0), H = x.size(2), D = x.size(3);
  return x.reshape({B, num_chunks, kGlaChunkSize, H, D}).permute({0, 3, 1, 2, 4});
}

// Intra-chunk scores A: [B, H, N, C, C], lower triangular (j <= i).
torch::Tensor IntraChunkScores(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& gamma) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), K = q.size(4);
  const int64_t S = kGlaChunkSize / kSubChunk, L = kSubChunk;
  const auto options = q.options().dtype(torch::kBool);
  const torch::Tensor qs = q.reshape({B, H, N, S, L, K});  // [B, H, N, S, L, K]
  const torch::Tensor ks = k.reshape({B, H, N, S, L, K});
  const torch::Tensor gs = gamma.reshape({B, H, N, S, L, K});
  const torch::Tensor ref = gs.narrow(4, 0, 1);  // [B, H, N, S, 1, K] row n of each a

  // Off-diagonal blocks, all (a, b) pairs at once, then masked to b < a.
  const torch::Tensor q_decayed = qs * torch::exp2(gs - ref);          // [B, H, N, a, L, K]
  const torch::Tensor before = torch::ones({S, S}, options).tril(-1);  // [a, b]: b < a
  torch::Tensor k_exponent = ref.unsqueeze(4) - gs.unsqueeze(3);       // [B, H, N, a, b, L, K]
  k_exponent = torch::where(before.view({S, S, 1, 1}), k_exponent, torch::zeros_like(k_exponent));
  const torch::Tensor k_decayed =
      (ks.unsqueeze(3) * torch::exp2(k_exponent)).reshape({B, H, N, S, S * L, K});
  torch::Tensor off = torch::matmul(q_decayed, k_decayed.transpose(-1, -2));  // [B,H,N,a,L,(b,L)]
  off = off.reshape({B, H, N, S, L, S, L}) * before.view({S, 1, S, 1});

  // Diagonal blocks, elementwise: [B, H, N, a, i, j, K].
  const torch::Tensor causal = torch::ones({L, L}, options).tril();  // [i, j]: j <= i
  torch::Tensor exponent = gs.unsqueeze(5) - gs.unsqueeze(4);
  exponent = torch::where(causal.view({L, L, 1}), exponent, torch::zeros_like(exponent));
  const torch::Tensor diag =
      (qs.unsqueeze(5) * ks.unsqueeze(4) * torch::exp2(exponent)).sum(-1) * causal;  // [a, i, j]
  const torch::Tensor eye = torch::eye(S, q.options()).view({S, 1, S, 1});           // [a, 1, b, 1]
  const torch::Tensor scores = off + diag.unsqueeze(5) * eye;  // [B, H, N, a, i, b, j]
  return scores.reshape({B, H, N, kGlaChunkSize, kGlaChunkSize});
}

GlaOutput ChunkDense(const torch::Tensor& q_in, const torch::Tensor& k_in,
                     const torch::Tensor& v_in, const torch::Tensor& g_in, double scale,
                     const torch::Tensor& initial_state, bool output_final_state) {
  const torch::ScalarType type = internal::ComputeType(q_in);
  const int64_t B = q_in.size(0), T = q_in.size(1), H = q_in.size(2);
  const int64_t K = q_in.size(3), V = v_in.size(3);
  const int64_t N = (T + kGlaChunkSize - 1) / kGlaChunkSize;
  // Zero padding to whole chunks: g = 0 (no decay) and k = v = 0 leave the state untouched, and
  // the padded rows of the output are cut off again below.
  const std::vector<int64_t> pad = {0, 0, 0, 0, 0, N * kGlaChunkSize - T};
  const torch::Tensor q = ToChunks(torch::constant_pad_nd(q_in.to(type) * scale, pad), N);
  const torch::Tensor k = ToChunks(torch::constant_pad_nd(k_in.to(type), pad), N);
  const torch::Tensor v = ToChunks(torch::constant_pad_nd(v_in.to(type), pad), N);  // [B,H,N,C,V]
  const torch::Tensor g = ToChunks(torch::constant_pad_nd(g_in.to(type), pad), N);  // [B,H,N,C,K]

  const torch::Tensor gamma = g.cumsum(3) * kRcpLn2;     // [B, H, N, C, K], inclusive, log2
  const torch::Tensor gamma_last = gamma.select(3, -1);  // [B, H, N, K]

  const torch::Tensor intra = torch::matmul(IntraChunkScores(q, k, gamma), v);  // [B,H,N,C,V]

  // Inter-chunk: the state entering each chunk, by a sequential scan over N.
  const torch::Tensor k_to_end = k * torch::exp2(gamma_last.unsqueeze(3) - gamma);   // [B,H,N,C,K]
  const torch::Tensor chunk_updates = torch::matmul(k_to_end.transpose(-1, -2), v);  // [B,H,N,K,V]
  const torch::Tensor chunk_decay = torch::exp2(gamma_last).unsqueeze(-1);           // [B,H,N,K,1]
  torch::Tensor state = initial_state.defined()
                            ? initial_state.to(type)
                            : torch::zeros({B, H, K, V}, q.options());  // [B, H, K, V]
  std::vector<torch::Tensor> entering;
  entering.reserve(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    entering.push_back(state);
    state = chunk_decay.select(2, n) * state + chunk_updates.select(2, n);
  }
  const torch::Tensor states = torch::stack(entering, 2);                     // [B,H,N,K,V]
  const torch::Tensor inter = torch::matmul(q * torch::exp2(gamma), states);  // [B,H,N,C,V]

  GlaOutput result;
  result.output = (inter + intra)
                      .permute({0, 2, 3, 1, 4})  // [B, N, C, H, V]
                      .reshape({B, N * kGlaChunkSize, H, V})
                      .narrow(1, 0, T)
                      .to(v_in.scalar_type());
  if (output_final_state) result.final_state = state;
  return result;
}

}  // namespace

GlaOutput ChunkGlaReference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& g, double scale,
                            const torch::Tensor& initial_state, bool output_final_state,
                            const torch::Tensor& cu_seqlens) {
  internal::CheckGlaArguments(q, k, v, g, initial_state, cu_seqlens);
  return internal::SplitSequences(ChunkDense, q, k, v, g, scale, initial_state, output_final_state,
                                  cu_seqlens);
}

}  // namespace flame::worker::ops
