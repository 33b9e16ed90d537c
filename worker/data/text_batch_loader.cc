#include "worker/data/text_batch_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace flame::worker {

std::vector<int64_t> VarlenBoundaries(const std::vector<int32_t>& row, int32_t bos_id,
                                      int32_t eos_id, int64_t context_len,
                                      const std::vector<int64_t>& breaks) {
  const auto length = static_cast<int64_t>(row.size());
  std::vector<int64_t> starts = {0};
  for (int64_t i = 1; i < length; ++i) {
    // flame's collator: documents start at a BOS; without one, right after an EOS.
    const bool start = bos_id >= 0 ? row[static_cast<size_t>(i)] == bos_id
                                   : eos_id >= 0 && row[static_cast<size_t>(i - 1)] == eos_id;
    if (start) starts.push_back(i);
  }
  for (int64_t b : breaks) {
    if (b > 0 && b < length) starts.push_back(b);
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  starts.push_back(length);
  std::vector<int64_t> bounds;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    for (int64_t at = starts[s]; at < starts[s + 1]; at += context_len) bounds.push_back(at);
  }
  bounds.push_back(length);
  return bounds;
}

TextBatchLoader::TextBatchLoader(LoaderOptions options, const Tokenizer* tokenizer,
                                 SourceMixture mixture,
                                 std::vector<std::unique_ptr<DocumentSource>> sources)
    : options_(std::move(options)),
      tokenizer_(tokenizer),
      mixture_(std::move(mixture)),
      sources_(std::move(sources)) {
  if (options_.tokenizer_threads > 0) {
    pool_ = std::make_unique<TokenizerPool>(*tokenizer_, options_.tokenizer_threads);
  }
  state_ = InitialDataPosition(options_.rank, options_.world_size, source_count());
  state_.mixture = mixture_.Describe();
}

absl::StatusOr<std::unique_ptr<TextBatchLoader>> TextBatchLoader::Create(
    const LoaderOptions& options, const Tokenizer* tokenizer) {
  if (options.batch_size <= 0 || options.seq_len <= 0 || options.context_len <= 0) {
    return absl::InvalidArgumentError("batch_size, seq_len and context_len must be positive");
  }
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  if (options.varlen && options.batch_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.batch_size must be 1 when training.varlen is set (got ",
                     options.batch_size, "): varlen packs documents into one row"));
  }
  if (options.sources.empty()) return absl::InvalidArgumentError("training.dataset is empty");
  if (options.tokenizer_threads < 0) {
    return absl::InvalidArgumentError("training.num_workers must be >= 0");
  }
  FLAME_ASSIGN_OR_RETURN(
      SourceMixture mixture,
      SourceMixture::Create(options.probs, static_cast<int64_t>(options.sources.size()),
                            options.seed));
  std::vector<std::unique_ptr<DocumentSource>> sources;
  for (const std::string& path : options.sources) {
    FLAME_ASSIGN_OR_RETURN(std::unique_ptr<DocumentSource> source,
                           OpenDocumentSource(path, tokenizer));
    sources.push_back(std::move(source));
  }
  return std::unique_ptr<TextBatchLoader>(
      new TextBatchLoader(options, tokenizer, std::move(mixture), std::move(sources)));
}

absl::Status TextBatchLoader::EnterStream() {
  std::vector<DocumentStream>& streams = state_.streams;
  while (streams.front().bounded() && !streams.front().HasDocumentsLeft()) {
    streams.erase(streams.begin());  // the last stream is unbounded: this ends
  }
  for (size_t s = 0; s < sources_.size(); ++s) {
    FLAME_RETURN_IF_ERROR(sources_[s]->Seek(streams.front().cursors[s]));
  }
  entered_ = true;
  return absl::OkStatus();
}

absl::Status TextBatchLoader::FillSome() {
  // With tokenizer threads, read enough documents at once to give each of them work.
  const size_t wanted =
      pool_ != nullptr ? 16 * static_cast<size_t>(options_.tokenizer_threads) : size_t{1};
  std::vector<SourceDocument> documents;
  std::vector<int64_t> document_sources;
  while (documents.size() < wanted) {
    if (!entered_) FLAME_RETURN_IF_ERROR(EnterStream());
    DocumentStream& stream = state_.streams.front();
    if (!stream.HasDocumentsLeft()) {  // a handed-over stream is done
      state_.streams.erase(state_.streams.begin());
      entered_ = false;
      continue;
    }
    const int64_t g = stream.next;
    const int64_t source = mixture_.SourceOf(g);
    const bool mine = g % stream.stride == stream.phase;
    // Every rank walks every document, so that each source's reader knows where it stands;
    // other ranks' documents are skipped without tokenizing.
    SourceDocument document;
    FLAME_RETURN_IF_ERROR(sources_[static_cast<size_t>(source)]->Next(mine ? &document : nullptr));
    ++stream.next;
    if (!mine) continue;
    documents.push_back(std::move(document));
    document_sources.push_back(source);
  }
  FLAME_RETURN_IF_ERROR(Tokenize(&documents));
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int32_t>& ids = documents[d].ids;
    if (ids.empty()) continue;
    state_.pending.insert(state_.pending.end(), ids.begin(), ids.end());
    std::vector<SourceRun>& runs = state_.pending_runs;
    if (!runs.empty() && runs.back().source == document_sources[d]) {
      runs.back().tokens += static_cast<int64_t>(ids.size());
    } else {
      runs.push_back({document_sources[d], static_cast<int64_t>(ids.size())});
    }
  }
  return absl::OkStatus();
}

absl::Status TextBatchLoader::Tokenize(std::vector<SourceDocument>* documents) {
  std::vector<SourceDocument*> text;
  for (SourceDocument& document : *documents) {
    if (!document.tokenized) text.push_back(&document);
  }
  if (pool_ == nullptr || text.size() < 2) {
    for (SourceDocument* document : text) {
      FLAME_ASSIGN_OR_RETURN(document->ids, EncodeDocument(*tokenizer_, document->text));
    }
    return absl::OkStatus();
  }
  // One job per thread, each a contiguous run of the texts; results come back in order.
  const size_t jobs = std::min(text.size(), static_cast<size_t>(options_.tokenizer_threads));
  std::vector<int64_t> numbers;
  for (size_t j = 0; j < jobs; ++j) {
    std::vector<std::string> texts;
    for (size_t i = j * text.size() / jobs; i < (j + 1) * text.size() / jobs; ++i) {
      texts.push_back(std::move(text[i]->text));
    }
    numbers.push_back(pool_->Submit(std::move(texts)));
  }
  size_t next = 0;
  absl::Status status;
  for (int64_t number : numbers) {  // take every job, even after an error
    absl::StatusOr<std::vector<std::vector<int32_t>>> ids = pool_->Take(number);
    if (!ids.ok()) {
      status.Update(ids.status());
      continue;
    }
    for (std::vector<int32_t>& one : *ids) text[next++]->ids = std::move(one);
  }
  return status;
}

void TextBatchLoader::TakePending(size_t count, std::vector<int32_t>* row,
                                  std::vector<int64_t>* breaks,
                                  std::vector<int64_t>* source_tokens) {
  std::vector<int32_t>& pending = state_.pending;
  const auto cut = static_cast<std::ptrdiff_t>(count);
  row->assign(pending.begin(), pending.begin() + cut);
  pending.erase(pending.begin(), pending.begin() + cut);
  std::vector<int64_t> kept;
  for (int64_t b : state_.pending_breaks) {
    if (b < cut) {
      breaks->push_back(b);
    } else {
      kept.push_back(b - cut);
    }
  }
  state_.pending_breaks = std::move(kept);
  source_tokens->assign(sources_.size(), 0);
  auto left = static_cast<int64_t>(count);
  std::vector<SourceRun>& runs = state_.pending_runs;
  while (left > 0) {
    SourceRun& run = runs.front();
    const int64_t used = std::min(left, run.tokens);
    (*source_tokens)[static_cast<size_t>(run.source)] += used;
    run.tokens -= used;
    left -= used;
    if (run.tokens == 0) runs.erase(runs.begin());
  }
}

absl::StatusOr<Batch> TextBatchLoader::Next() {
  Batch batch;
  batch.batch_size = options_.batch_size;
  batch.seq_len = options_.seq_len;
  const auto needed = static_cast<size_t>(options_.batch_size * options_.seq_len);
  while (state_.pending.size() < needed) FLAME_RETURN_IF_ERROR(FillSome());
  std::vector<int64_t> breaks;
  TakePending(needed, &batch.ids, &breaks, &batch.source_tokens);
  for (size_t s = 0; s < sources_.size(); ++s) state_.source_tokens[s] += batch.source_tokens[s];
  if (options_.varlen) {
    batch.cu_seqlens = VarlenBoundaries(batch.ids, tokenizer_->BosId(), tokenizer_->EosId(),
                                        options_.context_len, breaks);
  }
  return batch;
}

DataPosition TextBatchLoader::Position() const {
  DataPosition p = state_;
  if (entered_) {
    for (size_t s = 0; s < sources_.size(); ++s) {
      p.streams.front().cursors[s] = sources_[s]->cursor();
    }
  }
  // Handed-over streams already read to their end carry nothing.
  std::erase_if(p.streams, [](const DocumentStream& s) { return !s.HasDocumentsLeft(); });
  return p;
}

absl::Status TextBatchLoader::Restore(const DataPosition& position) {
  if (position.rank != options_.rank || position.world_size != options_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data position of rank ", position.rank, "/", position.world_size,
                     " restored into rank ", options_.rank, "/", options_.world_size,
                     " (use ReshardDataPositions when the rank count changed)"));
  }
  if (position.legacy) {
    return absl::InvalidArgumentError(
        "an old-format data position must go through UpgradeLegacyDataPositions first");
  }
  if (position.streams.empty()) return absl::DataLossError("data position has no streams");
  // The checks of a whole run's positions, on this one (as rank 0 of a run of one, shifted).
  DataPosition alone = position;
  alone.rank = 0;
  alone.world_size = 1;
  alone.streams.back().stride = 1;
  alone.streams.back().phase = 0;
  FLAME_RETURN_IF_ERROR(ValidateDataPositions({alone}, source_count()));
  if (position.streams.back().stride != options_.world_size) {
    return absl::DataLossError("data position: its stream does not match the rank count");
  }
  if (!position.mixture.empty() && position.mixture != mixture_.Describe() && options_.rank == 0) {
    FLAME_LOG(WARNING) << "training.data_probs or training.seed changed since the data position "
                       << "was saved (" << position.mixture << " -> " << mixture_.Describe()
                       << "): the new mixture applies from here; documents near the ranks' "
                       << "positions may be read twice or skipped";
  }
  state_ = position;
  state_.mixture = mixture_.Describe();
  entered_ = false;
  return EnterStream();
}

}  // namespace flame::worker
