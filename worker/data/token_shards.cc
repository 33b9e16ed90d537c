#include "worker/data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker {
namespace {

using nlohmann::json;

// A read-only memory map of a whole file; the pages are the kernel's page cache, shared by the
// ranks of a host.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
    struct stat info = {};
    if (::fstat(fd, &info) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot stat ", path));
    }
    const auto size = static_cast<size_t>(info.st_size);
    void* data = nullptr;
    if (size > 0) {
      data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(errno)));
      }
    }
    ::close(fd);  // the mapping keeps the file
    return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(data), size));
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

uint32_t Crc32(const uint8_t* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large files in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t at = 0; at < size; at += kPiece) {
    crc = crc32(crc, data + at, static_cast<uInt>(std::min(kPiece, size - at)));
  }
  return static_cast<uint32_t>(crc);
}

// A little-endian uint64 (the format's byte order), byte by byte: no alignment assumed.
uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Shard {
  ShardFileInfo info;
  int64_t first_doc = 0;  // index, in the source, of the shard's first document
  std::unique_ptr<MappedFile> tokens;
  std::unique_ptr<MappedFile> index;
  bool verified = false;  // the token file's checksum was checked
};

class TokenShardSource final : public DocumentSource {
 public:
  TokenShardSource(std::string name, ShardManifest manifest, std::vector<Shard> shards)
      : name_(std::move(name)), manifest_(std::move(manifest)), shards_(std::move(shards)) {}

  absl::Status Next(SourceDocument* document) override {
    if (doc_ == manifest_.documents) {  // all_exhausted: start the next epoch
      ++epoch_;
      doc_ = 0;
    }
    if (document != nullptr) {
      FLAME_RETURN_IF_ERROR(Read(doc_, &document->ids));
      document->tokenized = true;
    }
    ++doc_;
    return absl::OkStatus();
  }

  SourceCursor cursor() const override { return {epoch_, doc_, 0, 0}; }

  absl::Status Seek(const SourceCursor& cursor) override {
    if (cursor.epoch < 0 || cursor.doc < 0 || cursor.doc > manifest_.documents) {
      return absl::InvalidArgumentError(
          absl::StrCat("data position: document ", cursor.doc, " is outside ", name_, " (",
                       manifest_.documents, " documents): were the shards rewritten?"));
    }
    epoch_ = cursor.epoch;
    doc_ = cursor.doc;
    return absl::OkStatus();
  }

  const std::string& name() const override { return name_; }

 private:
  absl::Status Read(int64_t doc, std::vector<int32_t>* ids) {
    // The last shard whose first document is <= doc.
    const auto it = std::upper_bound(shards_.begin(), shards_.end(), doc,
                                     [](int64_t d, const Shard& s) { return d < s.first_doc; });
    Shard& shard = *(it - 1);
    const std::string path = absl::StrCat(name_, "/", shard.info.name, ".tokens");
    if (!shard.verified) {
      if (Crc32(shard.tokens->data(), shard.tokens->size()) != shard.info.tokens_crc32) {
        return absl::DataLossError(absl::StrCat(
            "token shard ", path, " is corrupt: its CRC-32 does not match ", kShardManifest));
      }
      shard.verified = true;
    }
    const int64_t local = doc - shard.first_doc;
    const uint64_t begin = LoadU64(shard.index->data() + 8 * local);
    const uint64_t end = LoadU64(shard.index->data() + 8 * (local + 1));
    const int width = manifest_.bytes_per_token;
    const uint8_t* p = shard.tokens->data() + begin * static_cast<uint64_t>(width);
    ids->resize(end - begin);
    for (uint64_t i = 0; i < end - begin; ++i, p += width) {
      const uint32_t id = width == 2 ? static_cast<uint32_t>(p[0] | (p[1] << 8))
                                     : static_cast<uint32_t>(p[0] | (p[1] << 8) | (p[2] << 16) |
                                                             (static_cast<uint32_t>(p[3]) << 24));
      if (id >= static_cast<uint64_t>(manifest_.tokenizer.vocab_size)) {
        return absl::DataLossError(
            absl::StrCat("token shard ", path, " holds id ", id, ", outside the vocabulary"));
      }
      (*ids)[i] = static_cast<int32_t>(id);
    }
    return absl::OkStatus();
  }

  std::string name_;
  ShardManifest manifest_;
  std::vector<Shard> shards_;
  int64_t epoch_ = 0;
  int64_t doc_ = 0;
};

absl::Status CheckTokenizer(const std::string& folder, const ShardTokenizerInfo& saved,
                            const Tokenizer& job) {
  const auto mismatch = [&](const char* what, int64_t shards, int64_t ours) {
    return absl::FailedPreconditionError(
        absl::StrCat("token shards ", folder, " were made with another tokenizer (", saved.name,
                     "): ", what, " ", shards, " in the shards, ", ours,
                     " in model.tokenizer_path; re-run flame-tokenize "
                     "with the job's tokenizer"));
  };
  if (saved.vocab_size != job.VocabSize()) {
    return mismatch("vocab size", saved.vocab_size, job.VocabSize());
  }
  if (saved.bos_id != job.BosId()) return mismatch("BOS id", saved.bos_id, job.BosId());
  if (saved.eos_id != job.EosId()) return mismatch("EOS id", saved.eos_id, job.EosId());
  return absl::OkStatus();
}

absl::StatusOr<Shard> OpenShard(const std::string& folder, const ShardManifest& manifest,
                                const ShardFileInfo& info) {
  Shard shard;
  shard.info = info;
  const std::string tokens_path = absl::StrCat(folder, "/", info.name, ".tokens");
  const std::string index_path = absl::StrCat(folder, "/", info.name, ".index");
  FLAME_ASSIGN_OR_RETURN(shard.tokens, MappedFile::Open(tokens_path));
  FLAME_ASSIGN_OR_RETURN(shard.index, MappedFile::Open(index_path));
  const auto token_bytes = static_cast<size_t>(info.tokens * manifest.bytes_per_token);
  const auto index_bytes = static_cast<size_t>(8 * (info.documents + 1));
  for (const auto& [path, have, want] :
       {std::tuple(tokens_path, shard.tokens->size(), token_bytes),
        std::tuple(index_path, shard.index->size(), index_bytes)}) {
    if (have != want) {
      return absl::DataLossError(absl::StrCat("token shard file ", path, " has ", have, " bytes, ",
                                              kShardManifest, " implies ", want,
                                              " (truncated or replaced?)"));
    }
  }
  if (Crc32(shard.index->data(), shard.index->size()) != info.index_crc32) {
    return absl::DataLossError(
        absl::StrCat("token shard index ", index_path, " is corrupt: CRC-32 mismatch"));
  }
  uint64_t previous = 0;
  for (int64_t d = 0; d <= info.documents; ++d) {
    const uint64_t at = LoadU64(shard.index->data() + 8 * d);
    if ((d == 0 && at != 0) || at < previous ||
        (d == info.documents && at != static_cast<uint64_t>(info.tokens))) {
      return absl::DataLossError(
          absl::StrCat("token shard index ", index_path, " is malformed at document ", d));
    }
    previous = at;
  }
  return shard;
}

}  // namespace

std::string EncodeShardManifest(const ShardManifest& m) {
  json shards = json::array();
  for (const ShardFileInfo& s : m.shards) {
    shards.push_back({{"name", s.name},
                      {"documents", s.documents},
                      {"tokens", s.tokens},
                      {"tokens_crc32", s.tokens_crc32},
                      {"index_crc32", s.index_crc32}});
  }
  const json j = {{"format", kShardFormat},
                  {"version", 1},
                  {"tokenizer",
                   {{"name", m.tokenizer.name},
                    {"vocab_size", m.tokenizer.vocab_size},
                    {"bos_id", m.tokenizer.bos_id},
                    {"eos_id", m.tokenizer.eos_id}}},
                  {"dtype", m.bytes_per_token == 2 ? "uint16" : "uint32"},
                  {"documents", m.documents},
                  {"tokens", m.tokens},
                  {"shards", shards}};
  return j.dump(2) + "\n";
}

absl::StatusOr<ShardManifest> ReadShardManifest(const std::string& folder) {
  const std::string path = absl::StrCat(folder, "/", kShardManifest);
  FLAME_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kShardFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a ", kShardFormat, " manifest"));
  }
  ShardManifest m;
  try {
    if (j.at("version").get<int>() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": shard format version ",
                                                        j.at("version").dump(),
                                                        " is newer than this worker reads (1)"));
    }
    const json& t = j.at("tokenizer");
    m.tokenizer = {t.at("name").get<std::string>(), t.at("vocab_size").get<int64_t>(),
                   t.at("bos_id").get<int32_t>(), t.at("eos_id").get<int32_t>()};
    const std::string dtype = j.at("dtype").get<std::string>();
    if (dtype != "uint16" && dtype != "uint32") {
      return absl::DataLossError(absl::StrCat(path, ": unknown dtype \"", dtype, "\""));
    }
    m.bytes_per_token = dtype == "uint16" ? 2 : 4;
    m.documents = j.at("documents").get<int64_t>();
    m.tokens = j.at("tokens").get<int64_t>();
    for (const json& s : j.at("shards")) {
      m.shards.push_back({s.at("name").get<std::string>(), s.at("documents").get<int64_t>(),
                          s.at("tokens").get<int64_t>(), s.at("tokens_crc32").get<uint32_t>(),
                          s.at("index_crc32").get<uint32_t>()});
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, " is incomplete or mistyped: ", e.what()));
  }
  int64_t documents = 0, tokens = 0;
  for (const ShardFileInfo& s : m.shards) {
    if (s.documents < 0 || s.tokens < 0 || s.name.empty() ||
        s.name.find('/') != std::string::npos) {
      return absl::DataLossError(absl::StrCat(path, ": malformed shard entry ", s.name));
    }
    documents += s.documents;
    tokens += s.tokens;
  }
  if (documents != m.documents || tokens != m.tokens) {
    return absl::DataLossError(absl::StrCat(path, ": shard totals do not add up"));
  }
  return m;
}

bool IsTokenShardFolder(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return false;
  const std::string manifest = absl::StrCat(path, "/", kShardManifest);
  if (!PathExists(manifest)) return false;
  const absl::StatusOr<std::string> text = ReadFileToString(manifest);
  if (!text.ok()) return false;
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.value("format", "") == kShardFormat;
}

absl::StatusOr<std::unique_ptr<DocumentSource>> OpenTokenShardSource(const std::string& folder,
                                                                     const Tokenizer& tokenizer) {
  FLAME_ASSIGN_OR_RETURN(ShardManifest manifest, ReadShardManifest(folder));
  FLAME_RETURN_IF_ERROR(CheckTokenizer(folder, manifest.tokenizer, tokenizer));
  if (manifest.documents == 0) {
    return absl::InvalidArgumentError(absl::StrCat("token shards ", folder, " hold no documents"));
  }
  std::vector<Shard> shards;
  int64_t first_doc = 0;
  for (const ShardFileInfo& info : manifest.shards) {
    if (info.documents == 0) continue;  // nothing to map
    FLAME_ASSIGN_OR_RETURN(Shard shard, OpenShard(folder, manifest, info));
    shard.first_doc = first_doc;
    first_doc += info.documents;
    shards.push_back(std::move(shard));
  }
  return std::unique_ptr<DocumentSource>(
      new TokenShardSource(folder, std::move(manifest), std::move(shards)));
}

}  // namespace flame::worker
