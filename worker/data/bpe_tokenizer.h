// Hugging Face tokenizer.json byte-level BPE (GPT-2, Llama 3, Qwen style) behind the Tokenizer
// interface. Encode gives the ids that `tokenizers` gives for encode(text,
// add_special_tokens=True): what flame's AutoTokenizer feeds the model.
//
// The pipeline, per text:
//   1. added tokens with normalized=false are cut out of the raw text (added_tokens.h);
//   2. the rest is normalized (none or NFC), and added tokens with normalized=true are cut out;
//   3. each plain piece is pre-tokenized into words (pre_tokenizer.h);
//   4. each word goes through the BPE model (bpe_model.h);
//   5. the post-processor's template puts its special tokens around the ids (BOS first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/added_tokens.h"
#include "worker/data/bpe_model.h"
#include "worker/data/pre_tokenizer.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

struct BpeTokenizerParts {
  BpeModel model;
  bool nfc = false;                             // the normalizer: NFC, or none
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // null: the whole piece is one word
  std::vector<AddedToken> added_tokens;
  std::vector<int32_t> prefix_ids;  // the template's special tokens before the text
  std::vector<int32_t> suffix_ids;  // ... and after it
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeTokenizerParts parts);

  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const override;
  // One past the largest id of the vocab, the added tokens and the template, so that every id
  // Encode can give has a row in the embedding.
  int64_t VocabSize() const override { return vocab_size_; }
  int32_t BosId() const override { return parts_.bos_id; }
  int32_t EosId() const override { return parts_.eos_id; }

 private:
  // Steps 2-4 for a piece of raw text between added tokens that match unnormalized.
  absl::Status EncodeRawPiece(absl::string_view text, std::vector<int32_t>* ids) const;
  // Steps 3-4 for normalized text without added tokens.
  absl::Status EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const;

  BpeTokenizerParts parts_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized=true
  int64_t vocab_size_ = 0;
};

}  // namespace flame::worker
