// Which tokenizer a job's model.tokenizer_path names. One rule, shared by the job-spec check
// (flamed, flamectl) and the worker that loads the tokenizer, so that a path accepted at submit
// time is one the worker can load.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace flame {

enum class TokenizerFormat {
  kSentencePiece,  // a SentencePiece .model file (Llama 2, Mistral)
  kHuggingFace,    // a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen)
};

struct TokenizerFile {
  TokenizerFormat format;
  std::string path;  // the file to load
};

// `path` is a .model file, a .json file (tokenizer.json), or a folder holding tokenizer.json
// (preferred, as Hugging Face tokenizer folders have it) or tokenizer.model. Anything else is an
// InvalidArgument, a missing path NotFound, each naming the path.
absl::StatusOr<TokenizerFile> ResolveTokenizerPath(const std::string& path);

}  // namespace flame
