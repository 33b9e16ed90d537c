// Mixing sources by training.data_probs: the draw's frequencies, its reproduction on resume,
// per-source token counts, and the errors for bad probabilities.
#include "worker/data/source_mixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/worker/data_test_util.h"
#include "tests/worker/test_util.h"
#include "worker/config/train_config.h"
#include "worker/data/text_batch_loader.h"

namespace flame::worker {
namespace {

using testing::LabelTokenizer;
using testing::TempDir;
using testing::WriteLabelCorpus;

TEST(SourceMixture, DrawsEachSourceWithItsNormalisedProbability) {
  const absl::StatusOr<SourceMixture> mixture = SourceMixture::Create({6, 3, 1}, 3, 42);
  ASSERT_TRUE(mixture.ok()) << mixture.status();
  constexpr int kDraws = 200000;
  int counts[3] = {0, 0, 0};
  for (int64_t g = 0; g < kDraws; ++g) ++counts[mixture->SourceOf(g)];
  // Binomial standard deviation is at most 0.0012 here: 0.005 is more than four of them.
  const double expected[3] = {0.6, 0.3, 0.1};
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(static_cast<double>(counts[s]) / kDraws, expected[s], 0.005) << "source " << s;
  }
  // The draw is a pure function of (seed, g); another seed gives another sequence.
  const absl::StatusOr<SourceMixture> same = SourceMixture::Create({0.6, 0.3, 0.1}, 3, 42);
  const absl::StatusOr<SourceMixture> other = SourceMixture::Create({0.6, 0.3, 0.1}, 3, 43);
  int differ = 0;
  for (int64_t g = 0; g < 1000; ++g) {
    EXPECT_EQ(mixture->SourceOf(g), same->SourceOf(g));
    differ += mixture->SourceOf(g) != other->SourceOf(g);
  }
  EXPECT_GT(differ, 100);
}

TEST(SourceMixture, RefusesBadProbabilitiesNamingTheKey) {
  const auto error = [](const std::vector<double>& probs, int64_t sources) {
    const absl::StatusOr<SourceMixture> m = SourceMixture::Create(probs, sources, 1);
    return m.ok() ? std::string("ok") : std::string(m.status().message());
  };
  EXPECT_EQ(error({}, 1), "ok");
  for (const std::string& message :
       {error({}, 2), error({0.5}, 2), error({0.5, 0}, 2), error({0.5, -1}, 2),
        error({0.5, std::nan("")}, 2), error({1, 1, 1}, 2)}) {
    EXPECT_NE(message.find("training.data_probs"), std::string::npos) << message;
  }
  // The worker's config check says the same before any data is opened.
  TrainConfig config = testing::DemoTrainConfig("/tmp/x");
  config.training.dataset = {"a.jsonl", "b.jsonl"};
  absl::Status status = ValidateTrainConfig(config);
  EXPECT_NE(status.message().find("training.data_probs is required"), std::string::npos) << status;
  config.training.data_probs = {1, 0};
  status = ValidateTrainConfig(config);
  EXPECT_NE(status.message().find("training.data_probs values must be positive"), std::string::npos)
      << status;
  config.training.data_probs = {1, 2};
  EXPECT_TRUE(ValidateTrainConfig(config).ok());
}

struct MixedCorpus {
  TempDir dir;
  std::vector<std::string> sources;
  LabelTokenizer tokenizer;
};

std::unique_ptr<TextBatchLoader> MakeMixedLoader(const MixedCorpus& corpus) {
  LoaderOptions options;
  options.sources = corpus.sources;
  options.probs = {0.5, 0.3, 0.2};
  options.batch_size = 2;
  options.seq_len = 32;
  absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
      TextBatchLoader::Create(options, &corpus.tokenizer);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return *std::move(loader);
}

TEST(TextBatchLoader, MixesSourcesByProbabilityAndCountsTheirTokens) {
  // Source 2 has only 5 documents: it runs out many times (all_exhausted) while the others go on.
  MixedCorpus corpus;
  for (int s = 0; s < 3; ++s) {
    corpus.sources.push_back(WriteLabelCorpus(corpus.dir.path(), "s" + std::to_string(s) + ".jsonl",
                                              s, s == 2 ? 5 : 4000));
  }
  std::unique_ptr<TextBatchLoader> loader = MakeMixedLoader(corpus);
  std::set<int32_t> first_ids[3];  // the first id of each document read, per source
  int64_t documents[3] = {0, 0, 0}, batch_tokens[3] = {0, 0, 0};
  constexpr int kBatches = 400;
  for (int b = 0; b < kBatches; ++b) {
    const absl::StatusOr<Batch> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (size_t i = 0; i + 1 < batch->ids.size(); ++i) {
      if (batch->ids[i] != LabelTokenizer::kBos) continue;
      ++documents[(batch->ids[i + 1] - 10) / 1000000];
    }
    for (int s = 0; s < 3; ++s) batch_tokens[s] += batch->source_tokens[s];
  }
  // ~3000 documents: 0.03 is more than three standard deviations of each share.
  const int64_t total = documents[0] + documents[1] + documents[2];
  ASSERT_GT(total, 2500);
  const double probs[3] = {0.5, 0.3, 0.2};
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(static_cast<double>(documents[s]) / total, probs[s], 0.03) << "source " << s;
  }
  const DataPosition position = loader->Position();
  EXPECT_GT(position.streams.back().cursors[2].epoch, 50);  // the small source wrapped
  EXPECT_EQ(position.streams.back().cursors[0].epoch, 0);
  int64_t counted = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(position.source_tokens[s], batch_tokens[s]);
    counted += position.source_tokens[s];
  }
  EXPECT_EQ(counted, kBatches * 2 * 32);
}

TEST(TextBatchLoader, ResumingMidwayReproducesTheSameSequenceOfSources) {
  MixedCorpus corpus;
  for (int s = 0; s < 3; ++s) {
    corpus.sources.push_back(
        WriteLabelCorpus(corpus.dir.path(), "s" + std::to_string(s) + ".jsonl", s, 30 + 10 * s));
  }
  std::unique_ptr<TextBatchLoader> straight = MakeMixedLoader(corpus);
  std::unique_ptr<TextBatchLoader> first = MakeMixedLoader(corpus);
  for (int b = 0; b < 23; ++b) {
    ASSERT_TRUE(straight->Next().ok());
    ASSERT_TRUE(first->Next().ok());
  }
  const absl::StatusOr<DataPosition> saved =
      DecodeDataPosition(EncodeDataPosition(first->Position()));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->mixture, "0.5,0.3,0.2@42");  // to notice a changed mixture on resume
  std::unique_ptr<TextBatchLoader> resumed = MakeMixedLoader(corpus);
  ASSERT_TRUE(resumed->Restore(*saved).ok());
  for (int b = 0; b < 60; ++b) {  // across several epochs of every source
    const absl::StatusOr<Batch> a = straight->Next(), c = resumed->Next();
    ASSERT_TRUE(a.ok() && c.ok());
    EXPECT_EQ(a->source_tokens, c->source_tokens) << "batch " << b;
    EXPECT_EQ(a->ids, c->ids) << "batch " << b;
  }
  EXPECT_EQ(straight->Position().source_tokens, resumed->Position().source_tokens);
}

}  // namespace
}  // namespace flame::worker
