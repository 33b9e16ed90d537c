// SentencePiece behind the Tokenizer interface, through SentencePieceModel, which runs it in an
// isolated module (see sentencepiece_module.h for why it cannot be linked directly).
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "worker/data/sentencepiece_model.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model)
      : model_(std::move(model)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const override {
    std::vector<int> pieces;
    std::string error;
    if (!model_->Encode(text, &pieces, &error)) {
      return absl::InternalError(absl::StrCat("sentencepiece encode: ", error));
    }
    std::vector<int32_t> ids;
    ids.reserve(pieces.size() + 1);
    if (BosId() >= 0) ids.push_back(BosId());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    return ids;
  }

  int64_t VocabSize() const override { return model_->PieceSize(); }
  int32_t BosId() const override { return model_->BosId(); }
  int32_t EosId() const override { return model_->EosId(); }

 private:
  std::unique_ptr<SentencePieceModel> model_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  if (!PathExists(path)) {
    return absl::NotFoundError(absl::StrCat("tokenizer model not found: ", path));
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> model = SentencePieceModel::Load(path, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", path, ": ", error));
  }
  return std::make_unique<SentencePieceTokenizer>(std::move(model));
}

}  // namespace flame::worker
