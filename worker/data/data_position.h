// Where a rank's data stream stands, as saved in a checkpoint (data_positions.json, index = rank),
// and how the positions of one rank count become those of another without repeating or skipping
// a single token.
//
// The global stream: document g = 0, 1, 2, ... comes from source SourceMixture::SourceOf(g), and
// is that source's next document (sources wrap to a new epoch when they run out). Which rank
// reads document g is decided by *streams*: a stream walks g upward and takes the documents with
// g % stride == phase. A fresh run with W ranks gives rank r one unbounded stream (stride W,
// phase r). Walking a stream moves every source's reader (other ranks' documents are skipped,
// not tokenized), so a stream carries the reader cursors of all sources, valid at its `next`.
//
// A position is then a few integers per source and stream, plus the ids already read but not yet
// packed into a row (`pending`). With the same rank count each rank restores its own. With
// another count, ReshardDataPositions hands out what the old ranks left unread:
//   - each old rank's pending ids, whole, to new ranks in turn;
//   - each old rank's unfinished documents below G = the furthest old stream's `next`, as
//     bounded streams [next, G) with the old stride and phase, to new ranks in turn;
//   - every document from G on, as new unbounded streams with stride W' and phases G + r'.
// Old ranks' unbounded streams partition the documents by g % W and none has read past G, so
// the union of the new positions is exactly the union of the old ones' unread data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flame::worker {

// One source's reader: epoch, document index within the epoch, and (text sources) the file and
// byte offset of the next line.
struct SourceCursor {
  int64_t epoch = 0;
  int64_t doc = 0;
  int64_t file = 0;
  int64_t offset = 0;
};

struct DocumentStream {
  int64_t next = 0;  // global index of the next document to look at
  int64_t end = -1;  // first index past the stream; -1: unbounded
  int64_t stride = 1;
  int64_t phase = 0;                  // the stream takes g when g % stride == phase
  std::vector<SourceCursor> cursors;  // every source's reader, at `next`

  bool bounded() const { return end >= 0; }
  // Whether a document of this stream remains in [next, end).
  bool HasDocumentsLeft() const;
};

// `tokens` consecutive pending ids that came from `source`.
struct SourceRun {
  int64_t source = 0;
  int64_t tokens = 0;
};

struct DataPosition {
  int64_t rank = 0;
  int64_t world_size = 1;
  std::vector<int32_t> pending;         // read, not yet emitted
  std::vector<SourceRun> pending_runs;  // the source of each pending id, run-length coded
  // Offsets in `pending` where a document segment starts without a BOS: where a piece handed
  // over from another rank (which begins mid-document) follows another piece. Varlen marks them.
  std::vector<int64_t> pending_breaks;
  std::vector<DocumentStream> streams;  // the first is being read; the last is unbounded
  std::vector<int64_t> source_tokens;   // ids emitted so far, per source (this rank)
  // The mixture that assigned sources to documents: normalised probabilities and seed. Resuming
  // under another one continues, but the ranks' views of the sources then differ by the few
  // documents between them: a handful may be read twice or not at all.
  std::string mixture;
  bool legacy = false;  // decoded from the format before streams (see below)
};

// The position a fresh run starts from.
DataPosition InitialDataPosition(int64_t rank, int64_t world_size, int64_t source_count);

std::string EncodeDataPosition(const DataPosition& position);  // JSON text
// Also reads the first format ({rank, world_size, epoch, file_index, byte_offset, doc_index,
// pending}: one source, rank r read the documents of each epoch with index % W == r); such a
// position comes back with `legacy` set and a stream that continues it (see UpgradeLegacy...).
absl::StatusOr<DataPosition> DecodeDataPosition(const std::string& text);

// Checks that `positions` are all ranks of one run (rank i at index i, one world size, one source
// count, well-formed streams).
absl::Status ValidateDataPositions(const std::vector<DataPosition>& positions,
                                   int64_t source_count);

// Old-format positions count documents within an epoch. When all ranks are in the same epoch
// that count is a consistent global index and nothing changes (returns true: exact). Otherwise
// every rank restarts from the earliest saved document with no pending ids, as the old format's
// resharding did (returns false: a few documents are read twice).
bool UpgradeLegacyDataPositions(std::vector<DataPosition>* positions);

// The positions of `new_world_size` ranks that continue exactly where `old` (all ranks of the
// previous run, validated) stopped. Emitted-token counts of all old ranks go to new rank 0.
absl::StatusOr<std::vector<DataPosition>> ReshardDataPositions(const std::vector<DataPosition>& old,
                                                               int64_t new_world_size);

}  // namespace flame::worker
