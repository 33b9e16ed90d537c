#include "worker/data/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "worker/data/byte_level.h"

namespace flame::worker {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return absl::StrCat("code ", code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pcre2Regex>> Pcre2Regex::Compile(const std::string& pattern) {
  // UTF: the pattern and the text are UTF-8. UCP: \s, \w, \d and case folding are Unicode's.
  // MATCH_INVALID_UTF: a text with bad UTF-8 (plain-text corpora may have some) still matches;
  // the invalid bytes simply match nothing.
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("invalid regex \"", pattern, "\" at offset ",
                                                   offset, ": ", ErrorMessage(error)));
  }
  // The JIT is several times faster; where the platform lacks it pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Pcre2Regex>(new Pcre2Regex(code));
}

absl::StatusOr<std::unique_ptr<Pcre2Regex>> Pcre2Regex::CompileLiteral(const std::string& literal) {
  // \Q...\E quotes everything but a literal "\E", which is spelled \E\\E\Q.
  std::string pattern = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.compare(i, 2, "\\E") == 0) {
      pattern += "\\E\\\\E\\Q";
      ++i;
    } else {
      pattern += literal[i];
    }
  }
  pattern += "\\E";
  return Compile(pattern);
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(Code(code_)); }

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Pcre2Regex::FindAll(
    absl::string_view text) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
      pcre2_match_data_create_from_pattern(Code(code_), nullptr), pcre2_match_data_free);
  if (data == nullptr) return absl::ResourceExhaustedError("pcre2: out of memory");
  std::vector<std::pair<size_t, size_t>> spans;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(Code(code_), subject, text.size(), start, 0, data.get(), nullptr);
    // A long run of whitespace can exhaust the JIT's small default stack; the interpreter,
    // which keeps its backtracking state on the heap, finishes the match.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(Code(code_), subject, text.size(), start, PCRE2_NO_JIT, data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("pcre2 match: ", ErrorMessage(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      spans.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match: step over one character so that the scan moves on.
      if (begin >= text.size()) break;
      start = begin + Utf8CharLength(text, begin);
    }
  }
  return spans;
}

}  // namespace flame::worker
