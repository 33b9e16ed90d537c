// The trainer's metrics end to end on the demo corpus: every fact of a progress report, the
// held-out evaluation, TensorBoard events and profiler traces.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "tests/worker/event_file_decoder.h"
#include "tests/worker/test_util.h"
#include "tests/worker/trainer_harness.h"
#include "worker/config/flop_count.h"
#include "worker/metrics/evaluator.h"
#include "worker/trainer.h"

namespace flame::worker {
namespace {

using testing::DemoData;
using testing::DemoTrainConfig;
using testing::RecordingSink;
using testing::TwoRankRun;
using testing::TempDir;

absl::StatusOr<TrainResult> Train(const TrainConfig& config, RecordingSink* sink) {
  LocalCommunicator communicator;
  ContinueDirectiveSource directives;
  Trainer trainer(config, {&communicator, sink, &directives});
  return trainer.Run();
}

// Files directly under `folder` (recursively) whose name contains `part`.
std::vector<std::string> FilesContaining(const std::string& folder, const std::string& part) {
  std::vector<std::string> found;
  if (!std::filesystem::exists(folder)) return found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file() &&
        entry.path().filename().string().find(part) != std::string::npos) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

TEST(FlopCount, MatmulWeightsAreTheBuiltModelsLinearWeights) {
  // The hand count of flop_count.cc against the model the trainer builds: every nn::Linear weight,
  // plus the tied lm_head product that reuses the embedding table.
  for (const bool tied : {false, true}) {
    absl::StatusOr<ModelConfig> config =
        LoadModelConfig(testing::SourcePath("configs/models/gla_tiny.json"));
    ASSERT_TRUE(config.ok()) << config.status();
    config->tie_word_embeddings = tied;
    config->gla.use_short_conv = true;  // convolutions are not matmuls: no change expected
    std::shared_ptr<model::CausalLm> model = model::BuildCausalLm(*config, 1);
    int64_t linear_weights = 0;
    for (const auto& module : model->modules()) {
      if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module.get())) {
        linear_weights += linear->weight.numel();
      }
    }
    if (tied) linear_weights += config->hidden_size * config->vocab_size;
    EXPECT_EQ(MatmulParameterCount(*config), linear_weights) << "tied " << tied;
  }
}

TEST(TrainerMetrics, EveryReportCarriesFlamesFactsWithSensibleValues) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 6;
  config.metrics.log_freq = 3;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  const absl::StatusOr<TrainResult> result = Train(config, &sink);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(sink.progress_.size(), 3u);  // steps 1, 3, 6
  const double flops_per_token =
      TrainingFlopsPerToken(*LoadModelConfig(config.model_config), config.training.seq_len);
  double previous_elapsed = 0;
  for (const ProgressUpdate& p : sink.progress_) {
    SCOPED_TRACE(::testing::Message() << "step " << p.step);
    EXPECT_EQ(p.total_steps, 6);
    EXPECT_EQ(p.tokens, p.step * 4 * 64);  // batch 4 x seq 64, one rank
    EXPECT_TRUE(std::isfinite(p.loss) && p.loss > 0);
    EXPECT_GE(p.max_loss, p.loss);  // one rank: the max of the window's losses
    EXPECT_GT(p.lr, 0);
    EXPECT_GT(p.grad_norm, 0);
    EXPECT_EQ(p.skipped_steps, 0);
    EXPECT_GT(p.tokens_per_second, 0);
    EXPECT_NEAR(p.tflops, flops_per_token * p.tokens_per_second / 1e12, 1e-12);
    EXPECT_EQ(p.mfu, 0);            // CPU: no peak FLOPS, MFU is not defined
    EXPECT_GT(p.memory_gib, 0.01);  // resident set of a process that holds LibTorch
    EXPECT_GE(p.memory_peak_gib, p.memory_gib);
    EXPECT_EQ(p.memory_active_gib, 0);
    EXPECT_GT(p.step_seconds, 0);
    EXPECT_GE(p.data_loading_seconds, 0);
    EXPECT_LE(p.data_loading_seconds, p.step_seconds);
    EXPECT_GE(p.data_loading_share, 0);
    EXPECT_LE(p.data_loading_share, 100);
    EXPECT_GT(p.elapsed_seconds, previous_elapsed);
    previous_elapsed = p.elapsed_seconds;
    EXPECT_EQ(p.eval_step, 0);  // no metrics.eval_interval
  }
}

TEST(TrainerMetrics, EvaluatesEveryIntervalAndAtTheLastStep) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 7;
  config.metrics.log_freq = 100;  // only steps 1, evaluations and the last step report
  config.metrics.eval_interval = 3;
  config.metrics.eval_dataset = {DemoData("fortunes-valid.jsonl")};
  config.metrics.eval_steps = 2;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  const absl::StatusOr<TrainResult> result = Train(config, &sink);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<int64_t> steps, eval_steps;
  for (const ProgressUpdate& p : sink.progress_) {
    steps.push_back(p.step);
    eval_steps.push_back(p.eval_step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3, 6, 7}));
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{0, 3, 6, 7}));
  const double first = sink.progress_[1].eval_loss, last = sink.progress_[3].eval_loss;
  EXPECT_NEAR(first, std::log(2048.0), 0.5);  // barely trained: near uniform over the vocab
  EXPECT_LT(last, first);                     // the held-out loss follows the training
}

TEST(TrainerMetrics, EvalIntervalWithoutHeldOutFilesIsAClearError) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.metrics.eval_interval = 2;
  RecordingSink sink;
  const absl::StatusOr<TrainResult> result = Train(config, &sink);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("metrics.eval_dataset"), std::string::npos)
      << result.status();
  config.metrics.eval_dataset = {dir.path() + "/missing.jsonl"};
  const absl::StatusOr<TrainResult> missing = Train(config, &sink);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("metrics.eval_dataset"), std::string::npos)
      << missing.status();
}

TEST(Evaluator, SameWeightsGiveTheSameLossEveryTime) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.metrics.eval_interval = 1;
  config.metrics.eval_dataset = {DemoData("fortunes-valid.jsonl")};
  config.metrics.eval_steps = 3;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadSentencePieceTokenizer(config.tokenizer_path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<ModelConfig> model_config = LoadModelConfig(config.model_config);
  ASSERT_TRUE(model_config.ok()) << model_config.status();
  std::shared_ptr<model::CausalLm> model = model::BuildCausalLm(*model_config, 7);
  model->train();

  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator =
      Evaluator::Create(config, tokenizer->get(), 0, 1);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  const absl::StatusOr<double> first = (*evaluator)->LocalLoss(*model);
  const absl::StatusOr<double> second = (*evaluator)->LocalLoss(*model);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);         // the same batches, restarted: bit for bit
  EXPECT_TRUE(model->is_training());  // back in train mode
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());

  // Each rank evaluates its own share: rank 1 of 2 reads other documents.
  absl::StatusOr<std::unique_ptr<Evaluator>> rank1 =
      Evaluator::Create(config, tokenizer->get(), 1, 2);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  const absl::StatusOr<double> other = (*rank1)->LocalLoss(*model);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
}

TEST(TrainerMetrics, TwoRanksReportTheMeanOfTheirEvalShares) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 2;
  config.metrics.eval_interval = 2;
  config.metrics.eval_dataset = {DemoData("fortunes-valid.jsonl")};
  config.metrics.eval_steps = 2;
  config.checkpoint.enable_checkpoint = false;
  TwoRankRun ranks(config);
  ASSERT_TRUE(ranks.result(0).ok()) << ranks.result(0).status();
  ASSERT_TRUE(ranks.result(1).ok()) << ranks.result(1).status();
  ASSERT_FALSE(ranks.sink(0).progress_.empty());
  const ProgressUpdate& last = ranks.sink(0).progress_.back();
  ASSERT_EQ(last.eval_step, 2);
  EXPECT_EQ(last.tokens, 2 * 2 * 4 * 64);

  // The same evaluation by hand, each rank's share of the final weights.
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadSentencePieceTokenizer(config.tokenizer_path);
  ASSERT_TRUE(tokenizer.ok());
  double sum = 0;
  for (int64_t rank : {0, 1}) {
    absl::StatusOr<std::unique_ptr<Evaluator>> evaluator =
        Evaluator::Create(config, tokenizer->get(), rank, 2);
    ASSERT_TRUE(evaluator.ok()) << evaluator.status();
    const absl::StatusOr<double> loss = (*evaluator)->LocalLoss(ranks.trainer(0).model());
    ASSERT_TRUE(loss.ok()) << loss.status();
    sum += *loss;
  }
  EXPECT_NEAR(last.eval_loss, sum / 2, 1e-9);
}

TEST(TrainerMetrics, WritesTensorBoardEventsWithFlamesNames) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 4;
  config.metrics.log_freq = 2;
  config.metrics.enable_tensorboard = true;
  config.metrics.eval_interval = 4;
  config.metrics.eval_dataset = {DemoData("fortunes-valid.jsonl")};
  config.metrics.eval_steps = 1;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  const absl::StatusOr<TrainResult> result = Train(config, &sink);
  ASSERT_TRUE(result.ok()) << result.status();

  // <dump>/tb/<YYYYmmdd-HHMM>/events.out.tfevents.*: one run folder, one file, rank 0 only.
  const std::vector<std::string> files = FilesContaining(dir.path() + "/tb", "tfevents");
  ASSERT_EQ(files.size(), 1u);
  const std::string run = std::filesystem::path(files[0]).parent_path().filename().string();
  EXPECT_EQ(run.size(), 13u) << run;
  EXPECT_EQ(run[8], '-') << run;
  const testing::DecodedFile file = testing::DecodeEventFile(files[0]);
  ASSERT_EQ(file.error, "");
  ASSERT_EQ(file.events.size(), 4u);  // version, steps 1, 2, 4
  EXPECT_EQ(file.events[0].file_version, "brain.Event:2");
  ASSERT_EQ(sink.progress_.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const testing::DecodedEvent& event = file.events[i + 1];
    const ProgressUpdate& reported = sink.progress_[i];
    EXPECT_EQ(event.step, reported.step);
    EXPECT_FLOAT_EQ(event.scalars.at("loss_metrics/global_avg_loss"),
                    static_cast<float>(reported.loss));
    EXPECT_FLOAT_EQ(event.scalars.at("optimizer/lr"), static_cast<float>(reported.lr));
    EXPECT_FLOAT_EQ(event.scalars.at("throughput(tps)"),
                    static_cast<float>(reported.tokens_per_second));
    EXPECT_EQ(event.scalars.count("memory/max_reserved(GiB)"), 1u);
    EXPECT_EQ(event.scalars.count("loss_metrics/eval_loss"), event.step == 4 ? 1u : 0u);
  }
  EXPECT_FLOAT_EQ(file.events[3].scalars.at("loss_metrics/eval_loss"),
                  static_cast<float>(sink.progress_[2].eval_loss));
}

TEST(TrainerMetrics, SaveForAllRanksGivesEveryRankItsFolderUnderOneRun) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 2;
  config.metrics.enable_tensorboard = true;
  config.metrics.save_for_all_ranks = true;
  config.metrics.save_tb_folder = "events";
  config.checkpoint.enable_checkpoint = false;
  TwoRankRun ranks(config);
  ASSERT_TRUE(ranks.result(0).ok()) << ranks.result(0).status();
  ASSERT_TRUE(ranks.result(1).ok()) << ranks.result(1).status();
  std::vector<std::string> files = FilesContaining(dir.path() + "/events", "tfevents");
  ASSERT_EQ(files.size(), 2u);
  std::sort(files.begin(), files.end());
  const std::filesystem::path first(files[0]), second(files[1]);
  EXPECT_EQ(first.parent_path().filename(), "rank_0");
  EXPECT_EQ(second.parent_path().filename(), "rank_1");
  // Rank 0's start time names the run folder of both, even across a minute boundary.
  EXPECT_EQ(first.parent_path().parent_path(), second.parent_path().parent_path());
  for (const std::string& path : files) {
    const testing::DecodedFile file = testing::DecodeEventFile(path);
    ASSERT_EQ(file.error, "") << path;
    ASSERT_EQ(file.events.size(), 3u) << path;  // version, steps 1 and 2
    // The losses are reduced over ranks before logging: both ranks write the same value.
    EXPECT_FLOAT_EQ(file.events[2].scalars.at("loss_metrics/global_avg_loss"),
                    static_cast<float>(ranks.sink(0).progress_.back().loss));
  }
}

TEST(TrainerMetrics, ProfilesEveryProfileFreqStepIntoAChromeTrace) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 4;
  config.profiling.enable_profiling = true;
  config.profiling.profile_freq = 2;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  const absl::StatusOr<TrainResult> result = Train(config, &sink);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string traces = dir.path() + "/profile_traces";
  EXPECT_EQ(FilesContaining(traces, "trace").size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(traces + "/iteration_1"));
  for (int step : {2, 4}) {
    const std::string path = absl::StrCat(traces, "/iteration_", step, "/rank0_trace.json");
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "no " << path;
    const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(trace.is_discarded()) << path << " is not JSON";
    ASSERT_TRUE(trace.contains("traceEvents")) << path;
    bool step_event = false, matmul = false;
    for (const nlohmann::json& event : trace["traceEvents"]) {
      const std::string name = event.value("name", "");
      step_event |= name == absl::StrCat("ProfilerStep#", step);
      matmul |= name == "aten::mm" || name == "aten::addmm" || name == "aten::matmul";
    }
    EXPECT_TRUE(step_event) << path << " has no ProfilerStep#" << step;
    EXPECT_TRUE(matmul) << path << " records no matrix multiply";
  }
}

}  // namespace
}  // namespace flame::worker
