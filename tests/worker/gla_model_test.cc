// The GLA model: fla's parameter names and shapes, forward/backward shapes, the label shift,
// initialisation, and packed (varlen) rows behaving like separate sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"

namespace flame::worker::model {
namespace {

ModelConfig TinyConfig() {
  ModelConfig config;
  config.model_type = "gla";
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.vocab_size = 50;
  config.gla.num_heads = 2;
  config.gla.num_kv_heads = 2;
  return config;
}

std::map<std::string, std::vector<int64_t>> Shapes(const CausalLm& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model.named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

TEST(GlaModel, UsesFlaParameterNamesAndShapes) {
  ModelConfig config = TinyConfig();
  config.num_hidden_layers = 1;
  const auto model = BuildCausalLm(config, 0);
  // hidden 32, key dim 16 (expand_k 0.5), value dim 32, 2 heads, MLP 256 (256·ceil(42/256)).
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {50, 32}},
      {"model.layers.0.attn_norm.weight", {32}},
      {"model.layers.0.attn.q_proj.weight", {16, 32}},
      {"model.layers.0.attn.k_proj.weight", {16, 32}},
      {"model.layers.0.attn.v_proj.weight", {32, 32}},
      {"model.layers.0.attn.g_proj.weight", {32, 32}},
      {"model.layers.0.attn.gk_proj.0.weight", {16, 32}},
      {"model.layers.0.attn.gk_proj.1.weight", {16, 16}},
      {"model.layers.0.attn.gk_proj.1.bias", {16}},
      {"model.layers.0.attn.o_proj.weight", {32, 32}},
      {"model.layers.0.attn.g_norm_swish_gate.weight", {16}},
      {"model.layers.0.mlp_norm.weight", {32}},
      {"model.layers.0.mlp.gate_proj.weight", {256, 32}},
      {"model.layers.0.mlp.up_proj.weight", {256, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 256}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {50, 32}},
  };
  EXPECT_EQ(Shapes(*model), expected);
}

TEST(GlaModel, NamesTheOutputNormGNormWithoutFusedNormAndDropsLmHeadWhenTied) {
  ModelConfig config = TinyConfig();
  config.fuse_norm = false;
  config.tie_word_embeddings = true;
  config.gla.use_short_conv = true;
  const std::map<std::string, std::vector<int64_t>> shapes = Shapes(*BuildCausalLm(config, 0));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.1.attn.g_norm.weight"), 1u);
  EXPECT_EQ(shapes.count("model.layers.1.attn.g_norm_swish_gate.weight"), 0u);
  EXPECT_EQ(shapes.at("model.layers.0.attn.q_conv1d.weight"), (std::vector<int64_t>{16, 1, 4}));
  EXPECT_EQ(shapes.at("model.layers.0.attn.v_conv1d.weight"), (std::vector<int64_t>{32, 1, 4}));
}

TEST(GlaModel, ForwardGivesLogitsPerPositionAndBackwardReachesEveryParameter) {
  const auto model = BuildCausalLm(TinyConfig(), 1);
  const torch::Tensor ids = torch::randint(0, 50, {3, 70}, torch::kLong);
  const CausalLmOutput out = model->Forward(ids, ids);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{3, 70, 50}));
  ASSERT_EQ(out.loss.dim(), 0);
  // Untrained with std 0.02, the model is close to uniform over 50 tokens.
  EXPECT_NEAR(out.loss.item<double>(), std::log(50.0), 0.1);
  out.loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
  }
}

TEST(GlaModel, ShiftsLabelsLeftAndIgnoresTheLastPosition) {
  const auto model = BuildCausalLm(TinyConfig(), 2);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, 50, {2, 9}, torch::kLong);
  const torch::Tensor labels = torch::randint(0, 50, {2, 9}, torch::kLong);
  const CausalLmOutput out = model->Forward(ids, labels);
  // Position t predicts labels[t + 1]: the mean over the first T - 1 positions.
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      out.logits.narrow(1, 0, 8).reshape({-1, 50}), labels.narrow(1, 1, 8).reshape({-1}));
  EXPECT_NEAR(out.loss.item<double>(), expected.item<double>(), 1e-6);
  // labels[:, 0] is never a target.
  torch::Tensor changed = labels.clone();
  changed.select(1, 0).fill_(7);
  EXPECT_NEAR(model->Forward(ids, changed).loss.item<double>(), out.loss.item<double>(), 1e-7);
  // Ignored labels (-100) drop out of the mean.
  torch::Tensor ignored = labels.clone();
  ignored.narrow(1, 5, 4).fill_(kIgnoreIndex);
  const torch::Tensor partial = torch::nn::functional::cross_entropy(
      out.logits.narrow(1, 0, 4).reshape({-1, 50}), labels.narrow(1, 1, 4).reshape({-1}));
  EXPECT_NEAR(model->Forward(ids, ignored).loss.item<double>(), partial.item<double>(), 1e-6);
}

TEST(GlaModel, InitialisesLikeFlaAndReproduciblyFromTheSeed) {
  ModelConfig config = TinyConfig();
  config.initializer_range = 0.05;
  config.hidden_size = 128;
  const auto a = BuildCausalLm(config, 42), b = BuildCausalLm(config, 42);
  const auto c = BuildCausalLm(config, 43);
  const auto params_a = a->named_parameters(), params_b = b->named_parameters();
  const auto params_c = c->named_parameters();
  for (const auto& item : params_a) {
    const torch::Tensor& p = item.value();
    EXPECT_TRUE(torch::equal(p, params_b[item.key()])) << item.key();
    const std::string& name = item.key();
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::all(p == 1).item<bool>()) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(torch::all(p == 0).item<bool>()) << name;
    } else {
      EXPECT_NEAR(p.std().item<double>(), 0.05, 0.01) << name;
      EXPECT_FALSE(torch::equal(p, params_c[item.key()])) << name;
    }
  }
}

TEST(GlaModel, TreatsPackedSegmentsAsSeparateSequences) {
  ModelConfig config = TinyConfig();
  config.gla.use_short_conv = true;  // the convolution must restart at segment starts too
  const auto model = BuildCausalLm(config, 3);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, 50, {1, 100}, torch::kLong);
  const torch::Tensor cu_seqlens = torch::tensor({0, 30, 100}, torch::kLong);
  const torch::Tensor packed = model->Forward(ids, {}, cu_seqlens).logits;
  const torch::Tensor first = model->Forward(ids.narrow(1, 0, 30), {}).logits;
  const torch::Tensor second = model->Forward(ids.narrow(1, 30, 70), {}).logits;
  EXPECT_TRUE(torch::allclose(packed, torch::cat({first, second}, 1), 1e-5, 1e-6));
  // Without cu_seqlens the second segment sees the first: the outputs differ.
  EXPECT_FALSE(
      torch::allclose(model->Forward(ids, {}).logits.narrow(1, 30, 70), second, 1e-5, 1e-6));
}

}  // namespace
}  // namespace flame::worker::model
