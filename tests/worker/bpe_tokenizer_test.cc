// The pieces of tokenizer.json byte-level BPE: the byte alphabet, merge order, pre-tokenizer
// splits, added tokens, templates, and the errors for what flame does not implement. (The whole
// tokenizers against the Python references: tokenizer_reference_test.cc.)
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "worker/data/added_tokens.h"
#include "worker/data/bpe_model.h"
#include "worker/data/byte_level.h"
#include "worker/data/pre_tokenizer.h"
#include "worker/data/tokenizer_factory.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;
using testing::DemoData;
using testing::TempDir;

// A byte-level tokenizer.json whose vocab is the given tokens (ids in order) and no pre-tokenizer
// beyond ByteLevel without regex, so that merges alone decide.
Json SmallTokenizer(const std::vector<std::string>& vocab, const Json& merges) {
  Json json;
  json["model"] = {{"type", "BPE"}, {"vocab", Json::object()}, {"merges", merges}};
  for (size_t i = 0; i < vocab.size(); ++i) json["model"]["vocab"][vocab[i]] = i;
  json["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  json["added_tokens"] = Json::array();
  json["normalizer"] = nullptr;
  json["post_processor"] = nullptr;
  return json;
}

std::string WriteJson(const TempDir& dir, const Json& json,
                      const std::string& name = "tokenizer.json") {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << json.dump();
  return path;
}

std::vector<int32_t> EncodeWith(const Json& json, const std::string& text) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(WriteJson(dir, json));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return {};
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// The error LoadTokenizer gives for `json`, which must fail.
std::string LoadError(const Json& json) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(WriteJson(dir, json));
  EXPECT_FALSE(tokenizer.ok());
  return tokenizer.ok() ? "" : std::string(tokenizer.status().message());
}

TEST(ByteLevel, PrintableBytesStandForThemselvesAndTheRestMoveAbove255) {
  EXPECT_EQ(ByteLevelCodePoint('!'), U'!');
  EXPECT_EQ(ByteLevelCodePoint('~'), U'~');
  EXPECT_EQ(ByteLevelCodePoint(0xA1), U'\u00A1');
  EXPECT_EQ(ByteLevelCodePoint(0x00), U'\u0100');
  EXPECT_EQ(ByteLevelCodePoint('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteLevelCodePoint(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(ByteLevelCodePoint(0x7F), U'\u0121');
  EXPECT_EQ(ByteLevelCodePoint(0xAD), U'\u0143');      // soft hyphen, the last one moved
  EXPECT_EQ(ToByteLevel(" é"), "\u0120\u00C3\u00A9");  // é is bytes C3 A9
}

TEST(ByteLevel, EveryByteHasItsOwnCharacter) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(ByteLevelCodePoint(static_cast<uint8_t>(b)));
  EXPECT_EQ(seen.size(), 256u);
}

TEST(BpeModel, AppliesTheLowestRankMergeFirst) {
  const Json vocab_ab_first =
      SmallTokenizer({"a", "b", "c", "ab", "bc", "abc"}, Json::array({"a b", "b c", "ab c"}));
  EXPECT_EQ(EncodeWith(vocab_ab_first, "abc"), std::vector<int32_t>({5}));
  const Json bc_first =
      SmallTokenizer({"a", "b", "c", "ab", "bc", "abc"}, Json::array({"b c", "a b", "ab c"}));
  // "b c" wins, and nothing merges "a" with "bc".
  EXPECT_EQ(EncodeWith(bc_first, "abc"), std::vector<int32_t>({0, 4}));
}

TEST(BpeModel, BreaksTiesBetweenEqualPairsLeftmostFirst) {
  const Json json = SmallTokenizer({"a", "aa"}, Json::array({"a a"}));
  EXPECT_EQ(EncodeWith(json, "aaa"), std::vector<int32_t>({1, 0}));
  EXPECT_EQ(EncodeWith(json, "aaaa"), std::vector<int32_t>({1, 1}));
}

TEST(BpeModel, ReadsMergesAsStringsAndAsPairs) {
  const std::vector<std::string> vocab = {"\u0120", "h", "i", "hi", "\u0120hi"};
  const Json strings = SmallTokenizer(vocab, Json::array({"h i", "\u0120 hi"}));
  const Json pairs =
      SmallTokenizer(vocab, Json::array({Json::array({"h", "i"}), Json::array({"\u0120", "hi"})}));
  EXPECT_EQ(EncodeWith(strings, " hi"), std::vector<int32_t>({4}));
  EXPECT_EQ(EncodeWith(pairs, " hi"), std::vector<int32_t>({4}));
}

TEST(BpeModel, IgnoreMergesTakesAWordThatIsInTheVocabWhole) {
  // No merge builds "abc", but the vocab has it.
  Json json = SmallTokenizer({"a", "b", "c", "ab", "abc"}, Json::array({"a b"}));
  EXPECT_EQ(EncodeWith(json, "abc"), std::vector<int32_t>({3, 2}));
  json["model"]["ignore_merges"] = true;
  EXPECT_EQ(EncodeWith(json, "abc"), std::vector<int32_t>({4}));
}

TEST(BpeModel, UnknownCharactersBecomeUnkOrAreDropped) {
  Json json = SmallTokenizer({"<unk>", "a"}, Json::array());
  EXPECT_EQ(EncodeWith(json, "abba"), std::vector<int32_t>({1, 1}));
  json["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(EncodeWith(json, "abba"), std::vector<int32_t>({1, 0, 0, 1}));
  json["model"]["fuse_unk"] = true;
  EXPECT_EQ(EncodeWith(json, "abba"), std::vector<int32_t>({1, 0, 1}));
}

TEST(PreTokenizer, Gpt2PatternKeepsTheSpaceWithTheNextWordAndTheLastOfARun) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> regex = Pcre2Regex::Compile(kGpt2SplitPattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::unique_ptr<PreTokenizer> split =
      MakeSplitPreTokenizer(*std::move(regex), SplitBehavior::kIsolated, false);
  std::vector<std::string> pieces = {"Hello world's   3.5 café!\n"};
  ASSERT_TRUE(split->Apply(&pieces).ok());
  EXPECT_EQ(pieces, std::vector<std::string>(
                        {"Hello", " world", "'s", "  ", " 3", ".", "5", " café", "!", "\n"}));
}

TEST(PreTokenizer, SplitBehaviorsPlaceTheMatches) {
  const auto run = [](SplitBehavior behavior, bool invert) {
    absl::StatusOr<std::unique_ptr<Pcre2Regex>> regex = Pcre2Regex::CompileLiteral("-");
    EXPECT_TRUE(regex.ok());
    std::vector<std::string> pieces = {"a-b--c-"};
    EXPECT_TRUE(MakeSplitPreTokenizer(*std::move(regex), behavior, invert)->Apply(&pieces).ok());
    return pieces;
  };
  // What `tokenizers` gives for Split("-", behavior, invert) on "a-b--c-".
  using V = std::vector<std::string>;
  EXPECT_EQ(run(SplitBehavior::kRemoved, false), V({"a", "b", "c"}));
  EXPECT_EQ(run(SplitBehavior::kRemoved, true), V({"-", "-", "-", "-"}));
  EXPECT_EQ(run(SplitBehavior::kIsolated, false), V({"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(run(SplitBehavior::kIsolated, true), V({"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithPrevious, false), V({"a-", "b-", "-", "c-"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithPrevious, true), V({"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithNext, false), V({"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithNext, true), V({"a-", "b-", "-", "c-"}));
  EXPECT_EQ(run(SplitBehavior::kContiguous, false), V({"a", "-", "b", "--", "c", "-"}));
  EXPECT_EQ(run(SplitBehavior::kContiguous, true), V({"a", "-", "b", "--", "c", "-"}));
}

TEST(PreTokenizer, RegexesAreUnicodeAware) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> regex =
      Pcre2Regex::Compile(R"((?i:'s|'ll)|\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+)");
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::string> pieces = {"日本'S 12345\u3000x"};
  ASSERT_TRUE(
      MakeSplitPreTokenizer(*std::move(regex), SplitBehavior::kRemoved, true)->Apply(&pieces).ok());
  // Inverted Removed keeps the matches only.
  EXPECT_EQ(pieces, std::vector<std::string>({"日本", "'S", " ", "123", "45", "\u3000", "x"}));
}

TEST(PreTokenizer, BadRegexIsAnErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> regex = Pcre2Regex::Compile("(unclosed");
  ASSERT_FALSE(regex.ok());
  EXPECT_NE(regex.status().message().find("(unclosed"), std::string::npos);
}

TEST(AddedTokens, LongestLeftmostMatchWinsAndStripsWhitespaceWhenAsked) {
  AddedToken s{"<s>", 1, true};
  AddedToken sep{"<sep>", 2, true};
  AddedToken mask{"<mask>", 3, true};
  mask.lstrip = true;
  AddedTokenMatcher matcher({s, sep, mask});
  std::vector<std::pair<std::string, int32_t>> got;
  for (const TextPiece& piece : matcher.Split("a<sep><s>b  <mask> c<s")) {
    got.emplace_back(std::string(piece.text), piece.id);
  }
  const std::vector<std::pair<std::string, int32_t>> want = {
      {"a", -1}, {"<sep>", 2}, {"<s>", 1}, {"b", -1}, {"  <mask>", 3}, {" c<s", -1}};
  EXPECT_EQ(got, want);
}

TEST(AddedTokens, SingleWordTokensDoNotMatchInsideWords) {
  AddedToken token{"cat", 7, false};
  token.single_word = true;
  AddedTokenMatcher matcher({token});
  std::vector<int32_t> ids;
  for (const TextPiece& piece : matcher.Split("cat concat cats cat")) ids.push_back(piece.id);
  EXPECT_EQ(ids, std::vector<int32_t>({7, -1, 7}));
}

TEST(BpeTokenizer, SpecialTokensInTextAreNeverSplitAndTheTemplateAddsBos) {
  Json json = SmallTokenizer({"<s>", "</s>", "a", "\u0120"}, Json::array());
  json["added_tokens"] =
      Json::array({{{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                   {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
  EXPECT_EQ(EncodeWith(json, "a</s> a"), std::vector<int32_t>({0, 2, 1, 3, 2, 1}));
  EXPECT_EQ(EncodeWith(json, ""), std::vector<int32_t>({0, 1}));

  TempDir dir;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(WriteJson(dir, json));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->BosId(), 0);
  EXPECT_EQ((*tokenizer)->EosId(), 1);
  EXPECT_EQ((*tokenizer)->VocabSize(), 4);
}

TEST(BpeTokenizer, DemoTokenizersReportTheirSpecialIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> gpt2 =
      LoadTokenizer(DemoData("fortunes-gpt2/tokenizer.json"));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ((*gpt2)->BosId(), 0);         // <s>
  EXPECT_EQ((*gpt2)->EosId(), 2);         // </s>
  EXPECT_EQ((*gpt2)->VocabSize(), 2049);  // 2048 trained + <mask>
  absl::StatusOr<std::unique_ptr<Tokenizer>> llama3 = LoadTokenizer(DemoData("fortunes-llama3"));
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ((*llama3)->BosId(), 0);  // <|begin_of_text|>
  EXPECT_EQ((*llama3)->EosId(), 1);  // <|end_of_text|>, from tokenizer_config.json
  absl::StatusOr<std::vector<int32_t>> ids = (*llama3)->Encode("Hello");
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ(ids->front(), 0);
}

TEST(BpeTokenizer, UnsupportedConstructsAreRefusedByName) {
  const Json base = SmallTokenizer({"a"}, Json::array());
  Json json = base;
  json["model"]["type"] = "WordPiece";
  EXPECT_NE(LoadError(json).find("\"WordPiece\" is not supported"), std::string::npos);
  json = base;
  json["model"]["type"] = "Unigram";
  EXPECT_NE(LoadError(json).find("\"Unigram\" is not supported"), std::string::npos);
  json = base;
  json["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(LoadError(json).find("pre_tokenizer type \"Whitespace\""), std::string::npos);
  json = base;
  json["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", Json::array({{{"type", "NFC"}}, {{"type", "Lowercase"}}})}};
  EXPECT_NE(LoadError(json).find("normalizer.normalizers[1] type \"Lowercase\""),
            std::string::npos);
  json = base;
  json["post_processor"] = {{"type", "Fancy"}};
  EXPECT_NE(LoadError(json).find("post_processor type \"Fancy\""), std::string::npos);
  json = base;
  json["model"]["dropout"] = 0.1;
  EXPECT_NE(LoadError(json).find("model.dropout"), std::string::npos);
}

TEST(BpeTokenizer, BrokenFilesAreErrorsNamingTheProblem) {
  Json json = SmallTokenizer({"a", "b"}, Json::array({"a b"}));
  EXPECT_NE(LoadError(json).find("\"ab\", which is not in the vocab"), std::string::npos);
  json = SmallTokenizer({"a", "b", "ab"}, Json::array({"a b c"}));
  EXPECT_NE(LoadError(json).find("model.merges[0]"), std::string::npos);
  json = SmallTokenizer({"a"}, Json::array());
  json["model"]["unk_token"] = "<unk>";
  EXPECT_NE(LoadError(json).find("unk_token \"<unk>\" is not in the vocab"), std::string::npos);
  json = SmallTokenizer({"a"}, Json::array());
  json["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(LoadError(json).find("pre_tokenizer.pattern"), std::string::npos);

  TempDir dir;
  const std::string garbage = dir.path() + "/tokenizer.json";
  std::ofstream(garbage) << "{not json";
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(garbage);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("not a JSON object"), std::string::npos);
}

TEST(TokenizerFactory, ChoosesTheImplementationByPath) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> spm = LoadTokenizer(DemoData("fortunes.model"));
  ASSERT_TRUE(spm.ok()) << spm.status();
  EXPECT_EQ((*spm)->VocabSize(), 2048);
  EXPECT_EQ((*spm)->BosId(), 1);

  TempDir dir;
  const std::string other = dir.path() + "/vocab.txt";
  std::ofstream(other) << "a\n";
  absl::StatusOr<std::unique_ptr<Tokenizer>> wrong = LoadTokenizer(other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not a SentencePiece .model file, a tokenizer.json"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<Tokenizer>> empty_folder = LoadTokenizer(dir.path());
  ASSERT_FALSE(empty_folder.ok());
  EXPECT_NE(empty_folder.status().message().find("neither tokenizer.json nor tokenizer.model"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<Tokenizer>> missing = LoadTokenizer(dir.path() + "/nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flame::worker
