#include "worker/model/decoder_lm.h"

#include <torch/torch.h>

#include <utility>

namespace flame::worker::model {

DecoderBlockImpl::DecoderBlockImpl(const ModelConfig& config,
                                   std::shared_ptr<SequenceMixer> mixer) {
  attn_norm_ = register_module("attn_norm", RmsNorm(config.hidden_size, config.norm_eps));
  attn_ = register_module("attn", std::move(mixer));
  mlp_norm_ = register_module("mlp_norm", RmsNorm(config.hidden_size, config.norm_eps));
  mlp_ = register_module("mlp", GatedMlp(config.hidden_size, config.MlpIntermediateSize()));
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& h, const torch::Tensor& cu_seqlens) {
  // fla's fused "add + norm": residual = h + attn(norm(h)); out = residual + mlp(norm(residual)).
  const torch::Tensor residual = h + attn_->Mix(attn_norm_(h), cu_seqlens);
  return residual + mlp_(mlp_norm_(residual));
}

DecoderModelImpl::DecoderModelImpl(const ModelConfig& config, const MixerFactory& make_mixer) {
  auto embedding_options = torch::nn::EmbeddingOptions(config.vocab_size, config.hidden_size);
  if (config.pad_token_id) embedding_options.padding_idx(*config.pad_token_id);
  embeddings = register_module("embeddings", torch::nn::Embedding(embedding_options));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    layers_->push_back(DecoderBlock(config, make_mixer(config, i)));
  }
  norm_ = register_module("norm", RmsNorm(config.hidden_size, config.norm_eps));
}

torch::Tensor DecoderModelImpl::forward(const torch::Tensor& input_ids,
                                        const torch::Tensor& cu_seqlens) {
  torch::Tensor h = embeddings(input_ids);  // [B, T, hidden]
  for (const auto& layer : *layers_) h = layer->as<DecoderBlock>()->forward(h, cu_seqlens);
  return norm_(h);
}

DecoderLm::DecoderLm(const ModelConfig& config, const MixerFactory& make_mixer) {
  model_ = register_module("model", DecoderModel(config, make_mixer));
  if (!config.tie_word_embeddings) {
    lm_head_ = register_module("lm_head", MakeLinear(config.hidden_size, config.vocab_size));
  }
}

CausalLmOutput DecoderLm::Forward(const torch::Tensor& input_ids, const torch::Tensor& labels,
                                  const torch::Tensor& cu_seqlens) {
  const torch::Tensor hidden = model_(input_ids, cu_seqlens);  // [B, T, hidden]
  CausalLmOutput out;
  out.logits = lm_head_ ? lm_head_(hidden)
                        : torch::nn::functional::linear(hidden, model_->embeddings->weight);
  if (labels.defined()) out.loss = ShiftedCrossEntropy(out.logits, labels);
  return out;
}

}  // namespace flame::worker::model
