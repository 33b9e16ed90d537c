// Exact resume: a run killed mid-way (no save at the kill; the last interval checkpoint is all
// that is left) and resumed logs, at every later step, the loss of the run that was never
// interrupted, to 1e-6 relative, on CPU. Covered: prefetching and direct data loading, gradient
// accumulation, packed varlen rows, and two ranks. A two-rank run also matches one rank with
// twice the batch on the same rows.
//
// The kill is the coordinator's abandon directive: the trainer leaves right after the step,
// saving nothing, as a killed process would; the resumed trainer is a new object that restores
// everything from disk.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "tests/worker/trainer_harness.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {
namespace {

using testing::DemoTrainConfig;
using testing::DirectiveAt;
using testing::ExpectLossesMatch;
using testing::RunRecord;
using testing::TempDir;
using testing::Train;
using testing::TrainTwoRanks;

constexpr double kTolerance = 1e-6;  // relative, per logged step

// 10 steps, checkpoints every 4; the kill comes after step 7, so steps 5-7 are trained twice.
TrainConfig ResumeConfig(const std::string& dump) {
  TrainConfig config = DemoTrainConfig(dump);
  config.training.steps = 10;
  config.checkpoint.interval = 4;
  config.metrics.log_freq = 1;
  return config;
}

// Trains `config` straight, then killed after `kill_after` and resumed, in two dump folders;
// expects the same losses for every step after the restored checkpoint.
void ExpectKilledRunResumesExactly(TrainConfig config, int64_t kill_after, int64_t restored,
                                   bool two_ranks = false) {
  TempDir straight_dir, killed_dir;
  config.dump_folder = straight_dir.path();
  const RunRecord straight = two_ranks ? TrainTwoRanks(config) : Train(config);
  ASSERT_TRUE(straight.result.ok()) << straight.result.status();

  config.dump_folder = killed_dir.path();
  DirectiveAt kill(kill_after, Directive::kAbandon);
  const RunRecord killed =
      two_ranks ? TrainTwoRanks(config, kill_after, Directive::kAbandon) : Train(config, &kill);
  ASSERT_TRUE(killed.result.ok()) << killed.result.status();
  ASSERT_EQ(killed.result->outcome, TrainOutcome::kAbandoned);
  ASSERT_EQ(killed.result->step, kill_after);
  ExpectLossesMatch(killed.losses, straight.losses, 1, kill_after, kTolerance);

  const RunRecord resumed = two_ranks ? TrainTwoRanks(config) : Train(config);
  ASSERT_TRUE(resumed.result.ok()) << resumed.result.status();
  EXPECT_EQ(resumed.resumed_from, restored);
  EXPECT_EQ(resumed.losses.begin()->first, restored + 1);
  ExpectLossesMatch(resumed.losses, straight.losses, restored + 1, config.training.steps,
                    kTolerance);
  // The logged progress agrees too: tokens and learning rates of the same steps.
  for (const ProgressUpdate& p : resumed.progress) {
    for (const ProgressUpdate& q : straight.progress) {
      if (p.step != q.step) continue;
      EXPECT_EQ(p.tokens, q.tokens) << "step " << p.step;
      EXPECT_DOUBLE_EQ(p.lr, q.lr) << "step " << p.step;
    }
  }
  for (const auto& [name, weight] : straight.weights) {
    EXPECT_TRUE(torch::allclose(resumed.weights.at(name), weight, 1e-5, 1e-7)) << name;
  }
}

TEST(ExactResume, KilledRunResumesExactly) {
  ExpectKilledRunResumesExactly(ResumeConfig(""), 7, 4);
}

TEST(ExactResume, KilledRunWithoutPrefetchingResumesExactly) {
  TrainConfig config = ResumeConfig("");
  config.training.num_workers = 0;
  ExpectKilledRunResumesExactly(config, 6, 4);
}

TEST(ExactResume, KilledRunWithGradientAccumulationResumesExactly) {
  TrainConfig config = ResumeConfig("");
  config.training.batch_size = 2;
  config.training.gradient_accumulation_steps = 3;
  ExpectKilledRunResumesExactly(config, 7, 4);
}

TEST(ExactResume, KilledVarlenRunResumesExactly) {
  TrainConfig config = ResumeConfig("");
  config.training.varlen = true;
  config.training.batch_size = 1;
  config.training.seq_len = 256;
  config.training.context_len = 32;
  config.training.gradient_accumulation_steps = 2;
  ExpectKilledRunResumesExactly(config, 7, 4);
}

TEST(ExactResume, KilledTwoRankRunResumesExactly) {
  TrainConfig config = ResumeConfig("");
  config.training.batch_size = 2;
  ExpectKilledRunResumesExactly(config, 6, 4, /*two_ranks=*/true);
}

TEST(ExactResume, KilledRunWithAnUnalignedIntervalResumesExactly) {
  // Interval 3 does not divide the kill step; skip_nan_inf on (nothing to skip) must not change
  // the arithmetic.
  TrainConfig config = ResumeConfig("");
  config.checkpoint.interval = 3;
  config.training.skip_nan_inf = true;
  ExpectKilledRunResumesExactly(config, 8, 6);
}

// A JSONL corpus whose every document tokenizes to exactly `seq_len` ids (BOS included), so each
// packed row is one document and rank r of 2 gets documents r, r + 2, ...: two ranks with batch B
// train on the rows one rank with batch 2B sees, in the same steps.
std::string WriteOneRowPerDocumentCorpus(const std::string& dir, const Tokenizer& tokenizer,
                                         int64_t seq_len, int documents) {
  std::ifstream fortunes(testing::DemoData("fortunes.jsonl"));
  std::vector<std::string> words;
  for (std::string line; std::getline(fortunes, line) && words.size() < 20000;) {
    const nlohmann::json doc = nlohmann::json::parse(line, nullptr, false);
    if (!doc.is_object() || !doc.contains("text")) continue;
    std::istringstream text(doc["text"].get<std::string>());
    for (std::string word; text >> word;) words.push_back(word);
  }
  const std::string path = dir + "/rows.jsonl";
  std::ofstream out(path);
  size_t next = 0;
  for (int d = 0; d < documents; ++d) {
    std::string text;
    // Add words while they fit; a word that would overflow is replaced by one-id fillers.
    for (int guard = 0; guard < 10000; ++guard) {
      const int64_t length = static_cast<int64_t>(tokenizer.Encode(text)->size());
      if (length == seq_len) break;
      std::string candidate =
          text.empty() ? words[next % words.size()] : text + " " + words[next % words.size()];
      ++next;
      if (static_cast<int64_t>(tokenizer.Encode(candidate)->size()) > seq_len) {
        candidate = text.empty() ? "a" : text + " a";
      }
      if (static_cast<int64_t>(tokenizer.Encode(candidate)->size()) <= seq_len) text = candidate;
    }
    EXPECT_EQ(static_cast<int64_t>(tokenizer.Encode(text)->size()), seq_len) << text;
    out << nlohmann::json{{"text", text}}.dump() << "\n";
  }
  return path;
}

TEST(ExactResume, TwoRanksMatchOneRankWithTwiceTheBatch) {
  TempDir dir, one_dir, two_dir;
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadSentencePieceTokenizer(testing::DemoData("fortunes.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  TrainConfig one = DemoTrainConfig(one_dir.path());
  one.training.seq_len = 32;
  one.training.batch_size = 8;
  one.training.steps = 5;
  one.metrics.log_freq = 1;
  one.training.dataset = {WriteOneRowPerDocumentCorpus(dir.path(), **tokenizer, 32, 64)};
  TrainConfig two = one;
  two.dump_folder = two_dir.path();
  two.training.batch_size = 4;

  const RunRecord single = Train(one);
  ASSERT_TRUE(single.result.ok()) << single.result.status();
  const RunRecord pair = TrainTwoRanks(two);
  ASSERT_TRUE(pair.result.ok()) << pair.result.status();
  // The same rows and the same mean: equal up to float32 summation order.
  ExpectLossesMatch(pair.losses, single.losses, 1, 5, 1e-5);
  EXPECT_EQ(pair.progress.back().tokens, single.progress.back().tokens);
  for (const auto& [name, weight] : single.weights) {
    EXPECT_TRUE(torch::allclose(pair.weights.at(name), weight, 1e-3, 1e-5)) << name;
  }
}

}  // namespace
}  // namespace flame::worker
