#include "worker/data/bpe_tokenizer.h"

#include <algorithm>

#include "common/status_macros.h"
#include "worker/data/unicode_normalizer.h"

namespace flame::worker {
namespace {

std::vector<AddedToken> Select(const std::vector<AddedToken>& tokens, bool normalized, bool nfc) {
  std::vector<AddedToken> out;
  for (const AddedToken& token : tokens) {
    if (token.normalized != normalized) continue;
    out.push_back(token);
    // A token matched in normalized text is itself compared in normalized form.
    if (normalized && nfc) {
      absl::StatusOr<std::string> content = NormalizeNfc(token.content);
      if (content.ok()) out.back().content = *std::move(content);
    }
  }
  return out;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeTokenizerParts parts)
    : parts_(std::move(parts)),
      raw_matcher_(Select(parts_.added_tokens, /*normalized=*/false, parts_.nfc)),
      normalized_matcher_(Select(parts_.added_tokens, /*normalized=*/true, parts_.nfc)) {
  int64_t max_id = parts_.model.MaxId();
  for (const AddedToken& token : parts_.added_tokens) max_id = std::max<int64_t>(max_id, token.id);
  for (int32_t id : parts_.prefix_ids) max_id = std::max<int64_t>(max_id, id);
  for (int32_t id : parts_.suffix_ids) max_id = std::max<int64_t>(max_id, id);
  vocab_size_ = max_id + 1;
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(const std::string& text) const {
  std::vector<int32_t> ids = parts_.prefix_ids;
  for (const TextPiece& piece : raw_matcher_.Split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
    } else {
      FLAME_RETURN_IF_ERROR(EncodeRawPiece(piece.text, &ids));
    }
  }
  ids.insert(ids.end(), parts_.suffix_ids.begin(), parts_.suffix_ids.end());
  return ids;
}

absl::Status BpeTokenizer::EncodeRawPiece(absl::string_view text, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (parts_.nfc) {
    FLAME_ASSIGN_OR_RETURN(normalized, NormalizeNfc(text));
    text = normalized;
  }
  for (const TextPiece& piece : normalized_matcher_.Split(text)) {
    if (piece.id >= 0) {
      ids->push_back(piece.id);
    } else {
      FLAME_RETURN_IF_ERROR(EncodePlain(piece.text, ids));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const {
  std::vector<std::string> words = {std::string(text)};
  if (parts_.pre_tokenizer != nullptr) FLAME_RETURN_IF_ERROR(parts_.pre_tokenizer->Apply(&words));
  for (const std::string& word : words) parts_.model.Tokenize(word, ids);
  return absl::OkStatus();
}

}  // namespace flame::worker
