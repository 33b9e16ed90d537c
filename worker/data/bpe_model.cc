#include "worker/data/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/byte_level.h"

namespace flame::worker {

absl::StatusOr<BpeModel> BpeModel::Create(BpeModelOptions options) {
  BpeModel model;
  for (const auto& [token, id] : options.vocab) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab token \"", token, "\" has a negative id ", id));
    }
    model.vocab_[token] = id;
    model.max_id_ = std::max(model.max_id_, id);
  }
  for (size_t rank = 0; rank < options.merges.size(); ++rank) {
    const auto& [left, right] = options.merges[rank];
    const std::optional<int32_t> left_id = model.TokenId(left);
    const std::optional<int32_t> right_id = model.TokenId(right);
    const std::optional<int32_t> new_id = model.TokenId(left + right);
    if (!left_id || !right_id || !new_id) {
      const std::string& missing = !left_id ? left : !right_id ? right : left + right;
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " (\"", left, "\" \"", right,
                                                     "\") uses \"", missing,
                                                     "\", which is not in the vocab"));
    }
    // A repeated pair keeps its last rank, as a map built from the list in order would.
    model.merges_[PairKey(*left_id, *right_id)] = Merge{static_cast<int32_t>(rank), *new_id};
  }
  if (options.unk_token.has_value()) {
    model.unk_id_ = model.TokenId(*options.unk_token);
    if (!model.unk_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token \"", *options.unk_token, "\" is not in the vocab"));
    }
  }
  // The vocab and merges now live in the maps; the options keep only the settings.
  options.vocab.clear();
  options.merges.clear();
  model.options_ = std::move(options);
  return model;
}

std::optional<int32_t> BpeModel::TokenId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<BpeModel::Symbol> BpeModel::InitialSymbols(absl::string_view word) const {
  std::vector<Symbol> symbols;
  const auto add = [&symbols](int32_t id, size_t length) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, -1, length});
    if (index > 0) symbols[index - 1].next = index;
  };
  // A run of unknown characters waiting to be added (unk_length 0: none), so that fuse_unk can
  // grow it.
  size_t unk_length = 0;
  const auto flush_unk = [&] {
    if (unk_length > 0) add(*unk_id_, unk_length);
    unk_length = 0;
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = Utf8CharLength(word, pos);
    std::string piece(word.substr(pos, length));
    if (pos > 0) piece = options_.continuing_subword_prefix + piece;
    pos += length;
    if (pos == word.size()) piece += options_.end_of_word_suffix;
    if (std::optional<int32_t> id = TokenId(piece)) {
      flush_unk();
      add(*id, length);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (char c : piece) {
        std::optional<int32_t> id = TokenId(absl::StrFormat("<0x%02X>", static_cast<uint8_t>(c)));
        if (!id) break;
        bytes.push_back(*id);
      }
      // Only when every byte has a token; otherwise the character is unknown.
      if (bytes.size() == piece.size()) {
        for (int32_t id : bytes) add(id, 1);
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as `tokenizers` does
    if (!options_.fuse_unk) flush_unk();
    unk_length += length;
  }
  flush_unk();
  return symbols;
}

void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& symbols = *symbols_ptr;
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the pair's left symbol
    int32_t new_id;
  };
  // Lowest rank first, then leftmost.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const Merge* merge = FindMerge(symbols[pos].id, symbols[next].id)) {
      queue.push(Candidate{merge->rank, pos, merge->new_id});
    }
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push_pair(pos);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.length == 0 || left.next < 0) continue;
    // A stale entry: the pair at this position changed since it was queued.
    const Symbol& right = symbols[left.next];
    const Merge* current = FindMerge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;

    const int32_t right_index = left.next;
    left.id = top.new_id;
    left.length += right.length;
    left.next = right.next;
    symbols[right_index].length = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
}

void BpeModel::Tokenize(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (std::optional<int32_t> id = TokenId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols = InitialSymbols(word);
  MergeAll(&symbols);
  for (const Symbol& symbol : symbols) {
    if (symbol.length > 0) ids->push_back(symbol.id);
  }
}

}  // namespace flame::worker
