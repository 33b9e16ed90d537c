// The worker's one way to make its tokenizer: model.tokenizer_path names a SentencePiece .model
// file, a Hugging Face tokenizer.json, or a folder with either (common/tokenizer_path.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

}  // namespace flame::worker
