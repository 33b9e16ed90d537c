// flame-tokenize: turns a corpus of JSONL/plain-text files or folders into pre-tokenized token
// shards (worker/data/token_shards.h) that training.dataset can name instead of the text.
//
//   flame-tokenize --tokenizer tok.model --output data/shards [--shard-size 256M] [--workers 4]
//                  corpus.jsonl more/ ...
//
// A progress line (documents, tokens, MB/s, ETA) is drawn on stderr when it is a terminal; a
// summary line goes to stdout. Exit codes: 0 done; 2 bad usage or bad input (nothing is left at
// --output); 1 any other failure.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/data/corpus_tokenizer.h"
#include "worker/data/tokenizer.h"
#include "worker/data/tokenizer_factory.h"

namespace flame::worker {
namespace {

constexpr int kExitFailure = 1, kExitUsage = 2;

constexpr char kUsage[] =
    "usage: flame-tokenize --tokenizer MODEL --output FOLDER [--shard-size N] [--workers N] "
    "INPUT...\n"
    "  --tokenizer   the job's model.tokenizer_path: .model, tokenizer.json or a folder\n"
    "  --output      shard folder to create (must not exist)\n"
    "  --shard-size  ids per shard file, e.g. 64M (default 256M)\n"
    "  --workers     tokenizer threads (default: the number of cores)\n"
    "  INPUT         .jsonl/.json (\"text\" or \"content\") or plain-text files, or folders\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "flame-tokenize: %s\n%s", problem.c_str(), kUsage);
  return kExitUsage;
}

int Main(int argc, char** argv) {
  TokenizeOptions options;
  options.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string tokenizer_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!absl::StartsWith(arg, "--")) {
      options.inputs.push_back(arg);
      continue;
    }
    const size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Usage(absl::StrCat(arg, " needs a value"));
    }
    if (arg == "--tokenizer") {
      tokenizer_path = value;
    } else if (arg == "--output") {
      options.output = value;
    } else if (arg == "--shard-size") {
      const absl::StatusOr<int64_t> count = ParseCount(value);
      if (!count.ok()) return Usage(absl::StrCat("--shard-size: ", count.status().message()));
      options.shard_tokens = *count;
    } else if (arg == "--workers") {
      if (!absl::SimpleAtoi(value, &options.workers) || options.workers < 1 ||
          options.workers > 1024) {
        return Usage(absl::StrCat("--workers: \"", value, "\" is not a thread count (1-1024)"));
      }
    } else {
      return Usage(absl::StrCat("unknown flag ", arg));
    }
  }
  if (tokenizer_path.empty()) return Usage("--tokenizer is required");
  if (options.output.empty()) return Usage("--output is required");
  if (options.inputs.empty()) return Usage("no input files or folders");

  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "flame-tokenize: %s\n", std::string(tokenizer.status().message()).c_str());
    return kExitUsage;
  }
  options.tokenizer_name = tokenizer_path.substr(tokenizer_path.find_last_of('/') + 1);
  options.progress = ::isatty(STDERR_FILENO) == 1;
  const absl::StatusOr<TokenizeSummary> summary = TokenizeCorpus(**tokenizer, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "flame-tokenize: %s\n", std::string(summary.status().message()).c_str());
    const absl::StatusCode code = summary.status().code();
    const bool bad_input = code == absl::StatusCode::kInvalidArgument ||
                           code == absl::StatusCode::kNotFound ||
                           code == absl::StatusCode::kAlreadyExists;
    return bad_input ? kExitUsage : kExitFailure;
  }
  std::printf("wrote %lld documents, %lld tokens in %lld shard(s) to %s (%.1f MB in %.1f s)\n",
              static_cast<long long>(summary->documents), static_cast<long long>(summary->tokens),
              static_cast<long long>(summary->shards), options.output.c_str(),
              static_cast<double>(summary->input_bytes) / 1e6, summary->seconds);
  return 0;
}

}  // namespace
}  // namespace flame::worker

int main(int argc, char** argv) { return flame::worker::Main(argc, argv); }
