#include "worker/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker::safetensors {
namespace {

using Json = nlohmann::json;

// The format is little-endian; writing host memory as is relies on it.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

constexpr char kMetadataKey[] = "__metadata__";
// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::StatusOr<int64_t> Numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && numel > INT64_MAX / d)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": invalid shape"));
    }
    numel *= d;
  }
  return numel;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The header bytes (padded) for tensors laid out back to back in name order.
absl::StatusOr<std::string> BuildHeader(const std::vector<const TensorToWrite*>& sorted,
                                        const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  int64_t offset = 0;
  for (const TensorToWrite* t : sorted) {
    const int64_t size = DtypeSize(t->dtype);
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(t->name, ": unknown safetensors dtype \"", t->dtype, "\""));
    }
    FLAME_ASSIGN_OR_RETURN(const int64_t numel, Numel(t->shape, t->name));
    if (numel * size != t->bytes) {
      return absl::InvalidArgumentError(absl::StrCat(t->name, ": ", t->bytes, " bytes for shape ",
                                                     ShapeString(t->shape), " of ", t->dtype));
    }
    header[t->name] = Json{
        {"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes}}};
    offset += t->bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned
  return text;
}

absl::Status WriteBody(std::FILE* file, const std::string& header,
                       const std::vector<const TensorToWrite*>& sorted) {
  uint64_t length = header.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  bool ok = std::fwrite(prefix, 1, 8, file) == 8 &&
            std::fwrite(header.data(), 1, header.size(), file) == header.size();
  for (const TensorToWrite* t : sorted) {
    if (!ok) break;
    ok = t->bytes == 0 || std::fwrite(t->data, 1, static_cast<size_t>(t->bytes), file) ==
                              static_cast<size_t>(t->bytes);
  }
  ok = ok && std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  return ok ? absl::OkStatus() : absl::InternalError("write failed");
}

absl::Status Corrupt(const std::string& source, const std::string& why) {
  return absl::DataLossError(absl::StrCat(source, ": not a valid safetensors file: ", why));
}

absl::StatusOr<TensorInfo> ParseEntry(const std::string& name, const Json& entry,
                                      const std::string& source) {
  const std::string what = absl::StrCat("tensor \"", name, "\"");
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
      !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
      !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
    return Corrupt(source, absl::StrCat(what, " needs dtype, shape and data_offsets [begin, end]"));
  }
  TensorInfo info;
  info.dtype = entry["dtype"].get<std::string>();
  for (const Json& d : entry["shape"]) {
    if (!d.is_number_integer()) return Corrupt(source, absl::StrCat(what, ": shape not integers"));
    info.shape.push_back(d.get<int64_t>());
  }
  for (const Json& o : entry["data_offsets"]) {
    if (!o.is_number_unsigned()) return Corrupt(source, absl::StrCat(what, ": bad data_offsets"));
  }
  info.begin = entry["data_offsets"][0].get<int64_t>();
  info.end = entry["data_offsets"][1].get<int64_t>();
  const int64_t size = DtypeSize(info.dtype);
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " has unknown dtype \"", info.dtype, "\""));
  }
  absl::StatusOr<int64_t> numel = Numel(info.shape, what);
  if (!numel.ok()) return Corrupt(source, std::string(numel.status().message()));
  if (info.end < info.begin || info.end - info.begin != *numel * size) {
    return Corrupt(
        source, absl::StrCat(what, ": data_offsets [", info.begin, ", ", info.end, "] do not hold ",
                             ShapeString(info.shape), " of ", info.dtype));
  }
  return info;
}

}  // namespace

int64_t DtypeSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::Status Write(const std::string& path, const std::vector<TensorToWrite>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::map<std::string, const TensorToWrite*> by_name;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat("invalid tensor name \"", t.name, "\""));
    }
    if (!by_name.emplace(t.name, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" given twice"));
    }
  }
  std::vector<const TensorToWrite*> sorted;
  for (const auto& [name, t] : by_name) sorted.push_back(t);
  FLAME_ASSIGN_OR_RETURN(const std::string header, BuildHeader(sorted, metadata));

  const std::string temporary = absl::StrCat(path, ".tmp-", ::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) return absl::InternalError(absl::StrCat("cannot create ", temporary));
  absl::Status status = WriteBody(file, header, sorted);
  if (std::fclose(file) != 0 && status.ok()) status = absl::InternalError("close failed");
  if (status.ok() && std::rename(temporary.c_str(), path.c_str()) != 0) {
    status = absl::InternalError("rename failed");
  }
  if (!status.ok()) {
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("writing ", path, ": ", status.message()));
  }
  const size_t slash = path.find_last_of('/');
  return SyncPath(slash == std::string::npos ? "." : path.substr(0, slash));
}

const char* File::Data(const std::string& name) const {
  return contents_.data() + data_start_ + tensors_.at(name).begin;
}

absl::StatusOr<File> Parse(std::string contents, const std::string& source) {
  if (contents.size() < 8) return Corrupt(source, "shorter than the 8-byte header length");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(contents[i])) << (8 * i);
  }
  if (length > kMaxHeaderBytes || length > contents.size() - 8) {
    return Corrupt(source, absl::StrCat("header length ", length, " does not fit the file of ",
                                        contents.size(), " bytes"));
  }
  const Json header = Json::parse(contents.begin() + 8, contents.begin() + 8 + length, nullptr,
                                  /*allow_exceptions=*/false);
  if (!header.is_object()) return Corrupt(source, "the header is not a JSON object");

  File file;
  file.data_start_ = static_cast<int64_t>(8 + length);
  const int64_t data_bytes = static_cast<int64_t>(contents.size()) - file.data_start_;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return Corrupt(source, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Corrupt(source, "__metadata__ values must be strings");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    FLAME_ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(name, entry, source));
    if (info.end > data_bytes) {
      return Corrupt(source, absl::StrCat("tensor \"", name, "\" ends at byte ", info.end,
                                          " of a data section of ", data_bytes, " (truncated?)"));
    }
    ranges.emplace_back(info.begin, info.end);
    file.tensors_.emplace(name, std::move(info));
  }
  // The tensors must tile the data section: anything else is a damaged or foreign file.
  std::sort(ranges.begin(), ranges.end());
  int64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) return Corrupt(source, "tensors overlap or leave holes in the data");
    covered = end;
  }
  if (covered != data_bytes) {
    return Corrupt(source, absl::StrCat("the data section has ", data_bytes - covered,
                                        " bytes that no tensor uses"));
  }
  file.contents_ = std::move(contents);
  return file;
}

absl::StatusOr<File> Read(const std::string& path) {
  FLAME_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
  return Parse(std::move(contents), path);
}

}  // namespace flame::worker::safetensors
