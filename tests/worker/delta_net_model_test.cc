// The delta_net and gated_deltanet models: fla's parameter names, shapes and counts, fla's special
// initialisation of A_log and dt_bias, packed (varlen) rows behaving like separate sequences, and
// training on the demo corpus.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/test_util.h"
#include "worker/config/model_config.h"
#include "worker/dist/communicator.h"
#include "worker/model/causal_lm.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace flame::worker::model {
namespace {

ModelConfig LoadShipped(const std::string& name) {
  const absl::StatusOr<ModelConfig> config =
      LoadModelConfig(testing::SourcePath(absl::StrCat("configs/models/", name)));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig();
}

// A small config of either family: hidden 32, 2 layers, 2 heads, vocab 50.
ModelConfig TinyConfig(ModelFamily family) {
  ModelConfig config;
  config.family = family;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.vocab_size = 50;
  if (family == ModelFamily::kDeltaNet) {
    config.model_type = "delta_net";
    config.delta_net.num_heads = 2;
  } else {
    config.model_type = "gated_deltanet";
    config.gated_deltanet.num_heads = 2;
    config.gated_deltanet.head_dim = 8;
  }
  return config;
}

std::map<std::string, std::vector<int64_t>> Shapes(const CausalLm& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model.named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

TEST(DeltaNetModel, UsesFlaParameterNamesAndCountFor340M) {
  const ModelConfig config = LoadShipped("delta_net_340M.json");
  const auto model = BuildCausalLm(config, 0);
  const std::map<std::string, std::vector<int64_t>> shapes = Shapes(*model);
  // One layer of fla's DeltaNet block (d = 1024, 8 heads of 128, no gate):
  const std::map<std::string, std::vector<int64_t>> layer = {
      {"attn_norm.weight", {1024}},
      {"attn.q_proj.weight", {1024, 1024}},
      {"attn.k_proj.weight", {1024, 1024}},
      {"attn.v_proj.weight", {1024, 1024}},
      {"attn.b_proj.weight", {8, 1024}},
      {"attn.q_conv1d.weight", {1024, 1, 4}},
      {"attn.k_conv1d.weight", {1024, 1, 4}},
      {"attn.v_conv1d.weight", {1024, 1, 4}},
      {"attn.o_norm.weight", {128}},
      {"attn.o_proj.weight", {1024, 1024}},
      {"mlp_norm.weight", {1024}},
      {"mlp.gate_proj.weight", {2816, 1024}},
      {"mlp.up_proj.weight", {2816, 1024}},
      {"mlp.down_proj.weight", {1024, 2816}},
  };
  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {32000, 1024}},
      {"model.norm.weight", {1024}},
      {"lm_head.weight", {32000, 1024}},
  };
  for (int i = 0; i < 24; ++i) {
    for (const auto& [name, shape] : layer)
      expected[absl::StrCat("model.layers.", i, ".", name)] = shape;
  }
  EXPECT_EQ(shapes, expected);
  // The count from fla's DeltaNetForCausalLM, per layer:
  //   attn_norm 1024 + q/k/v_proj 3·1024² + b_proj 8·1024 + convs 3·1024·4 + o_norm 128
  //   + o_proj 1024² + mlp_norm 1024 + mlp 3·1024·2816
  //   = 1024 + 3145728 + 8192 + 12288 + 128 + 1048576 + 1024 + 8650752 = 12867712
  // times 24 layers = 308825088, plus embeddings and lm_head 2·32000·1024 = 65536000 and the
  // final norm 1024: 374362112.
  EXPECT_EQ(CountParameters(*model), 374362112);
}

TEST(GatedDeltaNetModel, UsesFlaParameterNamesAndCountFor340M) {
  const ModelConfig config = LoadShipped("gated_deltanet_340M.json");
  const auto model = BuildCausalLm(config, 0);
  const std::map<std::string, std::vector<int64_t>> shapes = Shapes(*model);
  // One layer of fla's GatedDeltaNet block (d = 1024, 6 heads, head_dim 256, value heads 512):
  const std::map<std::string, std::vector<int64_t>> layer = {
      {"attn_norm.weight", {1024}},
      {"attn.q_proj.weight", {1536, 1024}},
      {"attn.k_proj.weight", {1536, 1024}},
      {"attn.v_proj.weight", {3072, 1024}},
      {"attn.a_proj.weight", {6, 1024}},
      {"attn.b_proj.weight", {6, 1024}},
      {"attn.A_log", {6}},
      {"attn.dt_bias", {6}},
      {"attn.q_conv1d.weight", {1536, 1, 4}},
      {"attn.k_conv1d.weight", {1536, 1, 4}},
      {"attn.v_conv1d.weight", {3072, 1, 4}},
      {"attn.g_proj.weight", {3072, 1024}},
      {"attn.o_norm.weight", {512}},
      {"attn.o_proj.weight", {1024, 3072}},
      {"mlp_norm.weight", {1024}},
      {"mlp.gate_proj.weight", {2816, 1024}},
      {"mlp.up_proj.weight", {2816, 1024}},
      {"mlp.down_proj.weight", {1024, 2816}},
  };
  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {32000, 1024}},
      {"model.norm.weight", {1024}},
      {"lm_head.weight", {32000, 1024}},
  };
  for (int i = 0; i < 21; ++i) {
    for (const auto& [name, shape] : layer)
      expected[absl::StrCat("model.layers.", i, ".", name)] = shape;
  }
  EXPECT_EQ(shapes, expected);
  // The count from fla's GatedDeltaNetForCausalLM, per layer:
  //   attn_norm 1024 + q/k_proj 2·1536·1024 + v_proj 3072·1024 + a/b_proj 2·6·1024
  //   + A_log, dt_bias 2·6 + convs (1536 + 1536 + 3072)·4 + g_proj 3072·1024 + o_norm 512
  //   + o_proj 1024·3072 + mlp_norm 1024 + mlp 3·1024·2816
  //   = 1024 + 3145728 + 3145728 + 12288 + 12 + 24576 + 3145728 + 512 + 3145728 + 1024 + 8650752
  //   = 21273100
  // times 21 layers = 446735100, plus embeddings and lm_head 65536000 and the final norm 1024:
  // 512272124.
  EXPECT_EQ(CountParameters(*model), 512272124);
}

TEST(DeltaNetModel, NamesOptionalPartsLikeFla) {
  ModelConfig config = TinyConfig(ModelFamily::kDeltaNet);
  config.delta_net.use_gate = true;
  config.delta_net.use_beta = false;
  config.delta_net.use_short_conv = false;
  config.tie_word_embeddings = true;
  const std::map<std::string, std::vector<int64_t>> shapes = Shapes(*BuildCausalLm(config, 0));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.attn.b_proj.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.attn.q_conv1d.weight"), 0u);
  EXPECT_EQ(shapes.at("model.layers.0.attn.g_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.attn.o_norm.weight"), (std::vector<int64_t>{16}));

  ModelConfig gated = TinyConfig(ModelFamily::kGatedDeltaNet);
  gated.gated_deltanet.num_v_heads = 4;  // grouped value heads: 4 value heads share 2 q/k heads
  gated.gated_deltanet.use_gate = false;
  const std::map<std::string, std::vector<int64_t>> gva = Shapes(*BuildCausalLm(gated, 0));
  EXPECT_EQ(gva.at("model.layers.1.attn.v_proj.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(gva.at("model.layers.1.attn.q_proj.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(gva.at("model.layers.1.attn.a_proj.weight"), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(gva.at("model.layers.1.attn.A_log"), (std::vector<int64_t>{4}));
  EXPECT_EQ(gva.count("model.layers.1.attn.g_proj.weight"), 0u);
}

TEST(GatedDeltaNetModel, InitialisesALogAndDtBiasLikeFlaAndTheRestNormally) {
  ModelConfig config = TinyConfig(ModelFamily::kGatedDeltaNet);
  config.gated_deltanet.num_heads = 64;  // many heads, so the draws have a distribution to test
  config.gated_deltanet.head_dim = 2;
  const auto a = BuildCausalLm(config, 42), b = BuildCausalLm(config, 42);
  const auto params_a = a->named_parameters(), params_b = b->named_parameters();
  for (const auto& item : params_a) {
    EXPECT_TRUE(torch::equal(item.value(), params_b[item.key()])) << item.key();
  }
  const torch::Tensor a_log = params_a["model.layers.0.attn.A_log"];
  const torch::Tensor dt_bias = params_a["model.layers.0.attn.dt_bias"];
  // A = exp(A_log) ~ U(0, 16).
  const torch::Tensor A = a_log.exp();
  EXPECT_TRUE((A > 0).all().item<bool>() && (A < 16).all().item<bool>());
  EXPECT_NEAR(A.mean().item<double>(), 8.0, 2.0);
  // softplus(dt_bias) = dt ∈ [1e-3, 0.1] (the 1e-4 floor lies below the range), log-uniform.
  const torch::Tensor dt = torch::softplus(dt_bias);
  EXPECT_TRUE((dt > 1e-3 * 0.999).all().item<bool>() && (dt < 0.1 * 1.001).all().item<bool>());
  EXPECT_NEAR(dt.log().mean().item<double>(), 0.5 * (std::log(1e-3) + std::log(0.1)), 0.6);
  // The two layers draw different values; projections are normal(0, 0.02).
  EXPECT_FALSE(torch::equal(a_log, params_a["model.layers.1.attn.A_log"]));
  EXPECT_NEAR(params_a["model.layers.0.attn.q_proj.weight"].std().item<double>(), 0.02, 0.004);
}

// Every option that changes the computation: the model still trains (finite loss and gradients),
// and with the same seed (same weights) it computes something other than the default.
TEST(DeltaNetModel, WiresEveryComputeOption) {
  const torch::Tensor ids = torch::randint(0, 50, {2, 20}, torch::kLong);
  const auto logits_of = [&](const ModelConfig& config) {
    const auto model = BuildCausalLm(config, 5);
    const CausalLmOutput out = model->Forward(ids, ids);
    out.loss.backward();
    EXPECT_TRUE(std::isfinite(out.loss.item<double>())) << config.model_type;
    for (const auto& item : model->named_parameters()) {
      EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
    }
    return out.logits.detach();
  };
  const torch::Tensor delta_default = logits_of(TinyConfig(ModelFamily::kDeltaNet));
  const std::vector<std::function<void(DeltaNetOptions&)>> delta_variants = {
      [](DeltaNetOptions& o) { o.qk_activation = "relu"; },
      [](DeltaNetOptions& o) { o.qk_activation = "elu"; },
      [](DeltaNetOptions& o) { o.qk_activation = "identity"; },
      [](DeltaNetOptions& o) { o.qk_norm = "sum"; },
      [](DeltaNetOptions& o) { o.allow_neg_eigval = true; },
      [](DeltaNetOptions& o) { o.use_short_conv = false; },
  };
  for (size_t i = 0; i < delta_variants.size(); ++i) {
    ModelConfig config = TinyConfig(ModelFamily::kDeltaNet);
    delta_variants[i](config.delta_net);
    EXPECT_FALSE(torch::allclose(logits_of(config), delta_default)) << "delta_net variant " << i;
  }
  const torch::Tensor gated_default = logits_of(TinyConfig(ModelFamily::kGatedDeltaNet));
  const std::vector<std::function<void(GatedDeltaNetOptions&)>> gated_variants = {
      [](GatedDeltaNetOptions& o) { o.output_gate_activation = "sigmoid"; },
      [](GatedDeltaNetOptions& o) { o.allow_neg_eigval = true; },
      [](GatedDeltaNetOptions& o) { o.use_short_conv = false; },
  };
  for (size_t i = 0; i < gated_variants.size(); ++i) {
    ModelConfig config = TinyConfig(ModelFamily::kGatedDeltaNet);
    gated_variants[i](config.gated_deltanet);
    EXPECT_FALSE(torch::allclose(logits_of(config), gated_default)) << "gated variant " << i;
  }
  // Shapes change with these; they only need to run.
  ModelConfig no_beta = TinyConfig(ModelFamily::kDeltaNet);
  no_beta.delta_net.use_beta = false;
  no_beta.delta_net.use_gate = true;
  logits_of(no_beta);
  ModelConfig no_gate = TinyConfig(ModelFamily::kGatedDeltaNet);
  no_gate.gated_deltanet.use_gate = false;
  logits_of(no_gate);
}

class DeltaFamilies : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(DeltaFamilies, ForwardAndBackwardReachEveryParameter) {
  const auto model = BuildCausalLm(TinyConfig(GetParam()), 1);
  const torch::Tensor ids = torch::randint(0, 50, {2, 70}, torch::kLong);
  const CausalLmOutput out = model->Forward(ids, ids);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 70, 50}));
  EXPECT_NEAR(out.loss.item<double>(), std::log(50.0), 0.1);  // near uniform when untrained
  out.loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
    EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
  }
}

TEST_P(DeltaFamilies, TreatsPackedSegmentsAsSeparateSequencesInFloat64) {
  ModelConfig config = TinyConfig(GetParam());
  config.gated_deltanet.num_v_heads = 4;  // exercises grouped value heads in the gated family
  const auto model = BuildCausalLm(config, 3);
  model->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  // Odd segment lengths; the second spans a chunk boundary of the packed row and its own.
  const torch::Tensor ids = torch::randint(0, 50, {1, 150}, torch::kLong);
  const torch::Tensor cu_seqlens = torch::tensor({0, 37, 141, 150}, torch::kLong);
  const torch::Tensor packed = model->Forward(ids, {}, cu_seqlens).logits;
  std::vector<torch::Tensor> alone;
  for (const auto& [begin, length] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {37, 104}, {141, 9}}) {
    alone.push_back(model->Forward(ids.narrow(1, begin, length), {}).logits);
  }
  const torch::Tensor separate = torch::cat(alone, 1);
  EXPECT_LT((packed - separate).abs().max().item<double>(), 1e-10);
  // Without cu_seqlens the later segments see the earlier ones: the outputs differ.
  const torch::Tensor joined = model->Forward(ids, {}).logits;
  EXPECT_GT((joined.narrow(1, 37, 104) - alone[1]).abs().max().item<double>(), 1e-6);
}

// ~40 steps of the tiny config on the demo corpus (as tests/worker/trainer_test.cc): the loss
// must fall clearly from its uniform start.
TEST_P(DeltaFamilies, TrainsOnTheDemoCorpus) {
  testing::TempDir dir;
  TrainConfig config = testing::DemoTrainConfig(dir.path());
  config.model_config = testing::SourcePath(GetParam() == ModelFamily::kDeltaNet
                                                ? "configs/models/delta_net_tiny.json"
                                                : "configs/models/gated_deltanet_tiny.json");
  config.training.steps = 40;
  config.metrics.log_freq = 10;
  config.checkpoint.enable_checkpoint = false;
  LocalCommunicator communicator;
  NullProgressSink sink;
  ContinueDirectiveSource directives;
  Trainer trainer(config, {&communicator, &sink, &directives});
  const absl::StatusOr<TrainResult> result = trainer.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::map<int64_t, double> losses = trainer.step_losses();
  const double first = losses.at(1);
  const double last = (losses.at(38) + losses.at(39) + losses.at(40)) / 3;
  EXPECT_NEAR(first, std::log(2048.0), 0.2);
  EXPECT_LT(last, first - 0.8) << "loss went from " << first << " to " << last;
}

// Packed varlen rows (cu_seqlens from document boundaries and context_len splits) through the
// trainer: the short convolutions and the op restart per segment and the loss stays finite.
TEST_P(DeltaFamilies, TrainsPackedVarlenRows) {
  testing::TempDir dir;
  TrainConfig config = testing::DemoTrainConfig(dir.path());
  config.model_config = testing::SourcePath(GetParam() == ModelFamily::kDeltaNet
                                                ? "configs/models/delta_net_tiny.json"
                                                : "configs/models/gated_deltanet_tiny.json");
  config.training.varlen = true;
  config.training.batch_size = 1;
  config.training.seq_len = 256;
  config.training.context_len = 32;
  config.training.steps = 3;
  config.checkpoint.enable_checkpoint = false;
  LocalCommunicator communicator;
  NullProgressSink sink;
  ContinueDirectiveSource directives;
  Trainer trainer(config, {&communicator, &sink, &directives});
  const absl::StatusOr<TrainResult> result = trainer.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::map<int64_t, double> losses = trainer.step_losses();
  EXPECT_EQ(losses.size(), 3u);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
}

INSTANTIATE_TEST_SUITE_P(Families, DeltaFamilies,
                         ::testing::Values(ModelFamily::kDeltaNet, ModelFamily::kGatedDeltaNet),
                         [](const ::testing::TestParamInfo<ModelFamily>& info) {
                           return info.param == ModelFamily::kDeltaNet ? "DeltaNet"
                                                                       : "GatedDeltaNet";
                         });

}  // namespace
}  // namespace flame::worker::model
