// The BPE model of a Hugging Face tokenizer.json: one pre-tokenized word -> token ids.
//
// A word starts as its characters (for byte-level tokenizers: the stand-in characters of its
// bytes), each looked up in the vocabulary. Then adjacent pairs are merged, always the pair with
// the lowest merge rank first and, between equal ranks, the leftmost, until no listed pair is left.
// This is the order the `tokenizers` library applies merges in (a priority queue keyed by rank,
// then position), so the ids match it exactly, including for merge lists whose ranks are not
// consistent with the order tokens were built in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flame::worker {

struct BpeModelOptions {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token;  // without one, characters outside the vocab are dropped
  bool ignore_merges = false;  // a word that is itself in the vocab is one token (Llama 3)
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens where they exist
  bool fuse_unk = false;       // consecutive unknown characters become one unk token
  std::string continuing_subword_prefix;  // put before every character but the first
  std::string end_of_word_suffix;         // put after the last character
};

class BpeModel {
 public:
  BpeModel() = default;  // empty: no vocab, every word gives no ids
  // Checks that every merge's parts and result, and the unk token, are in the vocabulary.
  static absl::StatusOr<BpeModel> Create(BpeModelOptions options);

  // Appends the ids of `word` to *ids. Safe to call from several threads at once.
  void Tokenize(absl::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenId(absl::string_view token) const;
  int32_t MaxId() const { return max_id_; }  // -1 for an empty vocabulary

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;   // index of the previous live symbol, -1 at the start
    int32_t next;   // index of the next live symbol, -1 at the end
    size_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
  };

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* FindMerge(int32_t left, int32_t right) const;
  // The word's characters as symbols (with prefix/suffix, byte fallback and unk handling).
  std::vector<Symbol> InitialSymbols(absl::string_view word) const;
  void MergeAll(std::vector<Symbol>* symbols) const;

  BpeModelOptions options_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  int32_t max_id_ = -1;
};

}  // namespace flame::worker
