// Our tokenizers against the reference implementations: every text of a shared corpus must give
// exactly the ids that Python's `tokenizers` (tokenizer.json) and `sentencepiece` (.model) give,
// special tokens included. The corpus is the demo corpus's held-out documents plus
// tokenizer_hard_cases.jsonl (Unicode, emoji, CJK, combining marks, digit runs, contractions,
// whitespace runs, special tokens inside text, the empty string).
//
// The Python side runs from here (tokenizer_reference.py), with the pinned packages that
// deploy/install-deps.sh puts in FLAME_PYTHON_DIR; a missing package fails the test, it does not
// skip it, so that CI always compares.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "worker/data/document_reader.h"
#include "worker/data/tokenizer_factory.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;
using testing::DemoData;
using testing::SourcePath;
using testing::TempDir;

std::vector<std::string> CorpusTexts() {
  std::vector<std::string> texts;
  absl::StatusOr<DocumentReader> reader = DocumentReader::Open({DemoData("fortunes-valid.jsonl")});
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::string text;
  while (reader.ok()) {
    absl::StatusOr<bool> found = reader->Next(&text);
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok() || !*found) break;
    texts.push_back(text);
  }
  EXPECT_GT(texts.size(), 100u);
  // Read directly rather than through DocumentReader, which would leave out the empty text.
  std::ifstream cases(SourcePath("tests/worker/tokenizer_hard_cases.jsonl"));
  std::string line;
  while (std::getline(cases, line)) texts.push_back(Json::parse(line).at("text"));
  EXPECT_GT(texts.size(), 140u);
  return texts;
}

// Runs tokenizer_reference.py; the ids of each text, or a failure with the script's stderr.
std::vector<std::vector<int32_t>> ReferenceIds(const std::string& kind, const std::string& model,
                                               const std::vector<std::string>& texts) {
  TempDir dir;
  const std::string input = dir.path() + "/texts.jsonl";
  const std::string output = dir.path() + "/ids.jsonl";
  const std::string errors = dir.path() + "/stderr.txt";
  {
    std::ofstream out(input, std::ios::binary);
    for (const std::string& text : texts) out << Json(text).dump() << "\n";
  }
  const std::string command =
      absl::StrCat("PYTHONPATH='", FLAME_PYTHON_DIR, "' python3 '",
                   SourcePath("tests/worker/tokenizer_reference.py"), "' ", kind, " '", model,
                   "' '", input, "' '", output, "' 2>'", errors, "'");
  const int rc = std::system(command.c_str());
  std::stringstream stderr_text;
  stderr_text << std::ifstream(errors).rdbuf();
  EXPECT_EQ(rc, 0) << command << "\n"
                   << stderr_text.str()
                   << "\n(the pinned Python packages come from deploy/install-deps.sh)";
  std::vector<std::vector<int32_t>> ids;
  std::ifstream in(output);
  std::string line;
  while (std::getline(in, line)) ids.push_back(Json::parse(line).get<std::vector<int32_t>>());
  return ids;
}

// Encodes every text with our tokenizer and the reference; reports the first few differences.
// `reference_file` is what the Python side loads: `path` itself, or the file in a folder.
void ExpectSameIds(const std::string& kind, const std::string& path,
                   const std::string& reference_file) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::string> texts = CorpusTexts();
  const std::vector<std::vector<int32_t>> expected = ReferenceIds(kind, reference_file, texts);
  ASSERT_EQ(expected.size(), texts.size());
  int mismatches = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(texts[i]);
    ASSERT_TRUE(ids.ok()) << ids.status();
    tokens += static_cast<int64_t>(ids->size());
    if (*ids == expected[i]) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << "text " << i << " " << Json(texts[i]).dump() << "\n  ours:      ["
                    << absl::StrJoin(*ids, ", ") << "]\n  reference: ["
                    << absl::StrJoin(expected[i], ", ") << "]";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << texts.size() << " texts";
  EXPECT_GT(tokens, 10000);  // the comparison really covered the corpus
}

TEST(TokenizerReference, Gpt2StyleTokenizerJsonMatchesHuggingFaceTokenizers) {
  const std::string file = DemoData("fortunes-gpt2/tokenizer.json");
  ExpectSameIds("hf", file, file);
}

TEST(TokenizerReference, Llama3StyleTokenizerFolderMatchesHuggingFaceTokenizers) {
  ExpectSameIds("hf", DemoData("fortunes-llama3"), DemoData("fortunes-llama3/tokenizer.json"));
}

TEST(TokenizerReference, SentencePieceModelMatchesPythonSentencePiece) {
  ExpectSameIds("spm", DemoData("fortunes.model"), DemoData("fortunes.model"));
}

}  // namespace
}  // namespace flame::worker
