// Added tokens of a tokenizer.json ("<s>", "<|begin_of_text|>", ...): found in the text before
// any pre-tokenization and emitted as their own id, never split or merged.
//
// Matching follows the `tokenizers` library: scanning left to right, the leftmost occurrence of
// any token wins, the longest one when several start there; matches do not overlap. Per token,
// `single_word` keeps only matches not inside a word, and `lstrip` / `rstrip` make a match swallow
// the whitespace before / after it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flame::worker {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalized text rather than the raw text
};

// A span of text: an added token (id >= 0) or plain text to pre-tokenize (id -1).
struct TextPiece {
  absl::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // `text` cut into added tokens and the plain text between them; empty plain pieces are left
  // out. The pieces point into `text`.
  std::vector<TextPiece> Split(absl::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // The longest token that starts at text[pos], or null.
  const AddedToken* LongestAt(absl::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  // For each first byte, the indices of the tokens that start with it, longest first.
  std::vector<std::vector<size_t>> by_first_byte_;
};

}  // namespace flame::worker
