// A compiled PCRE2 pattern that lists the spans it matches in a UTF-8 text.
//
// The pre-tokenizer patterns of byte-level BPE tokenizers need Unicode properties (\p{L}, \p{N}),
// Unicode-aware \s, lookahead (`\s+(?!\S)`) and case-insensitive groups; std::regex has none of
// these on UTF-8, and the `tokenizers` library runs them with Oniguruma. PCRE2 compiled with UTF
// and UCP gives the same matches for these patterns.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flame::worker {

class Pcre2Regex {
 public:
  // Compiles `pattern`; an invalid pattern is an InvalidArgument naming the error and offset.
  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> Compile(const std::string& pattern);
  // A pattern that matches `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> CompileLiteral(const std::string& literal);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // [begin, end) byte spans of the successive non-overlapping matches, left to right. Empty
  // matches are skipped. Safe to call from several threads at once.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(absl::string_view text) const;

 private:
  explicit Pcre2Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*, opaque here so that the header does not pull in pcre2.h
};

}  // namespace flame::worker
