#include "worker/data/text_batch_loader.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker {

std::string EncodeDataPosition(const DataPosition& p) {
  nlohmann::json json = {
      {"rank", p.rank},
      {"world_size", p.world_size},
      {"epoch", p.epoch},
      {"file_index", p.cursor.file_index},
      {"byte_offset", p.cursor.byte_offset},
      {"doc_index", p.cursor.doc_index},
      {"pending", p.pending},
  };
  return json.dump();
}

absl::StatusOr<DataPosition> DecodeDataPosition(const std::string& text) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const char* const kFields[] = {"rank",        "world_size", "epoch",  "file_index",
                                 "byte_offset", "doc_index",  "pending"};
  bool complete = json.is_object();
  for (const char* field : kFields) complete = complete && json.contains(field);
  if (!complete || !json.at("pending").is_array()) {
    return absl::DataLossError("data position is not a complete JSON object");
  }
  DataPosition p;
  try {
    p.rank = json.at("rank").get<int64_t>();
    p.world_size = json.at("world_size").get<int64_t>();
    p.epoch = json.at("epoch").get<int64_t>();
    p.cursor.file_index = json.at("file_index").get<int64_t>();
    p.cursor.byte_offset = json.at("byte_offset").get<int64_t>();
    p.cursor.doc_index = json.at("doc_index").get<int64_t>();
    p.pending = json.at("pending").get<std::vector<int32_t>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("data position has a field of the wrong type: ", e.what()));
  }
  return p;
}

DataPosition ReshardDataPosition(const std::vector<DataPosition>& saved, int64_t rank,
                                 int64_t world_size) {
  DataPosition start;
  bool first = true;
  for (const DataPosition& p : saved) {
    if (first ||
        std::tie(p.epoch, p.cursor.doc_index) < std::tie(start.epoch, start.cursor.doc_index)) {
      start = p;
      first = false;
    }
  }
  start.rank = rank;
  start.world_size = world_size;
  start.pending.clear();
  return start;
}

std::vector<int64_t> VarlenBoundaries(const std::vector<int32_t>& row, int32_t bos_id,
                                      int64_t context_len) {
  std::vector<int64_t> starts = {0};
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == bos_id) starts.push_back(static_cast<int64_t>(i));
  }
  const auto length = static_cast<int64_t>(row.size());
  starts.push_back(length);
  std::vector<int64_t> bounds;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    for (int64_t at = starts[s]; at < starts[s + 1]; at += context_len) bounds.push_back(at);
  }
  bounds.push_back(length);
  return bounds;
}

absl::StatusOr<std::unique_ptr<TextBatchLoader>> TextBatchLoader::Create(
    const LoaderOptions& options, const Tokenizer* tokenizer) {
  if (options.batch_size <= 0 || options.seq_len <= 0) {
    return absl::InvalidArgumentError("batch_size and seq_len must be positive");
  }
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  if (options.varlen && options.batch_size != 1) {
    return absl::InvalidArgumentError("varlen packing needs batch_size 1");
  }
  FLAME_ASSIGN_OR_RETURN(DocumentReader reader, DocumentReader::Open(options.files));
  return std::unique_ptr<TextBatchLoader>(
      new TextBatchLoader(options, tokenizer, std::move(reader)));
}

absl::Status TextBatchLoader::FillOne() {
  std::string text;
  while (true) {
    const bool mine = reader_.cursor().doc_index % options_.world_size == options_.rank;
    FLAME_ASSIGN_OR_RETURN(const bool found, reader_.Next(mine ? &text : nullptr));
    if (!found) {
      // End of the corpus. An epoch without a single document for this rank would loop forever.
      if (!found_in_epoch_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "training.dataset has ", reader_.cursor().doc_index, " documents, too few for rank ",
            options_.rank, " of ", options_.world_size));
      }
      ++epoch_;
      found_in_epoch_ = false;
      FLAME_RETURN_IF_ERROR(reader_.Seek(DocumentCursor{}));
      continue;
    }
    if (!mine) continue;
    found_in_epoch_ = true;
    FLAME_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_->Encode(text));
    pending_.insert(pending_.end(), ids.begin(), ids.end());
    return absl::OkStatus();
  }
}

absl::StatusOr<Batch> TextBatchLoader::Next() {
  Batch batch;
  batch.batch_size = options_.batch_size;
  batch.seq_len = options_.seq_len;
  const auto needed = static_cast<size_t>(options_.batch_size * options_.seq_len);
  while (pending_.size() < needed) FLAME_RETURN_IF_ERROR(FillOne());
  batch.ids.assign(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(needed));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(needed));
  if (options_.varlen) {
    batch.cu_seqlens = VarlenBoundaries(batch.ids, tokenizer_->BosId(), options_.context_len);
  }
  return batch;
}

DataPosition TextBatchLoader::Position() const {
  DataPosition p;
  p.rank = options_.rank;
  p.world_size = options_.world_size;
  p.epoch = epoch_;
  p.cursor = reader_.cursor();
  p.pending = pending_;
  return p;
}

absl::Status TextBatchLoader::Restore(const DataPosition& position) {
  if (position.rank != options_.rank || position.world_size != options_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data position of rank ", position.rank, "/", position.world_size,
                     " restored into rank ", options_.rank, "/", options_.world_size,
                     " (use ReshardDataPosition when the rank count changed)"));
  }
  FLAME_RETURN_IF_ERROR(reader_.Seek(position.cursor));
  epoch_ = position.epoch;
  pending_ = position.pending;
  // A restored position is mid-epoch: this rank had documents in it, or it will find out at the
  // end of the epoch after next (a corpus does not lose documents between runs).
  found_in_epoch_ = true;
  return absl::OkStatus();
}

}  // namespace flame::worker
