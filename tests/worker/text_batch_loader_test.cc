// Documents -> tokens -> packed batches: formats, order, sharding, epochs, varlen, and exact
// resumption with the same rank count.
#include "worker/data/text_batch_loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_split.h"
#include "tests/worker/data_test_util.h"
#include "tests/worker/test_util.h"
#include "worker/data/document_reader.h"
#include "worker/data/prefetching_loader.h"

namespace flame::worker {
namespace {

using testing::EosOnlyTokenizer;
using testing::TempDir;
using testing::WordTokenizer;

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// JSONL of `count` documents "doc<i> w w ..." with a varying number of words.
std::string WriteCorpus(const std::string& dir, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    text += "{\"text\": \"doc" + std::to_string(i);
    for (int w = 0; w < 1 + i % 7; ++w) text += " w" + std::to_string(w);
    text += "\"}\n";
  }
  return Write(dir, "corpus.jsonl", text);
}

std::vector<std::string> ReadAll(const std::vector<std::string>& files) {
  absl::StatusOr<DocumentReader> reader = DocumentReader::Open(files);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<std::string> docs;
  std::string text;
  while (true) {
    absl::StatusOr<bool> found = reader->Next(&text);
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok() || !*found) return docs;
    docs.push_back(text);
  }
}

std::unique_ptr<TextBatchLoader> MakeLoader(const std::string& file, const Tokenizer& tokenizer,
                                            int64_t batch, int64_t seq, int64_t rank = 0,
                                            int64_t world = 1) {
  LoaderOptions options;
  options.sources = {file};
  options.batch_size = batch;
  options.seq_len = seq;
  options.rank = rank;
  options.world_size = world;
  absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
      TextBatchLoader::Create(options, &tokenizer);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

TEST(DocumentReader, ReadsJsonlTextOrContentAndSkipsBlankLines) {
  TempDir dir;
  const std::string file = Write(dir.path(), "a.jsonl",
                                 "{\"text\": \"one\\ntwo\"}\n\n{\"content\": \"three\"}\r\n"
                                 "{\"text\": \"\\u00e9t\\u00e9\", \"id\": 3}");
  EXPECT_EQ(ReadAll({file}), (std::vector<std::string>{"one\ntwo", "three", "été"}));
}

TEST(DocumentReader, SplitsPlainTextIntoParagraphs) {
  TempDir dir;
  const std::string file =
      Write(dir.path(), "a.txt", "\n\nfirst line\nsecond line\n\n\n  \nnext\r\n\r\nlast");
  EXPECT_EQ(ReadAll({file}), (std::vector<std::string>{"first line\nsecond line", "next", "last"}));
}

TEST(DocumentReader, ExpandsFoldersToTheirTextFilesInOrder) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/data/sub");
  Write(dir.path(), "data/b.txt", "from b");
  Write(dir.path(), "data/a.jsonl", "{\"text\": \"from a\"}\n");
  Write(dir.path(), "data/sub/c.md", "from c");
  Write(dir.path(), "data/.hidden.txt", "hidden");
  Write(dir.path(), "data/index.bin", "binary");
  EXPECT_EQ(ReadAll({dir.path() + "/data"}),
            (std::vector<std::string>{"from a", "from b", "from c"}));
}

TEST(DocumentReader, ReportsBadInputWithTheFileAndPlace) {
  TempDir dir;
  const auto error_of = [](const std::vector<std::string>& files) {
    absl::StatusOr<DocumentReader> reader = DocumentReader::Open(files);
    if (!reader.ok()) return std::string(reader.status().message());
    std::string text;
    while (true) {
      absl::StatusOr<bool> found = reader->Next(&text);
      if (!found.ok()) return std::string(found.status().message());
      if (!*found) return std::string("no error");
    }
  };
  EXPECT_NE(error_of({dir.path() + "/missing.jsonl"}).find("missing file"), std::string::npos);
  const std::string bad = Write(dir.path(), "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  EXPECT_NE(error_of({bad}).find("bad.jsonl (byte 15)"), std::string::npos) << error_of({bad});
  EXPECT_NE(error_of({bad}).find("\"text\" or \"content\""), std::string::npos);
  const std::string broken = Write(dir.path(), "broken.jsonl", "{\"text\": \n");
  EXPECT_NE(error_of({broken}).find("not valid JSON"), std::string::npos);
  const std::string zipped = Write(dir.path(), "c.jsonl.gz", "x");
  EXPECT_NE(error_of({zipped}).find("compressed"), std::string::npos);
}

TEST(TextBatchLoader, PacksDocumentsBackToBackIntoRowsOfSeqLen) {
  TempDir dir;
  const std::string file = WriteCorpus(dir.path(), 40);
  WordTokenizer tokenizer;
  std::vector<int32_t> stream;
  for (const std::string& doc : ReadAll({file})) {
    const std::vector<int32_t> ids = *tokenizer.Encode(doc);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  std::unique_ptr<TextBatchLoader> loader = MakeLoader(file, tokenizer, 2, 7);
  size_t offset = 0;
  for (int i = 0; i < 10; ++i) {
    const absl::StatusOr<Batch> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->ids.size(), 14u);
    EXPECT_EQ(batch->batch_size, 2);
    EXPECT_EQ(batch->seq_len, 7);
    EXPECT_TRUE(batch->cu_seqlens.empty());
    EXPECT_EQ(batch->ids,
              std::vector<int32_t>(stream.begin() + offset, stream.begin() + offset + 14))
        << "batch " << i;
    offset += 14;
  }
}

TEST(TextBatchLoader, ShardsDocumentsByIndexModuloWorldSize) {
  TempDir dir;
  const std::string file = WriteCorpus(dir.path(), 30);
  WordTokenizer tokenizer;
  const std::vector<std::string> docs = ReadAll({file});
  for (int64_t rank = 0; rank < 3; ++rank) {
    std::vector<int32_t> expected;
    for (size_t i = static_cast<size_t>(rank); i < docs.size(); i += 3) {
      const std::vector<int32_t> ids = *tokenizer.Encode(docs[i]);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    std::unique_ptr<TextBatchLoader> loader = MakeLoader(file, tokenizer, 1, 5, rank, 3);
    for (size_t offset = 0; offset + 5 <= expected.size(); offset += 5) {
      const absl::StatusOr<Batch> batch = loader->Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      EXPECT_EQ(batch->ids,
                std::vector<int32_t>(expected.begin() + offset, expected.begin() + offset + 5))
          << "rank " << rank << " offset " << offset;
    }
  }
}

TEST(TextBatchLoader, ResumesExactlyFromASavedPositionAcrossEpochs) {
  TempDir dir;
  const std::string file = WriteCorpus(dir.path(), 9);  // ~45 tokens: several epochs below
  WordTokenizer tokenizer;
  std::unique_ptr<TextBatchLoader> straight = MakeLoader(file, tokenizer, 2, 8);
  std::unique_ptr<TextBatchLoader> first = MakeLoader(file, tokenizer, 2, 8);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(straight->Next().ok());
    ASSERT_TRUE(first->Next().ok());
  }
  const DataPosition saved = first->Position();
  EXPECT_GT(saved.streams.back().cursors[0].epoch, 0);
  // Through its JSON form, as a checkpoint stores it.
  const absl::StatusOr<DataPosition> decoded = DecodeDataPosition(EncodeDataPosition(saved));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  std::unique_ptr<TextBatchLoader> resumed = MakeLoader(file, tokenizer, 2, 8);
  ASSERT_TRUE(resumed->Restore(*decoded).ok());
  for (int i = 0; i < 20; ++i) {
    const absl::StatusOr<Batch> a = straight->Next(), b = resumed->Next();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ids, b->ids) << "batch " << i << " after the restore";
  }
  EXPECT_FALSE(DecodeDataPosition("{\"rank\": 0}").ok());
  EXPECT_FALSE(DecodeDataPosition("{\"format\": 2, \"rank\": 0}").ok());
  DataPosition hollow = *decoded;  // well-formed JSON, impossible content: refused, no crash
  hollow.streams.clear();
  EXPECT_FALSE(first->Restore(hollow).ok());
  hollow = *decoded;
  hollow.pending_runs.push_back({5, 1});  // a source that does not exist
  EXPECT_FALSE(first->Restore(hollow).ok());
  // A position of another rank layout is refused; ReshardDataPositions handles that case.
  std::unique_ptr<TextBatchLoader> other = MakeLoader(file, tokenizer, 2, 8, 1, 2);
  EXPECT_FALSE(other->Restore(*decoded).ok());
}

TEST(PrefetchingBatchSource, GivesTheSameBatchesAndThePositionOfWhatWasTaken) {
  TempDir dir;
  const std::string file = WriteCorpus(dir.path(), 25);
  WordTokenizer tokenizer;
  std::unique_ptr<TextBatchLoader> direct = MakeLoader(file, tokenizer, 2, 6);
  PrefetchingBatchSource prefetching(MakeLoader(file, tokenizer, 2, 6), /*depth=*/3);
  for (int i = 0; i < 12; ++i) {
    const absl::StatusOr<Batch> a = direct->Next(), b = prefetching.Next();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ids, b->ids) << "batch " << i;
    // The thread is ahead, but the position is the one after the batch just taken.
    EXPECT_EQ(EncodeDataPosition(prefetching.Position()), EncodeDataPosition(direct->Position()));
  }
  // Restoring drops what was prefetched and continues from the restored place.
  std::unique_ptr<TextBatchLoader> reference = MakeLoader(file, tokenizer, 2, 6);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reference->Next().ok());
  ASSERT_TRUE(prefetching.Restore(reference->Position()).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(prefetching.Next()->ids, reference->Next()->ids);
}

TEST(TextBatchLoader, TokenizerThreadsGiveTheSameBatchesAndPositions) {
  TempDir dir;
  const std::string file = WriteCorpus(dir.path(), 300);
  WordTokenizer tokenizer;
  LoaderOptions options;
  options.sources = {file};
  options.batch_size = 2;
  options.seq_len = 9;
  options.rank = 1;
  options.world_size = 2;
  std::unique_ptr<TextBatchLoader> serial = *TextBatchLoader::Create(options, &tokenizer);
  options.tokenizer_threads = 3;
  PrefetchingBatchSource threaded(*TextBatchLoader::Create(options, &tokenizer), 2);
  for (int i = 0; i < 60; ++i) {  // past the end of the corpus: into the next epoch
    const absl::StatusOr<Batch> a = serial->Next(), b = threaded.Next();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->ids, b->ids) << "batch " << i;
  }
  // The threads read ahead, so the positions differ, but either continues the same way.
  std::unique_ptr<TextBatchLoader> from_threaded = *TextBatchLoader::Create(options, &tokenizer);
  ASSERT_TRUE(from_threaded->Restore(threaded.Position()).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(serial->Next()->ids, from_threaded->Next()->ids) << i;
}

TEST(PrefetchingBatchSource, PassesALoaderErrorOnAndKeepsReturningIt) {
  TempDir dir;
  const std::string file = Write(dir.path(), "bad.jsonl", "{\"text\": \"a b c\"}\n{\"x\": 1}\n");
  WordTokenizer tokenizer;
  PrefetchingBatchSource prefetching(MakeLoader(file, tokenizer, 1, 3), 2);
  ASSERT_TRUE(prefetching.Next().ok());  // "a b c" with its BOS fills the first row
  EXPECT_FALSE(prefetching.Next().ok());
  EXPECT_FALSE(prefetching.Next().ok());
}

TEST(TextBatchLoader, WrapsAShortCorpusIntoEpochsForEveryRankAndRefusesAnEmptyOne) {
  TempDir dir;
  // One document and two ranks: rank 1 reads it as global document 1, in the second epoch.
  const std::string one = Write(dir.path(), "one.jsonl", "{\"text\": \"only one\"}\n");
  WordTokenizer tokenizer;
  const std::vector<int32_t> ids = *tokenizer.Encode("only one");
  std::unique_ptr<TextBatchLoader> loader = MakeLoader(one, tokenizer, 1, 3, 1, 2);
  const absl::StatusOr<Batch> batch = loader->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ids, ids);
  EXPECT_EQ(loader->Position().streams.back().cursors[0].epoch, 1);

  const std::string empty = Write(dir.path(), "empty.jsonl", "\n\n");
  std::unique_ptr<TextBatchLoader> none = MakeLoader(empty, tokenizer, 1, 4);
  const absl::StatusOr<Batch> nothing = none->Next();
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("has no documents"), std::string::npos)
      << nothing.status();
}

TEST(TextBatchLoader, MarksVarlenSegmentsAtBosAndEveryContextLen) {
  // BOS (1) at 0, 3 and 10 of a 12-token row; context_len 4 splits the 7-token middle segment.
  const std::vector<int32_t> row = {1, 5, 5, 1, 5, 5, 5, 5, 5, 5, 1, 5};
  EXPECT_EQ(VarlenBoundaries(row, 1, 2, 4), (std::vector<int64_t>{0, 3, 7, 10, 12}));
  EXPECT_EQ(VarlenBoundaries({5, 5, 5}, 1, 2, 100), (std::vector<int64_t>{0, 3}));
  // Without BOS a segment starts after each EOS (2); a handed-over piece adds a break at 5.
  const std::vector<int32_t> eos_row = {5, 5, 2, 5, 5, 5, 5, 2, 5};
  EXPECT_EQ(VarlenBoundaries(eos_row, -1, 2, 100), (std::vector<int64_t>{0, 3, 8, 9}));
  EXPECT_EQ(VarlenBoundaries(eos_row, -1, 2, 100, {5}), (std::vector<int64_t>{0, 3, 5, 8, 9}));
}

TEST(TextBatchLoader, SeparatesDocumentsOfAnEosOnlyTokenizerForVarlen) {
  TempDir dir;
  const std::string file =
      Write(dir.path(), "c.jsonl", "{\"text\": \"a b c\"}\n{\"text\": \"d e f g h\"}\n");
  EosOnlyTokenizer tokenizer;
  LoaderOptions options;
  options.sources = {file};
  options.batch_size = 1;
  options.seq_len = 10;
  options.varlen = true;
  options.context_len = 4;
  absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
      TextBatchLoader::Create(options, &tokenizer);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  // "a b c" EOS | "d e f g h" EOS: the EOS is appended because the tokenizer has no BOS; the
  // 6-id second document is split at context_len 4.
  EXPECT_EQ(batch->ids[3], EosOnlyTokenizer::kEos);
  EXPECT_EQ(batch->ids[9], EosOnlyTokenizer::kEos);
  EXPECT_EQ(batch->cu_seqlens, (std::vector<int64_t>{0, 4, 8, 10}));

  options.batch_size = 2;
  const absl::StatusOr<std::unique_ptr<TextBatchLoader>> refused =
      TextBatchLoader::Create(options, &tokenizer);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("training.batch_size must be 1"), std::string::npos)
      << refused.status();
}

TEST(SentencePieceTokenizer, EncodesTheDemoCorpusWithBosFirst) {
  // Runs in a process that also has the system libprotobuf (gRPC): the module isolation works.
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadSentencePieceTokenizer(testing::DemoData("fortunes.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->VocabSize(), 2048);
  EXPECT_EQ((*tokenizer)->BosId(), 1);
  EXPECT_EQ((*tokenizer)->EosId(), 2);
  const absl::StatusOr<std::vector<int32_t>> ids =
      (*tokenizer)->Encode("A day for firm decisions!!!!!  Or is it? \xe2\x98\x83");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GT(ids->size(), 5u);
  EXPECT_EQ(ids->front(), 1);
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 2048);
  }
  EXPECT_EQ(*(*tokenizer)->Encode(""), std::vector<int32_t>{1});
  const absl::StatusOr<std::unique_ptr<Tokenizer>> missing =
      LoadSentencePieceTokenizer("/nonexistent.model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flame::worker
