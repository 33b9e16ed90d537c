// Documents of one or more sources -> token rows of seq_len -> batches [B, T].
//
// Like flame's OnlineTokenizedIterableDataset: each document's ids (EncodeDocument: BOS first, or
// EOS last for tokenizers without BOS) are appended to a buffer and full rows of seq_len ids are
// cut from the front. Documents run across row boundaries. Labels equal the inputs (the model
// shifts them).
//
// Which documents this rank reads, from which source, and how a position survives a change of
// rank count: data_position.h. Sources are the entries of training.dataset (text tokenized here,
// or pre-tokenized shards), mixed by training.data_probs (source_mixture.h).
//
// Resumption: Position() after a batch, restored with Restore(), makes the loader produce exactly
// the batches it would have produced; with another rank count, restore the positions that
// ReshardDataPositions computes from all the old ranks' positions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/data_position.h"
#include "worker/data/document_source.h"
#include "worker/data/source_mixture.h"
#include "worker/data/tokenizer.h"
#include "worker/data/tokenizer_pool.h"

namespace flame::worker {

struct Batch {
  int64_t batch_size = 0;    // B
  int64_t seq_len = 0;       // T
  std::vector<int32_t> ids;  // [B, T] row-major; labels are the same ids
  // Varlen only (B == 1): segment starts and the end, [N + 1], strictly increasing from 0 to T.
  std::vector<int64_t> cu_seqlens;
  std::vector<int64_t> source_tokens;  // ids of this batch from each source, [sources]
};

struct LoaderOptions {
  std::vector<std::string> sources;  // training.dataset: files, folders or shard folders
  std::vector<double> probs;         // training.data_probs (empty: one source)
  uint64_t seed = 42;                // training.seed: the mixture's draw
  int64_t batch_size = 8;
  int64_t seq_len = 2048;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool varlen = false;
  int64_t context_len = 2048;  // varlen: longest segment
  // Threads that tokenize text documents; 0 tokenizes on the thread that calls Next.
  int tokenizer_threads = 0;
};

class TextBatchLoader {
 public:
  static absl::StatusOr<std::unique_ptr<TextBatchLoader>> Create(const LoaderOptions& options,
                                                                 const Tokenizer* tokenizer);

  absl::StatusOr<Batch> Next();

  // The position after the last batch returned by Next.
  DataPosition Position() const;
  // Continues from `position`, which must be this rank's (rank and world size as configured).
  absl::Status Restore(const DataPosition& position);

  int64_t source_count() const { return static_cast<int64_t>(sources_.size()); }
  const std::vector<std::string>& source_names() const { return options_.sources; }

 private:
  TextBatchLoader(LoaderOptions options, const Tokenizer* tokenizer, SourceMixture mixture,
                  std::vector<std::unique_ptr<DocumentSource>> sources);

  // Reads this rank's next documents (several when there are tokenizer threads, which then
  // encode them side by side) and appends their ids to the pending ids.
  absl::Status FillSome();
  absl::Status Tokenize(std::vector<SourceDocument>* documents);
  absl::Status EnterStream();  // seeks every source to the first stream's cursors
  // Moves the first `count` pending ids into `row`, with their sources and segment breaks.
  void TakePending(size_t count, std::vector<int32_t>* row, std::vector<int64_t>* breaks,
                   std::vector<int64_t>* source_tokens);

  LoaderOptions options_;
  const Tokenizer* tokenizer_;
  SourceMixture mixture_;
  std::vector<std::unique_ptr<DocumentSource>> sources_;
  std::unique_ptr<TokenizerPool> pool_;  // null: tokenize on the caller's thread
  DataPosition state_;    // streams.front().cursors are stale while entered_ (sources have them)
  bool entered_ = false;  // the sources stand at the first stream's place
};

// Varlen segment boundaries of one packed row: a segment starts at 0, at every BOS (or, for a
// tokenizer without BOS, after every EOS), and at each of `breaks`; segments longer than
// context_len are split every context_len ids (flame's collator).
std::vector<int64_t> VarlenBoundaries(const std::vector<int32_t>& row, int32_t bos_id,
                                      int32_t eos_id, int64_t context_len,
                                      const std::vector<int64_t>& breaks = {});

}  // namespace flame::worker
