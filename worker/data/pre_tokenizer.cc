#include "worker/data/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/byte_level.h"

namespace flame::worker {
namespace {

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Matches and the gaps between them, covering `text` in order.
absl::StatusOr<std::vector<Span>> MatchesAndGaps(const Pcre2Regex& pattern,
                                                 absl::string_view text) {
  using MatchList = std::vector<std::pair<size_t, size_t>>;
  FLAME_ASSIGN_OR_RETURN(MatchList matches, pattern.FindAll(text));
  std::vector<Span> spans;
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > previous) spans.push_back(Span{previous, begin, false});
    spans.push_back(Span{begin, end, true});
    previous = end;
  }
  if (previous < text.size()) spans.push_back(Span{previous, text.size(), false});
  return spans;
}

// Applies a split behaviour to the spans: the result's spans are the output pieces.
std::vector<Span> Combine(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kRemoved:
      for (const Span& span : spans) {
        if (!span.is_match) out.push_back(span);
      }
      return out;
    case SplitBehavior::kMergedWithPrevious:
      // A match joins the piece before it (a run of matches: only the first joins).
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !out.empty()) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = span.is_match;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      // The mirror image: a match joins the piece after it.
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      return out;
    case SplitBehavior::kContiguous:
      // Runs of matches become one piece, and so do runs of gaps.
      for (const Span& span : spans) {
        if (!out.empty() && span.is_match == previous_match) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = span.is_match;
      }
      return out;
  }
  return spans;
}

absl::Status SplitPieces(const Pcre2Regex& pattern, SplitBehavior behavior, bool invert,
                         std::vector<std::string>* pieces) {
  std::vector<std::string> out;
  for (const std::string& piece : *pieces) {
    FLAME_ASSIGN_OR_RETURN(std::vector<Span> spans, MatchesAndGaps(pattern, piece));
    if (invert) {
      for (Span& span : spans) span.is_match = !span.is_match;
    }
    for (const Span& span : Combine(spans, behavior)) {
      if (span.end > span.begin) out.push_back(piece.substr(span.begin, span.end - span.begin));
    }
  }
  *pieces = std::move(out);
  return absl::OkStatus();
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Pcre2Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  absl::Status Apply(std::vector<std::string>* pieces) const override {
    return SplitPieces(*pattern_, behavior_, invert_, pieces);
  }

 private:
  std::unique_ptr<Pcre2Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Pcre2Regex> pattern)
      : add_prefix_space_(add_prefix_space), pattern_(std::move(pattern)) {}

  absl::Status Apply(std::vector<std::string>* pieces) const override {
    if (add_prefix_space_) {
      for (std::string& piece : *pieces) {
        if (piece.empty() || piece[0] != ' ') piece.insert(0, 1, ' ');
      }
    }
    if (pattern_ != nullptr) {
      FLAME_RETURN_IF_ERROR(
          SplitPieces(*pattern_, SplitBehavior::kIsolated, /*invert=*/false, pieces));
    }
    for (std::string& piece : *pieces) piece = ToByteLevel(piece);
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Pcre2Regex> pattern_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}

  absl::Status Apply(std::vector<std::string>* pieces) const override {
    for (const std::unique_ptr<PreTokenizer>& step : steps_) {
      FLAME_RETURN_IF_ERROR(step->Apply(pieces));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

absl::StatusOr<SplitBehavior> ParseSplitBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown Split behavior \"", name,
                   "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
                   "Contiguous)"));
}

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::unique_ptr<Pcre2Regex> pattern,
                                                    SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior, invert);
}

std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space,
                                                        std::unique_ptr<Pcre2Regex> pattern) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(pattern));
}

std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps) {
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

}  // namespace flame::worker
