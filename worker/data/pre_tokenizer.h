// Pre-tokenizers of a tokenizer.json: they cut a text into the words that BPE then tokenizes one
// by one (merges never cross a word boundary).
//
// Supported, with the `tokenizers` library's semantics:
//   Split      a regex (or literal string) and a behaviour for the matches: Removed, Isolated,
//              MergedWithPrevious, MergedWithNext, Contiguous; `invert` swaps matches and gaps.
//   ByteLevel  optionally puts a space before each piece that lacks one (add_prefix_space), splits
//              with GPT-2's pattern (use_regex), then rewrites every byte as its stand-in
//              character (byte_level.h). Llama 3 and Qwen run Split with their own pattern first
//              and ByteLevel with use_regex false.
//   Sequence   the above, in order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/pcre2_regex.h"

namespace flame::worker {

// GPT-2's split pattern (contractions, letters, digits, other symbols, whitespace), which
// ByteLevel uses when use_regex is true.
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The behaviour named as in tokenizer.json ("Isolated", ...), or InvalidArgument.
absl::StatusOr<SplitBehavior> ParseSplitBehavior(const std::string& name);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by the pieces it splits into. Empty pieces are dropped.
  virtual absl::Status Apply(std::vector<std::string>* pieces) const = 0;
};

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::unique_ptr<Pcre2Regex> pattern,
                                                    SplitBehavior behavior, bool invert);
// `pattern` null means use_regex false.
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space,
                                                        std::unique_ptr<Pcre2Regex> pattern);
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps);

}  // namespace flame::worker
