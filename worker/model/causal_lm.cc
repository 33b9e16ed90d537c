#include "worker/model/causal_lm.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "worker/model/delta_net_model.h"
#include "worker/model/gla_model.h"
#include "worker/model/layers.h"
#include "worker/model/retnet_model.h"
#include "worker/model/transformer_model.h"

namespace flame::worker::model {

std::shared_ptr<CausalLm> BuildCausalLm(const ModelConfig& config, uint64_t seed) {
  std::shared_ptr<CausalLm> model;
  switch (config.family) {
    case ModelFamily::kGla:
      model = MakeGlaLm(config);
      break;
    case ModelFamily::kTransformer:
      model = MakeTransformerLm(config);
      break;
    case ModelFamily::kRetNet:
      model = MakeRetNetLm(config);
      break;
    case ModelFamily::kDeltaNet:
    case ModelFamily::kGatedDeltaNet:
      model = MakeDeltaNetLm(config);
      break;
  }
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  InitWeights(*model, config.initializer_range, generator);
  return model;
}

void InitWeights(torch::nn::Module& model, double std, at::Generator& generator) {
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<torch::nn::Module>& module : model.modules()) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module.get())) {
      linear->weight.normal_(0.0, std, generator);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(module.get())) {
      embedding->weight.normal_(0.0, std, generator);
    } else if (auto* conv = dynamic_cast<ShortConvolutionImpl*>(module.get())) {
      conv->weight.normal_(0.0, std, generator);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* norm = dynamic_cast<RmsNormImpl*>(module.get())) {
      if (norm->weight.defined()) norm->weight.fill_(1.0);
    } else if (auto* gated = dynamic_cast<GatedRmsNormImpl*>(module.get())) {
      if (gated->weight.defined()) gated->weight.fill_(1.0);
    }
    if (auto* custom = dynamic_cast<CustomInitModule*>(module.get())) {
      custom->InitCustomParameters(generator);
    }
  }
}

torch::Tensor ShiftedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels) {
  TORCH_CHECK(labels.dim() == 2 && logits.dim() == 3 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "labels ", labels.sizes(), " must be [B, T] for logits ", logits.sizes());
  // Position t predicts token t + 1; the last position has no target.
  const torch::Tensor shifted = torch::cat(
      {labels.slice(1, 1), torch::full({labels.size(0), 1}, kIgnoreIndex, labels.options())},
      1);  // [B, T]
  const int64_t vocab = logits.size(-1);
  const torch::Tensor flat = logits.reshape({-1, vocab});
  return torch::nn::functional::cross_entropy(
      flat.scalar_type() == torch::kDouble ? flat : flat.to(torch::kFloat32), shifted.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex));
}

int64_t CountParameters(const torch::nn::Module& model) {
  int64_t count = 0;
  for (const torch::Tensor& p : model.parameters()) count += p.numel();
  return count;
}

}  // namespace flame::worker::model
