// Test tokenizers and corpus helpers shared by the data pipeline tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "worker/data/tokenizer.h"

namespace flame::worker::testing {

// Words -> small ids, BOS 1 first: easy to predict by hand.
class WordTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const override {
    std::vector<int32_t> ids = {kBos};
    for (absl::string_view word : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      ids.push_back(10 + static_cast<int32_t>(std::hash<std::string>()(std::string(word)) % 90));
    }
    return ids;
  }
  int64_t VocabSize() const override { return 100; }
  int32_t BosId() const override { return kBos; }
  int32_t EosId() const override { return 2; }
  static constexpr int32_t kBos = 1;
};

// Like WordTokenizer but without BOS (GPT-2 style): documents are separated by the EOS (2) that
// EncodeDocument appends.
class EosOnlyTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const override {
    std::vector<int32_t> ids = *WordTokenizer().Encode(text);
    ids.erase(ids.begin());
    return ids;
  }
  int64_t VocabSize() const override { return 100; }
  int32_t BosId() const override { return -1; }
  int32_t EosId() const override { return kEos; }
  static constexpr int32_t kEos = 2;
};

// Every id names its document: "S I L" (source, document, length < 100) becomes BOS and the L
// ids 10 + S * 1000000 + I * 100 + j. Seen ids then tell exactly which tokens were read.
class LabelTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const override {
    const std::vector<std::string> parts = absl::StrSplit(text, ' ');
    int source = 0, doc = 0, length = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &source) ||
        !absl::SimpleAtoi(parts[1], &doc) || !absl::SimpleAtoi(parts[2], &length)) {
      return absl::InvalidArgumentError("not a label document: " + text);
    }
    std::vector<int32_t> ids = {kBos};
    for (int j = 0; j < length; ++j) ids.push_back(Id(source, doc, j));
    return ids;
  }
  static int32_t Id(int source, int doc, int j) { return 10 + source * 1000000 + doc * 100 + j; }
  int64_t VocabSize() const override { return int64_t{1} << 30; }
  int32_t BosId() const override { return kBos; }
  int32_t EosId() const override { return 2; }
  static constexpr int32_t kBos = 1;
};

inline std::string WriteFile(const std::string& dir, const std::string& name,
                             const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

inline int LabelLength(int doc) { return 1 + (doc * 7) % 13; }

// JSONL of `count` label documents of source `source` with lengths 1 + (i * 7) % 13.
inline std::string WriteLabelCorpus(const std::string& dir, const std::string& name, int source,
                                    int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    text += "{\"text\": \"" + std::to_string(source) + " " + std::to_string(i) + " " +
            std::to_string(LabelLength(i)) + "\"}\n";
  }
  return WriteFile(dir, name, text);
}

}  // namespace flame::worker::testing
