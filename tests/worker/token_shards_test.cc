// Pre-tokenized shards: flame-tokenize's output equals online tokenization, a run from shards
// gives the online path's batches, and damaged shards or another tokenizer are clear errors.
#include "worker/data/token_shards.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "tests/worker/data_test_util.h"
#include "tests/worker/test_util.h"
#include "worker/data/corpus_tokenizer.h"
#include "worker/data/document_reader.h"
#include "worker/data/text_batch_loader.h"
#include "worker/data/token_shard_writer.h"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;
using testing::DemoData;
using testing::TempDir;
using testing::WordTokenizer;

const Tokenizer& DemoTokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer =
      *LoadSentencePieceTokenizer(DemoData("fortunes.model"));
  return *tokenizer;
}

// Demo corpus -> shards of at most ~64K ids (several files), with two tokenizer threads.
std::string MakeDemoShards(const std::string& dir) {
  TokenizeOptions options;
  options.inputs = {DemoData("fortunes.jsonl")};
  options.output = dir + "/fortunes-shards";
  options.tokenizer_name = "fortunes.model";
  options.shard_tokens = 64 * 1024;
  options.workers = 2;
  const absl::StatusOr<TokenizeSummary> summary = TokenizeCorpus(DemoTokenizer(), options);
  EXPECT_TRUE(summary.ok()) << summary.status();
  EXPECT_GT(summary->shards, 2);
  return options.output;
}

std::unique_ptr<TextBatchLoader> MakeLoader(const std::string& source, const Tokenizer& tokenizer,
                                            int64_t rank, int64_t world, bool varlen) {
  LoaderOptions options;
  options.sources = {source};
  options.batch_size = varlen ? 1 : 2;
  options.seq_len = 96;
  options.rank = rank;
  options.world_size = world;
  options.varlen = varlen;
  options.context_len = 40;
  absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
      TextBatchLoader::Create(options, &tokenizer);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

TEST(TokenShards, HoldTheIdsOfOnlineTokenizationDocumentByDocument) {
  TempDir dir;
  const std::string shards = MakeDemoShards(dir.path());
  ASSERT_TRUE(IsTokenShardFolder(shards));
  const absl::StatusOr<ShardManifest> manifest = ReadShardManifest(shards);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->tokenizer.vocab_size, 2048);
  EXPECT_EQ(manifest->tokenizer.bos_id, 1);
  EXPECT_EQ(manifest->bytes_per_token, 2);

  absl::StatusOr<std::unique_ptr<DocumentSource>> source =
      OpenTokenShardSource(shards, DemoTokenizer());
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<DocumentReader> reader = DocumentReader::Open({DemoData("fortunes.jsonl")});
  ASSERT_TRUE(reader.ok());
  std::string text;
  int64_t documents = 0, tokens = 0;
  while (*reader->Next(&text)) {
    const std::vector<int32_t> online = *EncodeDocument(DemoTokenizer(), text);
    SourceDocument stored;
    ASSERT_TRUE((*source)->Next(&stored).ok());
    ASSERT_TRUE(stored.tokenized);
    ASSERT_EQ(stored.ids, online) << "document " << documents;
    ++documents;
    tokens += static_cast<int64_t>(online.size());
  }
  EXPECT_EQ(manifest->documents, documents);
  EXPECT_EQ(manifest->tokens, tokens);
  EXPECT_EQ((*source)->cursor().doc, documents);
  SourceDocument again;  // the next epoch starts over
  ASSERT_TRUE((*source)->Next(&again).ok());
  EXPECT_EQ((*source)->cursor().epoch, 1);
}

TEST(TokenShards, TrainOnTheSameBatchesAsOnlineTokenization) {
  TempDir dir;
  const std::string shards = MakeDemoShards(dir.path());
  for (const bool varlen : {false, true}) {
    for (int64_t rank = 0; rank < 2; ++rank) {
      std::unique_ptr<TextBatchLoader> online =
          MakeLoader(DemoData("fortunes.jsonl"), DemoTokenizer(), rank, 2, varlen);
      std::unique_ptr<TextBatchLoader> stored =
          MakeLoader(shards, DemoTokenizer(), rank, 2, varlen);
      for (int b = 0; b < 40; ++b) {
        const absl::StatusOr<Batch> x = online->Next(), y = stored->Next();
        ASSERT_TRUE(x.ok() && y.ok()) << x.status() << y.status();
        ASSERT_EQ(x->ids, y->ids) << "rank " << rank << " batch " << b;
        ASSERT_EQ(x->cu_seqlens, y->cu_seqlens) << "rank " << rank << " batch " << b;
        if (varlen) {
          EXPECT_GT(y->cu_seqlens.size(), 2u);
        }
      }
      EXPECT_EQ(online->Position().streams.back().next, stored->Position().streams.back().next);
    }
  }
}

absl::Status OpenAndReadAll(const std::string& shards, const Tokenizer& tokenizer) {
  absl::StatusOr<std::unique_ptr<DocumentSource>> source = OpenDocumentSource(shards, &tokenizer);
  if (!source.ok()) return source.status();
  SourceDocument document;
  for (int i = 0; i < 20000; ++i) {
    const absl::Status status = (*source)->Next(&document);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void ExpectError(const absl::Status& status, const std::string& words) {
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(words), std::string::npos) << status;
}

TEST(TokenShards, RefuseTruncatedOrCorruptShardsAndAnotherTokenizer) {
  TempDir dir;
  const std::string shards = MakeDemoShards(dir.path());
  ASSERT_TRUE(OpenAndReadAll(shards, DemoTokenizer()).ok());
  ExpectError(OpenAndReadAll(shards, WordTokenizer()), "vocab size 2048 in the shards, 100");

  const std::string copy = dir.path() + "/copy";
  const auto fresh_copy = [&] {
    fs::remove_all(copy);
    fs::copy(shards, copy);
  };
  fresh_copy();  // a flipped byte in the middle of a token file
  {
    std::fstream file(copy + "/shard-00001.tokens",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1001);
    file.put('\x7f');
  }
  ExpectError(OpenAndReadAll(copy, DemoTokenizer()), "is corrupt");
  fresh_copy();  // a truncated token file
  fs::resize_file(copy + "/shard-00002.tokens", fs::file_size(copy + "/shard-00002.tokens") - 2);
  ExpectError(OpenAndReadAll(copy, DemoTokenizer()), "truncated");
  fresh_copy();  // a damaged index
  {
    std::fstream file(copy + "/shard-00000.index", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(16);
    file.put('\x01');
  }
  ExpectError(OpenAndReadAll(copy, DemoTokenizer()), "shard-00000.index is corrupt");
  fresh_copy();  // no manifest: an interrupted run's leftovers are not read as text
  fs::remove(copy + "/manifest.json");
  ExpectError(OpenAndReadAll(copy, DemoTokenizer()), "no valid manifest.json");
}

TEST(TokenShardWriter, LeavesNothingAtTheOutputUntilFinished) {
  TempDir dir;
  const std::string output = dir.path() + "/out";
  {
    auto writer = *TokenShardWriter::Create(output, {"t", 100, 1, 2}, 10);
    ASSERT_TRUE(writer->Add({1, 5, 6}).ok());
    ExpectError(writer->Add({1, 500}), "outside the vocabulary");
    EXPECT_FALSE(fs::exists(output));
  }  // abandoned: the temporary folder goes too
  EXPECT_TRUE(fs::is_empty(dir.path()));
  auto writer = *TokenShardWriter::Create(output, {"t", 100, 1, 2}, 10);
  ASSERT_TRUE(writer->Add({1, 5, 6}).ok());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_TRUE(IsTokenShardFolder(output));
  ExpectError(TokenShardWriter::Create(output, {"t", 100, 1, 2}, 10).status(), "already exists");
}

// flame-tokenize as a process: exit code, stdout, stderr.
struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

Outcome RunTokenize(const std::string& dir, const std::string& args) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const int status = std::system(
      (std::string(FLAME_TOKENIZE_BINARY) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFileToString(out).value_or(""),
          ReadFileToString(err).value_or("")};
}

TEST(FlameTokenize, WritesShardsAndExitsNonZeroOnBadInput) {
  TempDir dir;
  const std::string model = DemoData("fortunes.model");
  const std::string corpus = DemoData("fortunes.jsonl");
  const std::string output = dir.path() + "/shards";
  Outcome ok = RunTokenize(dir.path(), "--tokenizer " + model + " --output " + output +
                                           " --shard-size 256K --workers 2 " + corpus);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("wrote 14913 documents"), std::string::npos) << ok.out;
  EXPECT_TRUE(ok.err.empty()) << "no progress bar when stderr is not a terminal: " << ok.err;
  ASSERT_TRUE(IsTokenShardFolder(output));
  EXPECT_EQ(ReadShardManifest(output)->documents, 14913);

  const auto expect_refused = [&](const std::string& args, const std::string& words) {
    const Outcome bad = RunTokenize(dir.path(), args);
    EXPECT_EQ(bad.exit_code, 2) << args;
    EXPECT_NE(bad.err.find(words), std::string::npos) << args << ": " << bad.err;
  };
  expect_refused("--tokenizer " + model + " --output " + output + " " + corpus, "already exists");
  expect_refused(
      "--tokenizer " + model + " --output " + dir.path() + "/x " + dir.path() + "/missing.jsonl",
      "missing.jsonl does not exist");
  expect_refused(
      "--tokenizer " + model + " --output " + dir.path() + "/x --shard-size 12Q " + corpus,
      "--shard-size");
  expect_refused("--output " + dir.path() + "/x " + corpus, "--tokenizer is required");
  expect_refused(
      "--tokenizer " + dir.path() + "/none.model --output " + dir.path() + "/x " + corpus,
      "none.model");
  const std::string bad_json = testing::WriteFile(dir.path(), "bad.jsonl", "{\"x\": 1}\n");
  expect_refused("--tokenizer " + model + " --output " + dir.path() + "/x " + bad_json,
                 "\"text\" or \"content\"");
  // No failed run left anything behind, not even a hidden temporary folder.
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "shards" || name == "stdout" || name == "stderr" || name == "bad.jsonl")
        << name;
  }
}

}  // namespace
}  // namespace flame::worker
