// Text -> token ids for the data pipeline.
//
// Encode follows the Llama/Mistral tokenizers that flame's configs use: a BOS id is prepended and
// no EOS is appended (documents packed back to back are separated by the next one's BOS).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flame::worker {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text` with BOS first (when the model has a BOS id).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const = 0;
  virtual int64_t VocabSize() const = 0;
  virtual int32_t BosId() const = 0;  // -1 when the tokenizer has none
  virtual int32_t EosId() const = 0;  // -1 when the tokenizer has none
};

// Loads a SentencePiece .model file. Encode is const and safe to call from several threads.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);

}  // namespace flame::worker
