// Writes a token shard folder (token_shards.h) document by document.
//
// Everything goes into a hidden sibling folder (.<name>.tmp-<pid>); Finish writes the manifest
// last, fsyncs, and renames the folder into place. Until then nothing at `output` exists, and a
// writer destroyed without Finish (an error, a crash) leaves only the hidden folder, which no
// reader takes for shards (it has no manifest) and the destructor removes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/token_shards.h"

namespace flame::worker {

class TokenShardWriter {
 public:
  // `shard_tokens`: a shard is closed once it holds at least this many ids (a document is never
  // split across shards). Refuses an `output` that already exists.
  static absl::StatusOr<std::unique_ptr<TokenShardWriter>> Create(const std::string& output,
                                                                  ShardTokenizerInfo tokenizer,
                                                                  int64_t shard_tokens);
  ~TokenShardWriter();

  absl::Status Add(const std::vector<int32_t>& ids);
  // Completes the folder at `output`; returns its manifest.
  absl::StatusOr<ShardManifest> Finish();

 private:
  TokenShardWriter(std::string output, std::string temp, ShardTokenizerInfo tokenizer,
                   int64_t shard_tokens);
  absl::Status OpenShard();
  absl::Status CloseShard();

  std::string output_;
  std::string temp_;
  int64_t shard_tokens_;
  ShardManifest manifest_;
  bool finished_ = false;
  // The open shard.
  std::FILE* tokens_ = nullptr;
  ShardFileInfo current_;
  std::vector<uint64_t> starts_;  // document starts in the open shard
  unsigned long tokens_crc_ = 0;  // NOLINT(runtime/int): zlib's uLong
  std::vector<uint8_t> buffer_;   // one document's encoded ids
};

}  // namespace flame::worker
