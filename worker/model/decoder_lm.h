// The *ForCausalLM skeleton that fla's families share (fla/models/<family>/modeling_*.py),
// parameterised by the sequence mixer that sits in each block's `attn` slot:
//
//   DecoderLm        model.*, lm_head (absent when tie_word_embeddings: the logits use
//                    model.embeddings.weight)
//   DecoderModel     embeddings, layers.{i}, norm
//   DecoderBlock     attn_norm -> attn (the mixer) -> + residual -> mlp_norm -> mlp -> + residual
//
// Module names and registration order are fla's, so the parameter names are fla's and the
// initialisation draws in a fixed order.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <functional>
#include <memory>

#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

// What a block needs from its mixer (softmax attention, retention, ...).
class SequenceMixer : public torch::nn::Module {
 public:
  // x [B, T, hidden] -> [B, T, hidden]; cu_seqlens int64 [N + 1] for packed rows (B == 1): no
  // token may see another sequence of the row.
  virtual torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) = 0;
};

// Builds the mixer of layer `layer_idx`.
using MixerFactory =
    std::function<std::shared_ptr<SequenceMixer>(const ModelConfig& config, int64_t layer_idx)>;

class DecoderBlockImpl : public torch::nn::Module {
 public:
  DecoderBlockImpl(const ModelConfig& config, std::shared_ptr<SequenceMixer> mixer);
  // h [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cu_seqlens);

 private:
  RmsNorm attn_norm_{nullptr}, mlp_norm_{nullptr};
  std::shared_ptr<SequenceMixer> attn_;
  GatedMlp mlp_{nullptr};
};
TORCH_MODULE(DecoderBlock);

class DecoderModelImpl : public torch::nn::Module {
 public:
  DecoderModelImpl(const ModelConfig& config, const MixerFactory& make_mixer);
  // input_ids [B, T] -> final-normed hidden states [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens);

  torch::nn::Embedding embeddings{nullptr};

 private:
  torch::nn::ModuleList layers_{nullptr};
  RmsNorm norm_{nullptr};
};
TORCH_MODULE(DecoderModel);

class DecoderLm : public CausalLm {
 public:
  DecoderLm(const ModelConfig& config, const MixerFactory& make_mixer);
  CausalLmOutput Forward(const torch::Tensor& input_ids, const torch::Tensor& labels,
                         const torch::Tensor& cu_seqlens) override;

 private:
  DecoderModel model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // null when tied
};

}  // namespace flame::worker::model
