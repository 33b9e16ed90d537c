// Offline tokenization: JSONL/text files or folders -> a token shard folder (token_shards.h).
//
// One thread reads documents in corpus order (DocumentReader) and hands chunks of them to
// `workers` tokenizer threads; finished chunks are written in their original order, so the
// shards are the same whatever the thread count, and document i of the shards is document i of
// the corpus with exactly the ids the online path would give it (EncodeDocument).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string output;                       // the shard folder to create
  std::string tokenizer_name;               // recorded in the manifest
  int64_t shard_tokens = int64_t{1} << 28;  // ids per shard (256 Mi: 512 MiB of uint16)
  int workers = 1;                          // tokenizer threads
  bool progress = false;                    // draw a progress line on stderr
};

struct TokenizeSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t shards = 0;
  int64_t input_bytes = 0;
  double seconds = 0;
};

absl::StatusOr<TokenizeSummary> TokenizeCorpus(const Tokenizer& tokenizer,
                                               const TokenizeOptions& options);

// "1000", "64K", "256M", "2G" (powers of 1024) -> a count; error on anything else.
absl::StatusOr<int64_t> ParseCount(const std::string& text);

}  // namespace flame::worker
