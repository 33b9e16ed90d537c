#include "common/tokenizer_path.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flame {

absl::StatusOr<TokenizerFile> ResolveTokenizerPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat("tokenizer not found: ", path));
  }
  if (fs::is_directory(status)) {
    for (const auto& [name, format] :
         {std::pair{"tokenizer.json", TokenizerFormat::kHuggingFace},
          std::pair{"tokenizer.model", TokenizerFormat::kSentencePiece}}) {
      const std::string file = (fs::path(path) / name).string();
      if (fs::is_regular_file(file, error)) return TokenizerFile{format, file};
    }
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer folder ", path, " has neither tokenizer.json nor tokenizer.model"));
  }
  if (absl::EndsWith(path, ".model")) return TokenizerFile{TokenizerFormat::kSentencePiece, path};
  if (absl::EndsWith(path, ".json")) return TokenizerFile{TokenizerFormat::kHuggingFace, path};
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer ", path,
                   " is not a SentencePiece .model file, a tokenizer.json or a folder with one"));
}

}  // namespace flame
