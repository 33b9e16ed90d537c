#include "worker/data/added_tokens.h"

#include <algorithm>
#include <cctype>

#include "worker/data/byte_level.h"

namespace flame::worker {
namespace {

// Rust's char::is_alphanumeric, which `single_word` tests, needs Unicode tables; ASCII letters,
// digits and '_' plus every non-ASCII character that is not whitespace stand in for it. The
// difference is only non-ASCII punctuation next to a single_word token, which no shipped
// tokenizer has.
bool IsWordChar(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return !IsUnicodeWhitespace(c);
}

// The character that ends text[0, end).
char32_t LastChar(absl::string_view text, size_t end, size_t* start) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) {
    --begin;
  }
  size_t length = 0;
  char32_t c = DecodeUtf8(text, begin, &length);
  if (begin + length != end) {  // not a whole character: the last byte is one on its own
    begin = end - 1;
    c = 0xFFFD;
  }
  *start = begin;
  return c;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), by_first_byte_(256) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;  // an empty token can never be matched
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (std::vector<size_t>& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [this](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const AddedToken* AddedTokenMatcher::LongestAt(absl::string_view text, size_t pos) const {
  for (size_t index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const std::string& content = tokens_[index].content;
    if (text.substr(pos, content.size()) == content) return &tokens_[index];
  }
  return nullptr;
}

std::vector<TextPiece> AddedTokenMatcher::Split(absl::string_view text) const {
  std::vector<TextPiece> pieces;
  size_t done = 0;  // end of the last match
  size_t pos = 0;
  while (!tokens_.empty() && pos < text.size()) {
    const AddedToken* token = LongestAt(text, pos);
    if (token == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + token->content.size();
    pos = stop;  // the scan goes on after the match even when single_word discards it
    if (token->single_word) {
      size_t ignored = 0;
      const bool word_before = start > 0 && IsWordChar(LastChar(text, start, &ignored));
      const bool word_after = stop < text.size() && IsWordChar(DecodeUtf8(text, stop, &ignored));
      if (word_before || word_after) continue;
    }
    if (token->lstrip) {
      while (start > done) {
        size_t char_start = 0;
        if (!IsUnicodeWhitespace(LastChar(text, start, &char_start))) break;
        start = char_start;
      }
    }
    if (token->rstrip) {
      size_t length = 0;
      while (stop < text.size() && IsUnicodeWhitespace(DecodeUtf8(text, stop, &length))) {
        stop += length;
      }
      pos = stop;
    }
    if (start > done) pieces.push_back(TextPiece{text.substr(done, start - done), -1});
    pieces.push_back(TextPiece{text.substr(start, stop - start), token->id});
    done = stop;
  }
  if (done < text.size()) pieces.push_back(TextPiece{text.substr(done), -1});
  return pieces;
}

}  // namespace flame::worker
