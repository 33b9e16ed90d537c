#include "worker/data/token_shard_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;

void PutLittleEndian(uint64_t value, int bytes, std::vector<uint8_t>* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<uint8_t>(value >> (8 * i)));
}

absl::Status SyncFile(std::FILE* file, const std::string& path) {
  if (std::fflush(file) != 0 || ::fsync(::fileno(file)) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenShardWriter>> TokenShardWriter::Create(
    const std::string& output, ShardTokenizerInfo tokenizer, int64_t shard_tokens) {
  if (shard_tokens <= 0) return absl::InvalidArgumentError("--shard-size must be positive");
  if (tokenizer.vocab_size <= 0 || tokenizer.vocab_size > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer vocab size ", tokenizer.vocab_size, " does not fit uint32 ids"));
  }
  const fs::path out = fs::absolute(fs::path(output)).lexically_normal();
  std::error_code error;
  if (fs::exists(out, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat("--output ", output, " already exists; choose a new folder"));
  }
  const fs::path parent = out.parent_path();
  if (!fs::is_directory(parent, error)) {
    return absl::NotFoundError(absl::StrCat("--output: folder ", parent.string(), " is missing"));
  }
  const std::string temp =
      (parent / absl::StrCat(".", out.filename().string(), ".tmp-", ::getpid())).string();
  fs::remove_all(temp, error);
  if (!fs::create_directory(temp, error)) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", temp, ": ", error.message()));
  }
  return std::unique_ptr<TokenShardWriter>(
      new TokenShardWriter(out.string(), temp, std::move(tokenizer), shard_tokens));
}

TokenShardWriter::TokenShardWriter(std::string output, std::string temp,
                                   ShardTokenizerInfo tokenizer, int64_t shard_tokens)
    : output_(std::move(output)), temp_(std::move(temp)), shard_tokens_(shard_tokens) {
  manifest_.bytes_per_token = tokenizer.vocab_size <= 65536 ? 2 : 4;
  manifest_.tokenizer = std::move(tokenizer);
}

TokenShardWriter::~TokenShardWriter() {
  if (tokens_ != nullptr) std::fclose(tokens_);
  if (!finished_) {
    std::error_code ignored;
    fs::remove_all(temp_, ignored);
  }
}

absl::Status TokenShardWriter::OpenShard() {
  current_ = ShardFileInfo{};
  current_.name = absl::StrFormat("shard-%05d", manifest_.shards.size());
  const std::string path = absl::StrCat(temp_, "/", current_.name, ".tokens");
  tokens_ = std::fopen(path.c_str(), "wb");
  if (tokens_ == nullptr) return absl::InternalError(absl::StrCat("cannot create ", path));
  starts_ = {0};
  tokens_crc_ = crc32(0L, Z_NULL, 0);
  return absl::OkStatus();
}

absl::Status TokenShardWriter::CloseShard() {
  const std::string tokens_path = absl::StrCat(temp_, "/", current_.name, ".tokens");
  FLAME_RETURN_IF_ERROR(SyncFile(tokens_, tokens_path));
  std::fclose(tokens_);
  tokens_ = nullptr;
  current_.tokens_crc32 = static_cast<uint32_t>(tokens_crc_);
  std::vector<uint8_t> index;
  for (uint64_t start : starts_) PutLittleEndian(start, 8, &index);
  current_.index_crc32 = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), index.data(), static_cast<uInt>(index.size())));
  const std::string index_path = absl::StrCat(temp_, "/", current_.name, ".index");
  std::FILE* file = std::fopen(index_path.c_str(), "wb");
  if (file == nullptr) return absl::InternalError(absl::StrCat("cannot create ", index_path));
  const bool wrote = std::fwrite(index.data(), 1, index.size(), file) == index.size();
  const absl::Status synced = SyncFile(file, index_path);
  std::fclose(file);
  if (!wrote || !synced.ok()) return absl::InternalError(absl::StrCat("cannot write ", index_path));
  manifest_.documents += current_.documents;
  manifest_.tokens += current_.tokens;
  manifest_.shards.push_back(current_);
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Add(const std::vector<int32_t>& ids) {
  if (finished_) return absl::FailedPreconditionError("the shard folder is already finished");
  if (tokens_ == nullptr) FLAME_RETURN_IF_ERROR(OpenShard());
  buffer_.clear();
  for (int32_t id : ids) {
    if (id < 0 || id >= manifest_.tokenizer.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is outside the vocabulary of ", manifest_.tokenizer.vocab_size));
    }
    PutLittleEndian(static_cast<uint64_t>(id), manifest_.bytes_per_token, &buffer_);
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), tokens_) != buffer_.size()) {
    return absl::InternalError(absl::StrCat("cannot write a shard in ", temp_, " (disk full?)"));
  }
  tokens_crc_ = crc32(tokens_crc_, buffer_.data(), static_cast<uInt>(buffer_.size()));
  current_.documents += 1;
  current_.tokens += static_cast<int64_t>(ids.size());
  starts_.push_back(static_cast<uint64_t>(current_.tokens));
  if (current_.tokens >= shard_tokens_) FLAME_RETURN_IF_ERROR(CloseShard());
  return absl::OkStatus();
}

absl::StatusOr<ShardManifest> TokenShardWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("the shard folder is already finished");
  if (tokens_ != nullptr) FLAME_RETURN_IF_ERROR(CloseShard());
  if (manifest_.documents == 0) {
    return absl::InvalidArgumentError("the input has no documents: no shards written");
  }
  FLAME_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(temp_, "/", kShardManifest),
                                            EncodeShardManifest(manifest_)));
  FLAME_RETURN_IF_ERROR(SyncPath(temp_));
  std::error_code error;
  fs::rename(temp_, output_, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp_, " to ", output_, ": ", error.message()));
  }
  finished_ = true;
  FLAME_RETURN_IF_ERROR(SyncPath(fs::path(output_).parent_path().string()));
  return manifest_;
}

}  // namespace flame::worker
