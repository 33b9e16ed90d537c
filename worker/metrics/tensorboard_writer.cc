#include "worker/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one table lookup per byte.
std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0);
    table[i] = crc;
  }
  return table;
}

uint32_t MaskedCrc32c(const char* data, size_t size) {
  static const std::array<uint32_t, 256> kTable = MakeCrc32cTable();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc = kTable[(crc ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (crc >> 8);
  }
  crc ^= 0xFFFFFFFFu;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;  // TFRecord's mask
}

// Protobuf wire format, the four pieces the Event message needs.
void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
void AppendTag(std::string* out, int field, int wire_type) {
  AppendVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void AppendBytesField(std::string* out, int field, const std::string& bytes) {
  AppendTag(out, field, 2);
  AppendVarint(out, bytes.size());
  out->append(bytes);
}

std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  uint64_t wall_bits = 0;
  std::memcpy(&wall_bits, &wall_time, sizeof(wall_bits));
  AppendTag(&event, 1, 1);  // wall_time
  AppendLittleEndian(&event, wall_bits, 8);
  AppendTag(&event, 2, 0);  // step (int64: negative values as 10-byte two's complement)
  AppendVarint(&event, static_cast<uint64_t>(step));
  return event;
}

std::string SummaryOf(const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string encoded;
    AppendBytesField(&encoded, 1, tag);  // Value.tag
    const float as_float = static_cast<float>(value);
    uint32_t float_bits = 0;
    std::memcpy(&float_bits, &as_float, sizeof(float_bits));
    AppendTag(&encoded, 2, 5);  // Value.simple_value
    AppendLittleEndian(&encoded, float_bits, 4);
    AppendBytesField(&summary, 1, encoded);  // Summary.value
  }
  return summary;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string TensorBoardRunFolder(const std::string& dump_folder, const std::string& tb_folder,
                                 int64_t unix_seconds, int64_t rank, bool per_rank) {
  const std::time_t time = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  ::gmtime_r(&time, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M", &utc);
  std::string folder = absl::StrCat(dump_folder, "/", tb_folder, "/", stamp);
  if (per_rank) absl::StrAppend(&folder, "/rank_", rank);
  return folder;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& folder) {
  FLAME_RETURN_IF_ERROR(MakeDirectories(folder));
  const double now = NowSeconds();
  const std::string path = absl::StrFormat("%s/events.out.tfevents.%d.%s", folder,
                                           static_cast<int64_t>(now), HostName());
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open TensorBoard event file ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  std::string event = EventHeader(now, 0);
  AppendBytesField(&event, 3, "brain.Event:2");  // file_version
  FLAME_RETURN_IF_ERROR(writer->WriteRecord(event));
  return writer;
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

absl::Status EventFileWriter::WriteScalars(int64_t step, double wall_time, const Scalars& scalars) {
  std::string event = EventHeader(wall_time, step);
  AppendBytesField(&event, 5, SummaryOf(scalars));  // summary
  return WriteRecord(event);
}

absl::Status EventFileWriter::WriteRecord(const std::string& data) {
  std::string record;
  AppendLittleEndian(&record, data.size(), 8);
  AppendLittleEndian(&record, MaskedCrc32c(record.data(), 8), 4);
  record.append(data);
  AppendLittleEndian(&record, MaskedCrc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write TensorBoard event file ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flame::worker
