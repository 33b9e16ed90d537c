// Online tokenization and packing: documents -> token rows of seq_len -> batches [B, T].
//
// Like flame's OnlineTokenizedIterableDataset: each document is tokenized (BOS first) and its
// ids are appended to a buffer; full rows of seq_len ids are cut from the front. Documents run
// across row boundaries and no EOS is inserted. Labels equal the inputs (the model shifts them).
//
// Sharding: document i of the corpus belongs to rank i % world_size. Every rank walks the whole
// file list but tokenizes only its own documents, so ranks see disjoint data without an index.
// When the corpus runs out a new epoch starts from the first file, in the same order.
//
// Resumption: DataPosition is the reader cursor, the epoch, and the ids already tokenized but not
// yet emitted. Restoring it makes the loader produce exactly the batches it would have produced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/document_reader.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

struct DataPosition {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t epoch = 0;
  DocumentCursor cursor;
  std::vector<int32_t> pending;  // tokenized, not yet emitted
};

std::string EncodeDataPosition(const DataPosition& position);  // JSON text
absl::StatusOr<DataPosition> DecodeDataPosition(const std::string& text);

// Where rank `rank` of `world_size` starts from positions saved by a run with another rank
// count: at the earliest saved document (no document is skipped; a few are seen twice) with no
// pending ids.
DataPosition ReshardDataPosition(const std::vector<DataPosition>& saved, int64_t rank,
                                 int64_t world_size);

struct Batch {
  int64_t batch_size = 0;    // B
  int64_t seq_len = 0;       // T
  std::vector<int32_t> ids;  // [B, T] row-major; labels are the same ids
  // Varlen only (B == 1): segment starts and the end, [N + 1], strictly increasing from 0 to T.
  std::vector<int64_t> cu_seqlens;
};

struct LoaderOptions {
  std::vector<std::string> files;
  int64_t batch_size = 8;
  int64_t seq_len = 2048;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool varlen = false;
  int64_t context_len = 2048;  // varlen: longest segment
};

class TextBatchLoader {
 public:
  static absl::StatusOr<std::unique_ptr<TextBatchLoader>> Create(const LoaderOptions& options,
                                                                 const Tokenizer* tokenizer);

  absl::StatusOr<Batch> Next();

  // The position after the last batch returned by Next.
  DataPosition Position() const;
  absl::Status Restore(const DataPosition& position);

 private:
  TextBatchLoader(LoaderOptions options, const Tokenizer* tokenizer, DocumentReader reader)
      : options_(std::move(options)), tokenizer_(tokenizer), reader_(std::move(reader)) {}

  // Tokenizes this rank's next document into pending_, wrapping to a new epoch at the end.
  absl::Status FillOne();

  LoaderOptions options_;
  const Tokenizer* tokenizer_;
  DocumentReader reader_;
  int64_t epoch_ = 0;
  std::vector<int32_t> pending_;
  bool found_in_epoch_ = false;  // whether this rank got any document since the epoch began
};

// Varlen segment boundaries of one packed row: a segment starts at 0 and at every BOS, and
// segments longer than context_len are split every context_len ids (flame's collator).
std::vector<int64_t> VarlenBoundaries(const std::vector<int32_t>& row, int32_t bos_id,
                                      int64_t context_len);

}  // namespace flame::worker
