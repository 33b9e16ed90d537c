#include "worker/data/corpus_tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "worker/data/document_reader.h"
#include "worker/data/document_source.h"
#include "worker/data/token_shard_writer.h"
#include "worker/data/tokenizer_pool.h"

namespace flame::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunkDocuments = 256;  // texts per tokenizer job

std::string Grouped(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// One line on stderr, redrawn in place ("\r") at most ten times a second.
class ProgressLine {
 public:
  ProgressLine(bool enabled, int64_t total_bytes)
      : enabled_(enabled), total_bytes_(total_bytes), start_(Clock::now()) {}

  void Update(const TokenizeSummary& s, int64_t bytes_read, bool final) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double seconds = std::max(1e-6, std::chrono::duration<double>(now - start_).count());
    const double fraction =
        total_bytes_ > 0 ? std::min(1.0, static_cast<double>(bytes_read) / total_bytes_) : 1.0;
    const double eta = fraction > 0 ? seconds * (1 - fraction) / fraction : 0;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    const auto eta_s = static_cast<int64_t>(eta);
    std::fprintf(stderr, "\r[%s%s] %3.0f%%  %s docs  %s tokens  %.1f MB/s  ETA %02d:%02d:%02d ",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 100 * fraction, Grouped(s.documents).c_str(), Grouped(s.tokens).c_str(),
                 static_cast<double>(bytes_read) / 1e6 / seconds, static_cast<int>(eta_s / 3600),
                 static_cast<int>(eta_s / 60 % 60), static_cast<int>(eta_s % 60));
    if (final) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  int64_t total_bytes_;
  Clock::time_point start_;
  Clock::time_point last_;
};

}  // namespace

absl::StatusOr<int64_t> ParseCount(const std::string& text) {
  std::string digits = text;
  int64_t unit = 1;
  const size_t power = digits.empty() ? std::string::npos
                                      : std::string("KMG").find(absl::ascii_toupper(digits.back()));
  if (power != std::string::npos) {
    unit = int64_t{1} << (10 * (power + 1));
    digits.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value <= 0 || value > (int64_t{1} << 50) / unit) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a positive count (e.g. 1000, 64K, 256M)"));
  }
  return value * unit;
}

absl::StatusOr<TokenizeSummary> TokenizeCorpus(const Tokenizer& tokenizer,
                                               const TokenizeOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("no input files or folders");
  if (options.workers < 1) return absl::InvalidArgumentError("--workers must be at least 1");
  for (const std::string& input : options.inputs) {
    if (!PathExists(input)) {
      return absl::NotFoundError(absl::StrCat("input ", input, " does not exist"));
    }
  }
  FLAME_ASSIGN_OR_RETURN(DocumentReader reader, DocumentReader::Open(options.inputs));
  std::vector<int64_t> file_start = {0};  // bytes before each file, for progress
  for (const std::string& file : reader.files()) {
    FLAME_ASSIGN_OR_RETURN(const int64_t size, FileSize(file));
    file_start.push_back(file_start.back() + size);
  }
  ShardTokenizerInfo info{options.tokenizer_name, tokenizer.VocabSize(), tokenizer.BosId(),
                          tokenizer.EosId()};
  FLAME_ASSIGN_OR_RETURN(std::unique_ptr<TokenShardWriter> writer,
                         TokenShardWriter::Create(options.output, info, options.shard_tokens));

  TokenizeSummary summary;
  summary.input_bytes = file_start.back();
  const Clock::time_point start = Clock::now();
  ProgressLine progress(options.progress, summary.input_bytes);
  const auto bytes_read = [&] {
    const DocumentCursor& c = reader.cursor();
    return file_start[static_cast<size_t>(c.file_index)] + c.byte_offset;
  };
  TokenizerPool pool(tokenizer, options.workers);
  const int64_t max_in_flight = 2 * options.workers + 1;
  int64_t submitted = 0, written = 0;
  // Writes the oldest job (waiting for it): jobs are written in corpus order.
  const auto write_next = [&]() -> absl::Status {
    FLAME_ASSIGN_OR_RETURN(const std::vector<std::vector<int32_t>> documents, pool.Take(written++));
    for (const std::vector<int32_t>& ids : documents) {
      FLAME_RETURN_IF_ERROR(writer->Add(ids));
      ++summary.documents;
      summary.tokens += static_cast<int64_t>(ids.size());
    }
    progress.Update(summary, bytes_read(), /*final=*/false);
    return absl::OkStatus();
  };
  bool more = true;
  while (more) {
    std::vector<std::string> texts;
    std::string text;
    while (texts.size() < kChunkDocuments) {
      FLAME_ASSIGN_OR_RETURN(more, reader.Next(&text));
      if (!more) break;
      texts.push_back(std::move(text));
    }
    if (!texts.empty()) {
      pool.Submit(std::move(texts));
      ++submitted;
    }
    while (submitted - written >= max_in_flight || (!more && written < submitted)) {
      FLAME_RETURN_IF_ERROR(write_next());
    }
  }
  FLAME_ASSIGN_OR_RETURN(const ShardManifest manifest, writer->Finish());
  summary.shards = static_cast<int64_t>(manifest.shards.size());
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  progress.Update(summary, summary.input_bytes, /*final=*/true);
  return summary;
}

}  // namespace flame::worker
