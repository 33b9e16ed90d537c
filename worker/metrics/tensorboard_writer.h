// TensorBoard event files, written without TensorFlow or generated protobuf code.
//
// An event file (events.out.tfevents.<seconds>.<host>) is a sequence of TFRecords:
//   uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// (little-endian; masked = rotate-right-15(crc) + 0xa282ead8, CRC-32C/Castagnoli). Each record's
// data is a tensorflow.Event protobuf. We need four of its fields and encode them by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first event carries file_version "brain.Event:2", which TensorBoard requires.
//
// Plain C++ (no protobuf headers), so Torch code may use it (DESIGN.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flame::worker {

// <dump_folder>/<tb_folder>/<YYYYmmdd-HHMM of `unix_seconds`, UTC>[/rank_<rank>]: flame's layout.
// All ranks of a run must pass the same `unix_seconds` (rank 0's) to share the timestamp folder.
std::string TensorBoardRunFolder(const std::string& dump_folder, const std::string& tb_folder,
                                 int64_t unix_seconds, int64_t rank, bool per_rank);

using Scalars = std::vector<std::pair<std::string, double>>;

class EventFileWriter {
 public:
  // Creates `folder` and a new event file in it, and writes the file_version event.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& folder);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One event with a Summary of `scalars` (stored as float, as TensorBoard's simple_value),
  // flushed so that TensorBoard sees it while the job runs.
  absl::Status WriteScalars(int64_t step, double wall_time, const Scalars& scalars);

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::FILE* file_;
};

}  // namespace flame::worker
