// TransformerOptions: the softmax-attention baseline of fla (fla/models/transformer,
// fla/layers/attn.py), a Llama-style block with RoPE and grouped-query attention.
//
// Field names and defaults are TransformerConfig's. Parsed by model_config.cc (model_type
// "transformer"); the model is worker/model/transformer_model.h.
#pragma once

#include <cstdint>
#include <optional>

namespace flame::worker {

struct ModelConfig;

struct TransformerOptions {
  int64_t num_heads = 32;
  int64_t num_kv_heads = 32;  // config null -> num_heads
  bool qkv_bias = false;      // bias on q_proj, k_proj, v_proj (never o_proj)
  bool qk_norm = false;       // per-head RMSNorm (eps 1e-5, fla's default) on q and k before RoPE
  // Sliding window: each query sees itself and the window_size - 1 tokens before it
  // (flash-attn's window (window_size - 1, 0)); unset: the whole causal prefix.
  std::optional<int64_t> window_size;
  double rope_theta = 10000.0;
  // Only sizes fla's rotary cache; longer sequences work and are not refused.
  int64_t max_position_embeddings = 2048;

  // fla's qk_norm RMSNorm is built without an eps, so it keeps RMSNorm's default.
  static constexpr double kQkNormEps = 1e-5;

  int64_t HeadDim(int64_t hidden_size) const { return hidden_size / num_heads; }
  int64_t KvDim(int64_t hidden_size) const { return num_kv_heads * HeadDim(hidden_size); }

  // Training FLOPs per token (forward + backward = 3 x forward) for sequences of `context_len`
  // tokens, counting matrix multiplies only (norms, RoPE, softmax and SwiGLU are elementwise):
  //   forward = 2 · (matmul weights per token) + per layer 4 · hidden · A,
  // where the weights are q, k, v, o, gate, up, down of every layer and lm_head (also when tied:
  // the logits are still a matmul; the embedding lookup is not), and A is the number of keys a
  // query attends to, averaged over the positions of a causal sequence: (T + 1) / 2 without a
  // window, mean(min(t, window)) for t = 1..T with one. 4 · hidden · A is QKᵀ (2 · H · D · A)
  // plus the weighted sum of V (2 · H · D · A). Unlike flame's 6N + 12·L·H·D·T this counts the
  // causal half that a causal kernel actually computes.
  double TrainingFlopsPerToken(const ModelConfig& config, int64_t context_len) const;
};

}  // namespace flame::worker
