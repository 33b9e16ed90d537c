// Reads a Hugging Face tokenizer.json into a BpeTokenizer. Every construct this code does not
// implement is refused by name when the file is loaded, never silently tokenized differently.
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/data/bpe_tokenizer.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;

// Errors name the file and the JSON key they are about.
class Context {
 public:
  explicit Context(std::string file) : file_(std::move(file)) {}
  absl::Status Error(const std::string& key, const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", key, " ", why));
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

bool IsSet(const Json& object, const char* key) {
  return object.is_object() && object.contains(key) && !object.at(key).is_null();
}

absl::Status ReadBool(const Context& ctx, const Json& object, const char* key,
                      const std::string& where, bool* out) {
  if (!IsSet(object, key)) return absl::OkStatus();
  if (!object.at(key).is_boolean()) return ctx.Error(where + "." + key, "must be true or false");
  *out = object.at(key).get<bool>();
  return absl::OkStatus();
}

absl::Status ReadString(const Context& ctx, const Json& object, const char* key,
                        const std::string& where, std::string* out) {
  if (!IsSet(object, key)) return absl::OkStatus();
  if (!object.at(key).is_string()) return ctx.Error(where + "." + key, "must be a string");
  *out = object.at(key).get<std::string>();
  return absl::OkStatus();
}

// The "type" of a component, which every component of a serialized tokenizer carries.
absl::StatusOr<std::string> TypeOf(const Context& ctx, const Json& object,
                                   const std::string& where) {
  if (!object.is_object() || !IsSet(object, "type") || !object.at("type").is_string()) {
    return ctx.Error(where, "must be an object with a \"type\"");
  }
  return object.at("type").get<std::string>();
}

absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const Context& ctx,
                                                               const Json& merge, size_t rank) {
  const std::string where = absl::StrCat("model.merges[", rank, "]");
  // Older files write "left right", newer ones ["left", "right"] (tokens may contain spaces).
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      return ctx.Error(
          where, absl::StrCat("must be two tokens separated by one space (got \"", text, "\")"));
    }
    return std::make_pair(text.substr(0, space), text.substr(space + 1));
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return ctx.Error(where,
                   absl::StrCat("must be \"a b\" or [\"a\", \"b\"] (got ", merge.dump(), ")"));
}

absl::StatusOr<BpeModel> ParseModel(const Context& ctx, const Json& model) {
  FLAME_ASSIGN_OR_RETURN(const std::string type, TypeOf(ctx, model, "model"));
  if (type != "BPE") {
    return ctx.Error("model.type", absl::StrCat("\"", type, "\" is not supported (only BPE)"));
  }
  if (IsSet(model, "dropout") &&
      !(model.at("dropout").is_number() && model.at("dropout").get<double>() == 0.0)) {
    return ctx.Error("model.dropout", "is not supported: BPE dropout makes encoding random");
  }
  BpeModelOptions options;
  if (!IsSet(model, "vocab") || !model.at("vocab").is_object()) {
    return ctx.Error("model.vocab", "must be an object of token -> id");
  }
  for (const auto& [token, id] : model.at("vocab").items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return ctx.Error("model.vocab", absl::StrCat("id of \"", token, "\" must be an integer in ",
                                                   "[0, 2^31) (got ", id.dump(), ")"));
    }
    options.vocab.emplace_back(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  if (IsSet(model, "merges")) {
    const Json& merges = model.at("merges");
    if (!merges.is_array()) return ctx.Error("model.merges", "must be a list");
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      FLAME_ASSIGN_OR_RETURN(auto merge, ParseMerge(ctx, merges[rank], rank));
      options.merges.push_back(std::move(merge));
    }
  }
  std::string unk;
  FLAME_RETURN_IF_ERROR(ReadString(ctx, model, "unk_token", "model", &unk));
  if (IsSet(model, "unk_token")) options.unk_token = unk;
  FLAME_RETURN_IF_ERROR(ReadString(ctx, model, "continuing_subword_prefix", "model",
                                   &options.continuing_subword_prefix));
  FLAME_RETURN_IF_ERROR(
      ReadString(ctx, model, "end_of_word_suffix", "model", &options.end_of_word_suffix));
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, model, "fuse_unk", "model", &options.fuse_unk));
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, model, "byte_fallback", "model", &options.byte_fallback));
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, model, "ignore_merges", "model", &options.ignore_merges));
  absl::StatusOr<BpeModel> built = BpeModel::Create(std::move(options));
  if (!built.ok()) return ctx.Error("model", std::string(built.status().message()));
  return built;
}

// True for NFC, false for none; anything else is refused.
absl::StatusOr<bool> ParseNormalizer(const Context& ctx, const Json& normalizer,
                                     const std::string& where) {
  if (normalizer.is_null()) return false;
  FLAME_ASSIGN_OR_RETURN(const std::string type, TypeOf(ctx, normalizer, where));
  if (type == "NFC") return true;
  if (type == "Sequence" && IsSet(normalizer, "normalizers") &&
      normalizer.at("normalizers").is_array()) {
    bool nfc = false;
    for (size_t i = 0; i < normalizer.at("normalizers").size(); ++i) {
      FLAME_ASSIGN_OR_RETURN(bool step,
                             ParseNormalizer(ctx, normalizer.at("normalizers")[i],
                                             absl::StrCat(where, ".normalizers[", i, "]")));
      nfc = nfc || step;  // NFC is idempotent: once is as good as several times
    }
    return nfc;
  }
  return ctx.Error(where, absl::StrCat("type \"", type, "\" is not supported (only NFC or none)"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Context& ctx, const Json& pre,
                                                                const std::string& where);

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const Context& ctx, const Json& pre,
                                                         const std::string& where) {
  const Json pattern = IsSet(pre, "pattern") ? pre.at("pattern") : Json();
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> regex = absl::InvalidArgumentError("no pattern");
  if (IsSet(pattern, "Regex") && pattern.at("Regex").is_string()) {
    regex = Pcre2Regex::Compile(pattern.at("Regex").get<std::string>());
  } else if (IsSet(pattern, "String") && pattern.at("String").is_string()) {
    regex = Pcre2Regex::CompileLiteral(pattern.at("String").get<std::string>());
  } else {
    return ctx.Error(where + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
  }
  if (!regex.ok()) return ctx.Error(where + ".pattern", std::string(regex.status().message()));
  std::string behavior_name;
  FLAME_RETURN_IF_ERROR(ReadString(ctx, pre, "behavior", where, &behavior_name));
  absl::StatusOr<SplitBehavior> behavior = ParseSplitBehavior(behavior_name);
  if (!behavior.ok())
    return ctx.Error(where + ".behavior", std::string(behavior.status().message()));
  bool invert = false;
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, pre, "invert", where, &invert));
  return MakeSplitPreTokenizer(*std::move(regex), *behavior, invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseByteLevel(const Context& ctx, const Json& pre,
                                                             const std::string& where) {
  bool add_prefix_space = true;  // the defaults of `tokenizers`
  bool use_regex = true;
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, pre, "add_prefix_space", where, &add_prefix_space));
  FLAME_RETURN_IF_ERROR(ReadBool(ctx, pre, "use_regex", where, &use_regex));
  std::unique_ptr<Pcre2Regex> regex;
  if (use_regex) {
    FLAME_ASSIGN_OR_RETURN(regex, Pcre2Regex::Compile(kGpt2SplitPattern));
  }
  return MakeByteLevelPreTokenizer(add_prefix_space, std::move(regex));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Context& ctx, const Json& pre,
                                                                const std::string& where) {
  FLAME_ASSIGN_OR_RETURN(const std::string type, TypeOf(ctx, pre, where));
  if (type == "ByteLevel") return ParseByteLevel(ctx, pre, where);
  if (type == "Split") return ParseSplit(ctx, pre, where);
  if (type == "Digits") {
    // Digits are Unicode numerics (\p{N}), alone or in runs.
    bool individual = false;
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, pre, "individual_digits", where, &individual));
    FLAME_ASSIGN_OR_RETURN(std::unique_ptr<Pcre2Regex> regex,
                           Pcre2Regex::Compile(individual ? "\\p{N}" : "\\p{N}+"));
    return MakeSplitPreTokenizer(std::move(regex), SplitBehavior::kIsolated, false);
  }
  if (type == "Sequence" && IsSet(pre, "pretokenizers") && pre.at("pretokenizers").is_array()) {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < pre.at("pretokenizers").size(); ++i) {
      FLAME_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step,
                             ParsePreTokenizer(ctx, pre.at("pretokenizers")[i],
                                               absl::StrCat(where, ".pretokenizers[", i, "]")));
      steps.push_back(std::move(step));
    }
    return MakeSequencePreTokenizer(std::move(steps));
  }
  return ctx.Error(where, absl::StrCat("type \"", type,
                                       "\" is not supported (ByteLevel, Split, Digits or a "
                                       "Sequence of them)"));
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Context& ctx, const Json& list) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) return ctx.Error("added_tokens", "must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    const Json& entry = list[i];
    AddedToken token;
    if (!IsSet(entry, "content") || !entry.at("content").is_string()) {
      return ctx.Error(where + ".content", "must be a string");
    }
    token.content = entry.at("content").get<std::string>();
    if (token.content.empty()) return ctx.Error(where + ".content", "must not be empty");
    if (!IsSet(entry, "id") || !entry.at("id").is_number_integer() ||
        entry.at("id").get<int64_t>() < 0 || entry.at("id").get<int64_t>() > INT32_MAX) {
      return ctx.Error(where + ".id", "must be an integer in [0, 2^31)");
    }
    token.id = static_cast<int32_t>(entry.at("id").get<int64_t>());
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, entry, "special", where, &token.special));
    // `tokenizers` normalizes non-special added tokens unless told otherwise.
    token.normalized = !token.special;
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, entry, "normalized", where, &token.normalized));
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, entry, "single_word", where, &token.single_word));
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, entry, "lstrip", where, &token.lstrip));
    FLAME_RETURN_IF_ERROR(ReadBool(ctx, entry, "rstrip", where, &token.rstrip));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// Ids of one special token of a template ("special_tokens": {"<s>": {"ids": [1], ...}}).
absl::StatusOr<std::vector<int32_t>> TemplateTokenIds(const Context& ctx, const Json& processor,
                                                      const std::string& name,
                                                      const std::string& where) {
  const Json specials =
      IsSet(processor, "special_tokens") ? processor.at("special_tokens") : Json::object();
  if (!specials.is_object() || !specials.contains(name) || !IsSet(specials.at(name), "ids") ||
      !specials.at(name).at("ids").is_array()) {
    return ctx.Error(where, absl::StrCat("uses \"", name, "\", which special_tokens lacks"));
  }
  std::vector<int32_t> ids;
  for (const Json& id : specials.at(name).at("ids")) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return ctx.Error(where, absl::StrCat("special token \"", name, "\" has a bad id"));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// The special tokens that a post-processor puts before and after a single text.
absl::Status ParsePostProcessor(const Context& ctx, const Json& processor, const std::string& where,
                                std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (processor.is_null()) return absl::OkStatus();
  FLAME_ASSIGN_OR_RETURN(const std::string type, TypeOf(ctx, processor, where));
  if (type == "ByteLevel") return absl::OkStatus();  // only moves offsets, adds no token
  if (type == "Sequence" && IsSet(processor, "processors") &&
      processor.at("processors").is_array()) {
    for (size_t i = 0; i < processor.at("processors").size(); ++i) {
      FLAME_RETURN_IF_ERROR(ParsePostProcessor(ctx, processor.at("processors")[i],
                                               absl::StrCat(where, ".processors[", i, "]"), prefix,
                                               suffix));
    }
    return absl::OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // [cls] text [sep], each given as ["token", id].
    for (const char* key : {"cls", "sep"}) {
      const Json& pair = IsSet(processor, key) ? processor.at(key) : Json();
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer() ||
          pair[1].get<int64_t>() < 0 || pair[1].get<int64_t>() > INT32_MAX) {
        return ctx.Error(absl::StrCat(where, ".", key), "must be [\"token\", id]");
      }
      (std::string(key) == "cls" ? prefix : suffix)->push_back(pair[1].get<int32_t>());
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return ctx.Error(where, absl::StrCat("type \"", type,
                                         "\" is not supported (TemplateProcessing, ByteLevel, "
                                         "BertProcessing, RobertaProcessing or a Sequence)"));
  }
  const Json single = IsSet(processor, "single") ? processor.at("single") : Json();
  if (!single.is_array()) return ctx.Error(where + ".single", "must be a list");
  bool seen_text = false;
  for (const Json& item : single) {
    if (IsSet(item, "Sequence")) {
      if (seen_text) return ctx.Error(where + ".single", "has the text ($A) twice");
      seen_text = true;
    } else if (IsSet(item, "SpecialToken") && IsSet(item.at("SpecialToken"), "id") &&
               item.at("SpecialToken").at("id").is_string()) {
      FLAME_ASSIGN_OR_RETURN(
          std::vector<int32_t> ids,
          TemplateTokenIds(ctx, processor, item.at("SpecialToken").at("id").get<std::string>(),
                           where + ".single"));
      std::vector<int32_t>* side = seen_text ? suffix : prefix;
      side->insert(side->end(), ids.begin(), ids.end());
    } else {
      return ctx.Error(where + ".single", absl::StrCat("has an unknown item ", item.dump()));
    }
  }
  if (!seen_text) return ctx.Error(where + ".single", "has no $A (the text)");
  return absl::OkStatus();
}

// The id of a token by its text: an added token first, else the vocab.
int32_t FindTokenId(const BpeTokenizerParts& parts, const std::string& content) {
  for (const AddedToken& token : parts.added_tokens) {
    if (token.content == content) return token.id;
  }
  return parts.model.TokenId(content).value_or(-1);
}

// tokenizer_config.json's "bos_token"/"eos_token": a string, {"content": ...}, or null.
std::string ConfigToken(const Json& config, const char* key) {
  if (!IsSet(config, key)) return "";
  const Json& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (IsSet(value, "content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return "";
}

// BOS is what the template puts first: it is what Encode starts documents with, which is what
// varlen packing looks for. EOS comes from tokenizer_config.json where there is one, else from
// the template's end, else from the usual names of end-of-text tokens.
void ChooseBosEos(const Json& config, BpeTokenizerParts* parts) {
  parts->bos_id = parts->prefix_ids.empty() ? -1 : parts->prefix_ids.front();
  const std::string eos = ConfigToken(config, "eos_token");
  if (!eos.empty()) parts->eos_id = FindTokenId(*parts, eos);
  if (parts->eos_id < 0 && !parts->suffix_ids.empty()) parts->eos_id = parts->suffix_ids.back();
  for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"}) {
    if (parts->eos_id >= 0) break;
    parts->eos_id = FindTokenId(*parts, name);
  }
}

absl::StatusOr<Json> ReadJson(const std::string& path) {
  FLAME_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadBpeTokenizer(const std::string& path) {
  std::error_code ignored;
  const std::string file = std::filesystem::is_directory(path, ignored)
                               ? (std::filesystem::path(path) / "tokenizer.json").string()
                               : path;
  if (!PathExists(file)) {
    return absl::NotFoundError(
        file == path ? absl::StrCat("tokenizer file not found: ", path)
                     : absl::StrCat("tokenizer folder ", path, " has no tokenizer.json"));
  }
  FLAME_ASSIGN_OR_RETURN(const Json json, ReadJson(file));
  const Context ctx(file);
  BpeTokenizerParts parts;
  if (!IsSet(json, "model")) return ctx.Error("model", "is missing");
  FLAME_ASSIGN_OR_RETURN(parts.model, ParseModel(ctx, json.at("model")));
  const Json null;
  const auto field = [&](const char* key) -> const Json& {
    return IsSet(json, key) ? json.at(key) : null;
  };
  FLAME_ASSIGN_OR_RETURN(parts.nfc, ParseNormalizer(ctx, field("normalizer"), "normalizer"));
  if (!field("pre_tokenizer").is_null()) {
    FLAME_ASSIGN_OR_RETURN(parts.pre_tokenizer,
                           ParsePreTokenizer(ctx, field("pre_tokenizer"), "pre_tokenizer"));
  }
  FLAME_ASSIGN_OR_RETURN(parts.added_tokens, ParseAddedTokens(ctx, field("added_tokens")));
  FLAME_RETURN_IF_ERROR(ParsePostProcessor(ctx, field("post_processor"), "post_processor",
                                           &parts.prefix_ids, &parts.suffix_ids));
  // The decoder only matters for ids -> text, which training never does.
  Json config;
  const std::string config_path =
      (std::filesystem::path(file).parent_path() / "tokenizer_config.json").string();
  if (PathExists(config_path)) {
    FLAME_ASSIGN_OR_RETURN(config, ReadJson(config_path));
  }
  ChooseBosEos(config, &parts);
  return std::make_unique<BpeTokenizer>(std::move(parts));
}

}  // namespace flame::worker
