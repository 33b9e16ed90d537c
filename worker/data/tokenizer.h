// Text -> token ids for the data pipeline.
//
// Encode follows the tokenizer's own defaults for special tokens, as flame's HF tokenizers do:
// the Llama/Mistral SentencePiece models and Llama-3-style tokenizer.json files prepend a BOS and
// append no EOS (documents packed back to back are separated by the next one's BOS).
// tokenizer_factory.h picks the implementation from model.tokenizer_path.
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

// Loads a Hugging Face tokenizer.json with a BPE model (bpe_tokenizer.h), or the tokenizer.json
// of a folder. A tokenizer_config.json beside it names the EOS token. Constructs the file uses
// that flame does not implement are refused by name. Encode is safe to call from several threads.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadBpeTokenizer(const std::string& path);

}  // namespace flame::worker
