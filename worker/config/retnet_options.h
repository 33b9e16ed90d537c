// RetNetOptions: fla's RetNet (fla/models/retnet, fla/layers/multiscale_retention.py):
// multi-scale retention with a fixed decay per head, RoPE on q and k, and a gated RMSNorm output.
//
// Field names and defaults are RetNetConfig's. Parsed by model_config.cc (model_type "retnet");
// the model is worker/model/retnet_model.h.
#pragma once

#include <cstdint>
#include <string>

namespace flame::worker {

struct ModelConfig;

struct RetNetOptions {
  int64_t num_heads = 8;
  int64_t num_kv_heads = 8;  // config null -> num_heads
  double expand_k = 1.0;
  double expand_v = 2.0;
  std::string feature_map;  // "" (none) | relu | swish | silu | sigmoid, on q and k
  bool use_output_gate = true;
  bool elementwise_affine = true;

  // The chunk length of fla's chunk_retention, which the FLOP count assumes.
  static constexpr int64_t kChunkSize = 64;
  // fla asserts this (its rotary kernel's limit); we keep the same bound so that a config that
  // trains here also loads there.
  static constexpr int64_t kMaxHeadKeyDim = 256;

  int64_t KeyDim(int64_t hidden_size) const;    // int(hidden * expand_k)
  int64_t ValueDim(int64_t hidden_size) const;  // int(hidden * expand_v)
  int64_t HeadKeyDim(int64_t hidden_size) const { return KeyDim(hidden_size) / num_heads; }
  int64_t HeadValueDim(int64_t hidden_size) const { return ValueDim(hidden_size) / num_heads; }

  // Training FLOPs per token (forward + backward = 3 x forward), matrix multiplies only:
  //   forward = 2 · (matmul weights per token) + per layer H · (2C·dk + 2C·dv + 4·dk·dv),
  // with the weights q, k, v, g (with the output gate), o, gate, up, down of every layer and
  // lm_head (also when tied), C = kChunkSize, dk, dv the head dims. The retention term is the
  // chunk form's cost per chunk of C tokens and head, divided by C:
  //   intra-chunk scores  Q Kᵀ   [C, dk] x [dk, C]    2·C²·dk
  //   intra-chunk output  A V    [C, C] x [C, dv]     2·C²·dv
  //   inter-chunk output  Q S    [C, dk] x [dk, dv]   2·C·dk·dv
  //   state update        Kᵀ V   [dk, C] x [C, dv]    2·C·dk·dv
  // The chunk matrices are counted whole (the kernel multiplies full tiles, then masks). There is
  // no term in the sequence length: linear attention costs the same per token at any length.
  double TrainingFlopsPerToken(const ModelConfig& config) const;
};

}  // namespace flame::worker
