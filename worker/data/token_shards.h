// Pre-tokenized token shards: a folder that flame-tokenize writes and the data loader memory-maps,
// so that a run spends no time on tokenization.
//
// Layout of a shard folder:
//   manifest.json        {"format": "flame-token-shards", "version": 1,
//                         "tokenizer": {"name", "vocab_size", "bos_id", "eos_id"},
//                         "dtype": "uint16" | "uint32", "documents": N, "tokens": T,
//                         "shards": [{"name", "documents", "tokens", "tokens_crc32",
//                                     "index_crc32"}, ...]}
//   <name>.tokens        the shard's ids back to back, little-endian dtype (uint16 when the
//                        vocabulary fits, else uint32); a document is EncodeDocument's ids
//   <name>.index         documents + 1 little-endian uint64: where each document starts (in
//                        ids), then the shard's id count
// The documents of all shards in manifest order are the source's documents. The manifest is
// written last and the folder renamed into place, so a folder with a manifest is complete.
//
// Checks: the manifest's tokenizer must match the job's (vocab size, BOS, EOS); every file must
// have the size the manifest implies (a truncated shard fails at open); index files are checked
// (CRC-32, monotonic) at open, token files (CRC-32) the first time a document of theirs is read,
// so that opening a large corpus stays cheap; ids outside the vocabulary are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/document_source.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

inline constexpr char kShardFormat[] = "flame-token-shards";
inline constexpr char kShardManifest[] = "manifest.json";

struct ShardTokenizerInfo {
  std::string name;  // the tokenizer file's base name (for people; not compared)
  int64_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

struct ShardFileInfo {
  std::string name;  // <name>.tokens and <name>.index
  int64_t documents = 0;
  int64_t tokens = 0;
  uint32_t tokens_crc32 = 0;
  uint32_t index_crc32 = 0;
};

struct ShardManifest {
  ShardTokenizerInfo tokenizer;
  int bytes_per_token = 2;  // 2: uint16, 4: uint32
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<ShardFileInfo> shards;
};

std::string EncodeShardManifest(const ShardManifest& manifest);
absl::StatusOr<ShardManifest> ReadShardManifest(const std::string& folder);

// A folder whose manifest.json declares the flame-token-shards format.
bool IsTokenShardFolder(const std::string& path);

// Opens a shard folder as a DocumentSource; refuses it when its tokenizer is not `tokenizer`.
absl::StatusOr<std::unique_ptr<DocumentSource>> OpenTokenShardSource(const std::string& folder,
                                                                     const Tokenizer& tokenizer);

}  // namespace flame::worker
