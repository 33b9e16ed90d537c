#include "worker/data/document_source.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/document_reader.h"
#include "worker/data/token_shards.h"

namespace flame::worker {
namespace {

// Text, read in order; the loader tokenizes it.
class TextDocumentSource final : public DocumentSource {
 public:
  TextDocumentSource(std::string name, DocumentReader reader)
      : name_(std::move(name)), reader_(std::move(reader)) {}

  absl::Status Next(SourceDocument* document) override {
    std::string* text = document != nullptr ? &document->text : nullptr;
    FLAME_ASSIGN_OR_RETURN(bool found, reader_.Next(text));
    if (!found) {
      if (reader_.cursor().doc_index == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("training.dataset entry ", name_, " has no documents"));
      }
      ++epoch_;
      FLAME_RETURN_IF_ERROR(reader_.Seek(DocumentCursor{}));
      FLAME_ASSIGN_OR_RETURN(found, reader_.Next(text));
      if (!found) return absl::DataLossError(absl::StrCat(name_, " lost its documents"));
    }
    if (document != nullptr) document->tokenized = false;
    return absl::OkStatus();
  }

  SourceCursor cursor() const override {
    const DocumentCursor& c = reader_.cursor();
    return {epoch_, c.doc_index, c.file_index, c.byte_offset};
  }

  absl::Status Seek(const SourceCursor& cursor) override {
    if (cursor.epoch < 0) return absl::InvalidArgumentError("data position: negative epoch");
    FLAME_RETURN_IF_ERROR(reader_.Seek({cursor.file, cursor.offset, cursor.doc}));
    epoch_ = cursor.epoch;
    return absl::OkStatus();
  }

  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  DocumentReader reader_;
  int64_t epoch_ = 0;
};

// A folder with .tokens files that is not a shard folder (no manifest, or a broken one).
bool LooksLikeUnfinishedShards(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return false;
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    if (entry.path().extension() == ".tokens") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> EncodeDocument(const Tokenizer& tokenizer,
                                                    const std::string& text) {
  FLAME_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text));
  const int32_t eos = tokenizer.EosId();
  if (tokenizer.BosId() < 0 && eos >= 0 && (ids.empty() || ids.back() != eos)) ids.push_back(eos);
  return ids;
}

absl::StatusOr<std::unique_ptr<DocumentSource>> OpenDocumentSource(const std::string& path,
                                                                   const Tokenizer* tokenizer) {
  if (IsTokenShardFolder(path)) {
    FLAME_ASSIGN_OR_RETURN(std::unique_ptr<DocumentSource> shards,
                           OpenTokenShardSource(path, *tokenizer));
    return shards;
  }
  if (LooksLikeUnfinishedShards(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.dataset entry ", path, " holds token shard files but no valid ", kShardManifest,
        ": an interrupted or damaged flame-tokenize output; run it again"));
  }
  FLAME_ASSIGN_OR_RETURN(DocumentReader reader, DocumentReader::Open({path}));
  return std::unique_ptr<DocumentSource>(new TextDocumentSource(path, std::move(reader)));
}

}  // namespace flame::worker
