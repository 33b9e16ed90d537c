// The safetensors file format, read and written without Torch or a model.
//
// Layout (the format HF transformers and fla load as model.safetensors):
//   8 bytes     N, the header length, unsigned little-endian
//   N bytes     JSON object: name -> {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
//               and optionally "__metadata__": {string: string}; padded with spaces so the data
//               starts 8-byte aligned
//   the rest    the tensors' raw little-endian bytes; offsets are relative to this section, and
//               the tensors cover it exactly (no holes, no overlap)
//
// The reader checks all of that and refuses a file that breaks any rule with an error naming the
// file and the tensor, so that a truncated download never reaches a model as garbage.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flame::worker::safetensors {

// Bytes per element of a safetensors dtype name ("F32", "BF16", "I64", ...); 0 if unknown.
int64_t DtypeSize(const std::string& dtype);

// A tensor to write: its bytes are borrowed and must outlive the Write call.
struct TensorToWrite {
  std::string name;
  std::string dtype;  // safetensors name, e.g. "BF16"
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t bytes = 0;  // must equal numel(shape) * DtypeSize(dtype)
};

// Writes `tensors` (names unique) to `path` atomically: a temporary sibling, fsynced, renamed.
// Tensors are stored in name order; `metadata` becomes __metadata__ when not empty.
absl::Status Write(const std::string& path, const std::vector<TensorToWrite>& tensors,
                   const std::map<std::string, std::string>& metadata);

struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // offsets into File::data
  int64_t end = 0;
};

// A parsed file: the header plus the data section, held in memory.
class File {
 public:
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The bytes of tensor `name` (which must be in tensors()).
  const char* Data(const std::string& name) const;

 private:
  friend absl::StatusOr<File> Parse(std::string contents, const std::string& source);
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::string contents_;    // the whole file
  int64_t data_start_ = 0;  // where the data section begins in contents_
};

// Parses the bytes of a safetensors file; `source` names it in errors.
absl::StatusOr<File> Parse(std::string contents, const std::string& source);
absl::StatusOr<File> Read(const std::string& path);

}  // namespace flame::worker::safetensors
