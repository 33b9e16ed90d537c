// The training loop end to end on the demo corpus, without a coordinator: the loss falls, two
// ranks agree, a resumed run reproduces an uninterrupted one, and directives stop it cleanly.
#include "worker/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "tests/worker/trainer_harness.h"
#include "worker/data/corpus_tokenizer.h"
#include "worker/data/document_reader.h"

namespace flame::worker {
namespace {

using testing::DemoTrainConfig;
using testing::DirectiveAt;
using testing::RecordingSink;
using testing::TwoRankRun;
using testing::TempDir;

struct RunRecord {
  absl::StatusOr<TrainResult> result;
  std::map<int64_t, double> losses;
  int64_t resumed_from = 0;
};

RunRecord Train(const TrainConfig& config, ProgressSink* sink, DirectiveSource* directives) {
  LocalCommunicator communicator;
  Trainer trainer(config, {&communicator, sink, directives});
  RunRecord run{trainer.Run(), {}, 0};
  run.losses = trainer.step_losses();
  run.resumed_from = trainer.resumed_from_step();
  return run;
}

TEST(Trainer, LowersTheLossOnTheDemoCorpusAndReportsProgress) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 40;
  config.metrics.log_freq = 10;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  ContinueDirectiveSource directives;
  const RunRecord run = Train(config, &sink, &directives);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->outcome, TrainOutcome::kCompleted);
  EXPECT_EQ(run.result->step, 40);
  const double first = run.losses.at(1);
  const double last = (run.losses.at(38) + run.losses.at(39) + run.losses.at(40)) / 3;
  EXPECT_NEAR(first, std::log(2048.0), 0.2);  // an untrained model is near uniform
  EXPECT_LT(last, first - 0.8) << "loss went from " << first << " to " << last;

  ASSERT_EQ(sink.progress_.size(), 5u);  // steps 1, 10, 20, 30, 40
  EXPECT_EQ(sink.progress_[0].step, 1);
  EXPECT_DOUBLE_EQ(sink.progress_[0].loss, first);
  const ProgressUpdate& final = sink.progress_.back();
  EXPECT_EQ(final.step, 40);
  EXPECT_EQ(final.total_steps, 40);
  EXPECT_EQ(final.tokens, 40 * 4 * 64);
  EXPECT_GT(final.tokens_per_second, 0);
  EXPECT_GT(final.grad_norm, 0);
  EXPECT_GT(final.memory_gib, 0);
  // The LR shown after the last step is the schedule's floor (lr_min = 0.1 of 3e-3).
  EXPECT_NEAR(final.lr, 3e-4, 1e-9);
  EXPECT_TRUE(sink.checkpoints_.empty());
}

TEST(Trainer, ResumedRunReproducesTheUninterruptedLosses) {
  TempDir straight_dir, paused_dir;
  RecordingSink sink;
  ContinueDirectiveSource keep_going;
  const RunRecord straight = Train(DemoTrainConfig(straight_dir.path()), &sink, &keep_going);
  ASSERT_TRUE(straight.result.ok()) << straight.result.status();

  // Pause after step 4: the trainer saves step-4 and stops.
  DirectiveAt pause_at_4(4, Directive::kCheckpointStop);
  const RunRecord first = Train(DemoTrainConfig(paused_dir.path()), &sink, &pause_at_4);
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  EXPECT_EQ(first.result->outcome, TrainOutcome::kPaused);
  EXPECT_EQ(first.result->step, 4);
  EXPECT_TRUE(std::filesystem::exists(paused_dir.path() + "/checkpoint/step-4/manifest.json"));

  const RunRecord second = Train(DemoTrainConfig(paused_dir.path()), &sink, &keep_going);
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  EXPECT_EQ(second.result->outcome, TrainOutcome::kCompleted);
  EXPECT_EQ(second.resumed_from, 4);
  EXPECT_EQ(second.losses.begin()->first, 5);
  for (int64_t step = 1; step <= 8; ++step) {
    const double resumed = step <= 4 ? first.losses.at(step) : second.losses.at(step);
    EXPECT_DOUBLE_EQ(resumed, straight.losses.at(step)) << "step " << step;
  }
  // The resumed attempt reports where it came from.
  EXPECT_EQ(sink.progress_.back().resumed_from_step, 4);
  EXPECT_EQ(sink.progress_.back().tokens, 8 * 4 * 64);
}

TEST(Trainer, StopsWithoutSavingAndCommitsEveryCheckpointItSaves) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.checkpoint.interval = 2;
  config.checkpoint.keep_latest_k = 1;
  RecordingSink sink;
  DirectiveAt stop_at_5(5, Directive::kStop);
  const RunRecord run = Train(config, &sink, &stop_at_5);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->outcome, TrainOutcome::kStopped);
  EXPECT_EQ(run.result->step, 5);
  ASSERT_EQ(sink.checkpoints_.size(), 2u);  // steps 2 and 4; none at the stop
  EXPECT_EQ(sink.checkpoints_[1].step, 4);
  EXPECT_EQ(CheckpointStore(config.CheckpointRoot()).ListSteps(), std::vector<int64_t>{4});
  EXPECT_EQ(sink.progress_.back().step, 5);  // the step it stopped at is reported
}

TEST(Trainer, TwoRanksAverageGradientsAndStayIdentical) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.steps = 4;
  config.checkpoint.interval = 2;
  TwoRankRun ranks(config);
  ASSERT_TRUE(ranks.result(0).ok()) << ranks.result(0).status();
  ASSERT_TRUE(ranks.result(1).ok()) << ranks.result(1).status();
  EXPECT_EQ(ranks.trainer(0).step_losses(), ranks.trainer(1).step_losses());
  const auto params1 = ranks.trainer(1).model().named_parameters();
  for (const auto& item : ranks.trainer(0).model().named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), params1[item.key()])) << item.key();
  }
  ASSERT_FALSE(ranks.sink(0).progress_.empty());
  EXPECT_TRUE(ranks.sink(1).progress_.empty());  // only rank 0 reports
  EXPECT_EQ(ranks.sink(0).progress_.back().tokens, 4 * 2 * 4 * 64);
  // The checkpoint holds both ranks' data positions.
  CheckpointStore store(config.CheckpointRoot());
  ASSERT_TRUE(store.Verify(4).ok());
  EXPECT_EQ(ranks.sink(0).checkpoints_.size(), 2u);
}

// Every rank's data position in step-N/data_positions.json.
std::vector<DataPosition> SavedPositions(const TrainConfig& config, int64_t step) {
  const absl::StatusOr<std::string> text = ReadFileToString(
      CheckpointStore(config.CheckpointRoot()).StepPath(step) + "/data_positions.json");
  EXPECT_TRUE(text.ok()) << text.status();
  std::vector<DataPosition> positions;
  for (const auto& item : nlohmann::json::parse(text.value_or("[]"))) {
    absl::StatusOr<DataPosition> p = DecodeDataPosition(item.get<std::string>());
    EXPECT_TRUE(p.ok()) << p.status();
    positions.push_back(*p);
  }
  return positions;
}

TEST(Trainer, TwoRanksResumedAsOneContinueWithoutRepeatingOrSkippingData) {
  TempDir dir;
  const TrainConfig config = DemoTrainConfig(dir.path());  // B 4 x T 64, 8 steps
  {  // Two ranks pause after step 4 and save it.
    TwoRankRun ranks(config, 4, Directive::kCheckpointStop);
    ASSERT_TRUE(ranks.result(0).ok()) << ranks.result(0).status();
    ASSERT_TRUE(ranks.result(1).ok()) << ranks.result(1).status();
    EXPECT_EQ(ranks.result(0)->outcome, TrainOutcome::kPaused);
  }
  RecordingSink sink;
  ContinueDirectiveSource keep_going;
  const RunRecord resumed = Train(config, &sink, &keep_going);  // one rank, to step 8
  ASSERT_TRUE(resumed.result.ok()) << resumed.result.status();
  EXPECT_EQ(resumed.resumed_from, 4);
  for (const auto& [step, loss] : resumed.losses) EXPECT_TRUE(std::isfinite(loss)) << step;

  const std::vector<DataPosition> at4 = SavedPositions(config, 4);
  const std::vector<DataPosition> at8 = SavedPositions(config, 8);
  ASSERT_EQ(at4.size(), 2u);
  ASSERT_EQ(at8.size(), 1u);
  // The one rank took over both ranks' positions: replaying the loader from them gives the
  // position it saved at step 8.
  const std::unique_ptr<Tokenizer> tokenizer = *LoadSentencePieceTokenizer(config.tokenizer_path);
  LoaderOptions options;
  options.sources = config.training.dataset;
  options.seed = static_cast<uint64_t>(config.training.seed);
  options.batch_size = config.training.batch_size;
  options.seq_len = config.training.seq_len;
  std::unique_ptr<TextBatchLoader> replay = *TextBatchLoader::Create(options, tokenizer.get());
  ASSERT_TRUE(replay->Restore((*ReshardDataPositions(at4, 1))[0]).ok());
  for (int step = 5; step <= 8; ++step) ASSERT_TRUE(replay->Next().ok());
  EXPECT_EQ(EncodeDataPosition(replay->Position()), EncodeDataPosition(at8[0]));

  // Conservation: the documents read by the end (every one below the stream's next) hold exactly
  // the ids trained on plus those pending. A repeat would train on more, a gap on fewer.
  ASSERT_EQ(at8[0].streams.size(), 1u);
  absl::StatusOr<DocumentReader> reader = DocumentReader::Open(config.training.dataset);
  ASSERT_TRUE(reader.ok());
  int64_t read_ids = 0;
  std::string text;
  for (int64_t g = 0; g < at8[0].streams[0].next; ++g) {
    ASSERT_TRUE(*reader->Next(&text)) << "the test stays within one epoch";
    read_ids += static_cast<int64_t>(EncodeDocument(*tokenizer, text)->size());
  }
  const int64_t rows = config.training.batch_size * config.training.seq_len;
  EXPECT_EQ(read_ids, 2 * 4 * rows + 4 * rows + static_cast<int64_t>(at8[0].pending.size()));
  EXPECT_EQ(at8[0].source_tokens, std::vector<int64_t>{12 * rows});
}

TEST(Trainer, TrainsOnAMixOfTokenShardsAndTextAndResumesIt) {
  TempDir dir;
  const std::unique_ptr<Tokenizer> tokenizer =
      *LoadSentencePieceTokenizer(testing::DemoData("fortunes.model"));
  TokenizeOptions tokenize;
  tokenize.inputs = {testing::DemoData("fortunes-valid.jsonl")};
  tokenize.output = dir.path() + "/valid-shards";
  ASSERT_TRUE(TokenizeCorpus(*tokenizer, tokenize).ok());
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.dataset = {tokenize.output, testing::DemoData("fortunes.jsonl")};
  config.training.data_probs = {1, 3};
  config.training.varlen = true;
  config.training.batch_size = 1;
  config.training.seq_len = 128;
  config.training.context_len = 48;
  config.training.num_workers = 3;  // tokenizer threads besides the prefetching one
  NullProgressSink sink;
  DirectiveAt pause_at_4(4, Directive::kCheckpointStop);
  const RunRecord first = Train(config, &sink, &pause_at_4);
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  ContinueDirectiveSource keep_going;
  const RunRecord second = Train(config, &sink, &keep_going);
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  EXPECT_EQ(second.resumed_from, 4);
  for (const auto& [step, loss] : second.losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  const std::vector<DataPosition> at8 = SavedPositions(config, 8);
  ASSERT_EQ(at8.size(), 1u);
  ASSERT_EQ(at8[0].source_tokens.size(), 2u);
  EXPECT_GT(at8[0].source_tokens[0], 0);  // both sources were trained on
  EXPECT_GT(at8[0].source_tokens[1], at8[0].source_tokens[0]);
  EXPECT_EQ(at8[0].source_tokens[0] + at8[0].source_tokens[1], 8 * 128);

  config.training.data_probs = {1};  // one weight for two sources
  const RunRecord refused = Train(config, &sink, &keep_going);
  ASSERT_FALSE(refused.result.ok());
  EXPECT_NE(refused.result.status().message().find("training.data_probs"), std::string::npos)
      << refused.result.status();
}

TEST(Trainer, AccumulatesMicroBatchesIntoTheSameStepAsOneLargeBatch) {
  // GA 2 x batch 2 reads the same rows as GA 1 x batch 4 and must average to the same gradient.
  TempDir large_dir, accumulated_dir;
  TrainConfig large = DemoTrainConfig(large_dir.path());
  large.training.steps = 3;
  large.training.num_workers = 0;  // tokenize on the training thread (the others prefetch)
  large.checkpoint.enable_checkpoint = false;
  TrainConfig accumulated = large;
  accumulated.dump_folder = accumulated_dir.path();
  accumulated.training.batch_size = 2;
  accumulated.training.gradient_accumulation_steps = 2;
  NullProgressSink sink;
  ContinueDirectiveSource directives;
  const RunRecord a = Train(large, &sink, &directives);
  const RunRecord b = Train(accumulated, &sink, &directives);
  ASSERT_TRUE(a.result.ok() && b.result.ok());
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_NEAR(a.losses.at(step), b.losses.at(step), 1e-4) << "step " << step;
  }
}

TEST(Trainer, TrainsPackedVarlenRows) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.training.varlen = true;
  config.training.batch_size = 1;
  config.training.seq_len = 256;
  config.training.context_len = 32;
  config.training.steps = 3;
  config.checkpoint.enable_checkpoint = false;
  NullProgressSink sink;
  ContinueDirectiveSource directives;
  const RunRecord run = Train(config, &sink, &directives);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.losses.size(), 3u);
  for (const auto& [step, loss] : run.losses) EXPECT_TRUE(std::isfinite(loss)) << step;
}

TEST(Trainer, SkipsOptimizerStepsWhoseGradientIsNotFinite) {
  // Weights of 1e30 overflow the logits: every gradient norm is NaN or Inf.
  TempDir dir;
  const std::string model_path = dir.path() + "/huge.json";
  std::ofstream(model_path) << R"({"model_type": "gla", "hidden_size": 32, "num_hidden_layers": 1,
                                   "num_heads": 2, "vocab_size": 2048,
                                   "initializer_range": 1e30})";
  TrainConfig config = DemoTrainConfig(dir.path());
  config.model_config = model_path;
  config.training.steps = 3;
  config.training.skip_nan_inf = true;
  config.checkpoint.enable_checkpoint = false;
  RecordingSink sink;
  ContinueDirectiveSource directives;
  LocalCommunicator communicator;
  Trainer trainer(config, {&communicator, &sink, &directives});
  const absl::StatusOr<TrainResult> result = trainer.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(sink.progress_.empty());
  EXPECT_EQ(sink.progress_.back().skipped_steps, 3);
  EXPECT_FALSE(std::isfinite(sink.progress_.back().grad_norm));
  // No update happened: the weights are still finite (an update with NaN gradients is not).
  for (const auto& item : trainer.model().named_parameters()) {
    EXPECT_TRUE(torch::isfinite(item.value()).all().item<bool>()) << item.key();
  }
}

TEST(Trainer, ReportsBadInputAsAStatus) {
  TempDir dir;
  TrainConfig config = DemoTrainConfig(dir.path());
  config.tokenizer_path = dir.path() + "/missing.model";
  NullProgressSink sink;
  ContinueDirectiveSource directives;
  const RunRecord missing = Train(config, &sink, &directives);
  ASSERT_FALSE(missing.result.ok());
  EXPECT_NE(missing.result.status().message().find("missing.model"), std::string::npos);

  config = DemoTrainConfig(dir.path());
  config.checkpoint.load_step = 3;  // no such checkpoint
  const RunRecord no_checkpoint = Train(config, &sink, &directives);
  ASSERT_FALSE(no_checkpoint.result.ok());
  EXPECT_NE(no_checkpoint.result.status().message().find("checkpoint.load_step"), std::string::npos)
      << no_checkpoint.result.status();
}

}  // namespace
}  // namespace flame::worker
