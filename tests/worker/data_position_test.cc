// Exact resumption with another rank count: what the old ranks left unread is dealt out to the
// new ranks so that every token of the corpus is read exactly once, checked by the ids seen.
#include "worker/data/data_position.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "tests/worker/data_test_util.h"
#include "tests/worker/test_util.h"
#include "worker/data/text_batch_loader.h"

namespace flame::worker {
namespace {

using testing::LabelLength;
using testing::LabelTokenizer;
using testing::TempDir;
using testing::WriteLabelCorpus;

constexpr int kDocs[] = {400, 300};  // documents of source 0 and 1, more than the tests read
const std::vector<double> kProbs = {0.7, 0.3};

struct Corpus {
  std::vector<std::string> sources;
  LabelTokenizer tokenizer;
};

std::unique_ptr<Corpus> MakeCorpus(const TempDir& dir) {
  auto corpus = std::make_unique<Corpus>();
  for (int s = 0; s < 2; ++s) {
    corpus->sources.push_back(
        WriteLabelCorpus(dir.path(), "s" + std::to_string(s) + ".jsonl", s, kDocs[s]));
  }
  return corpus;
}

std::vector<std::unique_ptr<TextBatchLoader>> MakeRanks(const Corpus& corpus, int64_t world) {
  std::vector<std::unique_ptr<TextBatchLoader>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    LoaderOptions options;
    options.sources = corpus.sources;
    options.probs = kProbs;
    options.seed = 7;
    options.batch_size = 2;
    options.seq_len = 16;
    options.rank = r;
    options.world_size = world;
    absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
        TextBatchLoader::Create(options, &corpus.tokenizer);
    EXPECT_TRUE(loader.ok()) << loader.status();
    ranks.push_back(*std::move(loader));
  }
  return ranks;
}

using IdCounts = std::map<int32_t, int>;

void Consume(std::vector<std::unique_ptr<TextBatchLoader>>& ranks, int batches, IdCounts* seen) {
  for (int b = 0; b < batches; ++b) {
    for (auto& rank : ranks) {
      const absl::StatusOr<Batch> batch = rank->Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (int32_t id : batch->ids) ++(*seen)[id];
    }
  }
}

// Saves every rank's position through its JSON form, as a checkpoint does.
std::vector<DataPosition> Save(const std::vector<std::unique_ptr<TextBatchLoader>>& ranks) {
  std::vector<DataPosition> saved;
  for (const auto& rank : ranks) {
    absl::StatusOr<DataPosition> p = DecodeDataPosition(EncodeDataPosition(rank->Position()));
    EXPECT_TRUE(p.ok()) << p.status();
    saved.push_back(*p);
  }
  return saved;
}

std::vector<std::unique_ptr<TextBatchLoader>> Resume(const Corpus& corpus,
                                                     const std::vector<DataPosition>& saved,
                                                     int64_t world) {
  const absl::StatusOr<std::vector<DataPosition>> resharded = ReshardDataPositions(saved, world);
  EXPECT_TRUE(resharded.ok()) << resharded.status();
  std::vector<std::unique_ptr<TextBatchLoader>> ranks = MakeRanks(corpus, world);
  for (int64_t r = 0; r < world; ++r) {
    const absl::Status restored = ranks[r]->Restore((*resharded)[static_cast<size_t>(r)]);
    EXPECT_TRUE(restored.ok()) << restored;
  }
  return ranks;
}

// The ids seen plus those still pending must be whole documents of the global stream: every
// document below the slowest rank's frontier, none past the fastest one's, none twice.
void ExpectEveryTokenExactlyOnce(const IdCounts& seen,
                                 const std::vector<std::unique_ptr<TextBatchLoader>>& ranks) {
  IdCounts all = seen;
  int64_t slowest = INT64_MAX, fastest = 0;
  for (const auto& rank : ranks) {
    const DataPosition p = rank->Position();
    ASSERT_EQ(p.streams.size(), 1u) << "handed-over streams should be finished by now";
    for (int32_t id : p.pending) ++all[id];
    slowest = std::min(slowest, p.streams.back().next);
    fastest = std::max(fastest, p.streams.back().next);
  }
  all.erase(LabelTokenizer::kBos);
  for (const auto& [id, count] : all) ASSERT_EQ(count, 1) << "id " << id << " read twice";
  const absl::StatusOr<SourceMixture> mixture = SourceMixture::Create(kProbs, 2, 7);
  int ordinal[2] = {0, 0};
  size_t accounted = 0;
  for (int64_t g = 0; g < fastest; ++g) {
    const auto s = static_cast<int>(mixture->SourceOf(g));
    const int doc = ordinal[s]++;
    ASSERT_LT(doc, kDocs[s]) << "the test must stay within one epoch";
    int present = 0;
    for (int j = 0; j < LabelLength(doc); ++j) present += all.count(LabelTokenizer::Id(s, doc, j));
    accounted += static_cast<size_t>(present);
    if (g < slowest) {
      EXPECT_EQ(present, LabelLength(doc)) << "document " << g << " (source " << s << ") missed";
    } else {
      EXPECT_TRUE(present == 0 || present == LabelLength(doc)) << "document " << g << " torn";
    }
  }
  EXPECT_EQ(accounted, all.size()) << "ids of documents past every rank's frontier were seen";
}

TEST(ReshardDataPositions, TwoRanksResumedAsThreeOrOneReadEveryTokenExactlyOnce) {
  TempDir dir;
  const std::unique_ptr<Corpus> corpus = MakeCorpus(dir);
  for (const int64_t new_world : {3, 1, 2}) {
    std::vector<std::unique_ptr<TextBatchLoader>> before = MakeRanks(*corpus, 2);
    IdCounts seen;
    Consume(before, 7, &seen);
    const std::vector<DataPosition> saved = Save(before);
    // Something is carried over, or this would test nothing.
    ASSERT_FALSE(saved[0].pending.empty() && saved[1].pending.empty());
    std::vector<std::unique_ptr<TextBatchLoader>> after = Resume(*corpus, saved, new_world);
    Consume(after, 60 / static_cast<int>(new_world), &seen);
    SCOPED_TRACE(::testing::Message() << "2 ranks -> " << new_world);
    ExpectEveryTokenExactlyOnce(seen, after);
  }
}

TEST(ReshardDataPositions, ChainsOfResizesStayExactWhileHandedOverDataIsUnread) {
  // 2 -> 3 ranks, and at once (the pieces and bounded streams of the first resize still unread)
  // 3 -> 1 and 1 -> 4.
  TempDir dir;
  const std::unique_ptr<Corpus> corpus = MakeCorpus(dir);
  std::vector<std::unique_ptr<TextBatchLoader>> ranks = MakeRanks(*corpus, 2);
  IdCounts seen;
  Consume(ranks, 5, &seen);
  ranks = Resume(*corpus, Save(ranks), 3);
  ranks = Resume(*corpus, Save(ranks), 1);
  EXPECT_GT(ranks[0]->Position().pending_breaks.size(), 0u) << "pieces were joined";
  Consume(ranks, 1, &seen);
  ranks = Resume(*corpus, Save(ranks), 4);
  Consume(ranks, 20, &seen);
  ExpectEveryTokenExactlyOnce(seen, ranks);
}

TEST(ReshardDataPositions, RefusesPositionsThatDoNotFitTogether) {
  TempDir dir;
  const std::unique_ptr<Corpus> corpus = MakeCorpus(dir);
  std::vector<DataPosition> saved = Save(MakeRanks(*corpus, 2));
  std::vector<DataPosition> missing = {saved[0]};
  EXPECT_FALSE(ReshardDataPositions(missing, 3).ok());  // rank 1 of 2 is absent
  absl::Status sources = ValidateDataPositions(saved, 3);
  EXPECT_NE(sources.message().find("training.dataset now lists 3"), std::string::npos) << sources;
  saved[1].streams.back().phase = 0;  // two ranks on the same documents
  EXPECT_FALSE(ValidateDataPositions(saved, 2).ok());
}

TEST(DecodeDataPosition, ReadsTheFirstFormatAndContinuesItExactly) {
  // A one-source corpus read for a while; its position written in the first format.
  TempDir dir;
  const std::string file = WriteLabelCorpus(dir.path(), "c.jsonl", 0, 200);
  LabelTokenizer tokenizer;
  LoaderOptions options;
  options.sources = {file};
  options.batch_size = 1;
  options.seq_len = 10;
  options.rank = 1;
  options.world_size = 2;
  auto running = *TextBatchLoader::Create(options, &tokenizer);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(running->Next().ok());
  const DataPosition now = running->Position();
  const SourceCursor& c = now.streams.back().cursors[0];
  const std::string legacy =
      "{\"rank\": 1, \"world_size\": 2, \"epoch\": 0, \"file_index\": " + std::to_string(c.file) +
      ", \"byte_offset\": " + std::to_string(c.offset) +
      ", \"doc_index\": " + std::to_string(c.doc) + ", \"pending\": [" +
      [&] {
        std::string ids;
        for (int32_t id : now.pending) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        return ids;
      }() +
      "]}";
  absl::StatusOr<DataPosition> decoded = DecodeDataPosition(legacy);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->legacy);
  auto resumed = *TextBatchLoader::Create(options, &tokenizer);
  EXPECT_FALSE(resumed->Restore(*decoded).ok()) << "legacy positions must be upgraded first";
  DataPosition other = *decoded;  // rank 0 of the same run, same epoch
  other.rank = 0;
  other.streams[0].phase = 0;
  std::vector<DataPosition> all = {other, *decoded};
  EXPECT_TRUE(UpgradeLegacyDataPositions(&all));
  ASSERT_TRUE(resumed->Restore(all[1]).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(running->Next()->ids, resumed->Next()->ids) << i;

  // Ranks in different epochs: everyone restarts at the earliest document, nothing pending.
  all = {other, *decoded};
  all[0].streams[0].cursors[0].epoch = 1;
  EXPECT_FALSE(UpgradeLegacyDataPositions(&all));
  EXPECT_TRUE(all[0].pending.empty());
  EXPECT_EQ(all[0].streams[0].cursors[0].epoch, 0);
  EXPECT_EQ(all[0].streams[0].phase, 0);
  EXPECT_TRUE(ValidateDataPositions(all, 1).ok());
}

}  // namespace
}  // namespace flame::worker
