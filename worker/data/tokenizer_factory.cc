#include "worker/data/tokenizer_factory.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer_path.h"

namespace flame::worker {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  absl::StatusOr<TokenizerFile> file = ResolveTokenizerPath(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("model.tokenizer_path: ", file.status().message()));
  }
  switch (file->format) {
    case TokenizerFormat::kSentencePiece:
      return LoadSentencePieceTokenizer(file->path);
    case TokenizerFormat::kHuggingFace:
      return LoadBpeTokenizer(file->path);
  }
  return absl::InternalError("unknown tokenizer format");
}

}  // namespace flame::worker
