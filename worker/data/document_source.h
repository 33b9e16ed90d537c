// One entry of training.dataset as an endless sequence of tokenized documents.
//
// A source is a JSONL/plain-text file or folder (tokenized online, see document_reader.h) or a
// folder of pre-tokenized shards (token_shards.h, made by flame-tokenize). When it runs out it
// starts its next epoch from the first document (flame's all_exhausted mixing: a short source
// repeats while the others continue). Its cursor is a SourceCursor, so Seek returns to any saved
// place in O(1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/data_position.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

// A document as its source gives it: ids from pre-tokenized sources, text from the others, which
// the loader encodes (EncodeDocument), on tokenizer threads when it has them.
struct SourceDocument {
  bool tokenized = false;
  std::vector<int32_t> ids;  // when tokenized
  std::string text;          // otherwise
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // Moves past the next document. With `document` non-null it also returns the document; with
  // null the document is skipped as cheaply as the format allows.
  virtual absl::Status Next(SourceDocument* document) = 0;
  virtual SourceCursor cursor() const = 0;
  virtual absl::Status Seek(const SourceCursor& cursor) = 0;
  virtual const std::string& name() const = 0;  // the training.dataset entry
};

// The ids a document contributes to the token stream: the tokenizer's ids (BOS first when it has
// one), and, for a tokenizer without BOS, an EOS at the end (unless it already put one there) so
// that packed documents stay separable; varlen finds documents by that BOS or EOS.
absl::StatusOr<std::vector<int32_t>> EncodeDocument(const Tokenizer& tokenizer,
                                                    const std::string& text);

// Opens one training.dataset entry: a shard folder (a folder with a flame-token-shards
// manifest.json) is read from its shards and checked against `tokenizer`; anything else is text.
absl::StatusOr<std::unique_ptr<DocumentSource>> OpenDocumentSource(const std::string& path,
                                                                   const Tokenizer* tokenizer);

}  // namespace flame::worker
