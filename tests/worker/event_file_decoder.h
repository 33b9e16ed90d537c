// An independent reader of TensorBoard event files for the tests: TFRecord framing with its
// masked CRC-32C checks, and a generic protobuf wire-format walk of the Event, Summary and Value
// messages. It shares no code with worker/metrics/tensorboard_writer.cc (the CRC here is the
// bitwise definition, not a table), so a mistake in the writer cannot hide in both.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace flame::worker::testing {

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;  // Summary.value: tag -> simple_value
};

struct DecodedFile {
  std::vector<DecodedEvent> events;
  std::string error;  // first problem found; empty when the whole file decoded
};

inline uint32_t BitwiseCrc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint64_t ReadLittleEndian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

// One protobuf field: number, wire type, and its varint/fixed value or bytes.
struct WireField {
  int number = 0;
  int wire_type = 0;
  uint64_t value = 0;
  std::string bytes;
};

// Splits a message into its fields; false on malformed input.
inline bool ParseWire(const std::string& message, std::vector<WireField>* fields) {
  size_t at = 0;
  auto varint = [&](uint64_t* out) {
    *out = 0;
    for (int shift = 0; shift < 64 && at < message.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message[at++]);
      *out |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  };
  while (at < message.size()) {
    uint64_t key = 0;
    if (!varint(&key)) return false;
    WireField field;
    field.number = static_cast<int>(key >> 3);
    field.wire_type = static_cast<int>(key & 7);
    if (field.wire_type == 0) {
      if (!varint(&field.value)) return false;
    } else if (field.wire_type == 1 || field.wire_type == 5) {
      const int width = field.wire_type == 1 ? 8 : 4;
      if (at + width > message.size()) return false;
      field.value = ReadLittleEndian(message, at, width);
      at += width;
    } else if (field.wire_type == 2) {
      uint64_t length = 0;
      if (!varint(&length) || at + length > message.size()) return false;
      field.bytes = message.substr(at, length);
      at += length;
    } else {
      return false;
    }
    fields->push_back(std::move(field));
  }
  return true;
}

inline bool DecodeEvent(const std::string& data, DecodedEvent* event) {
  std::vector<WireField> fields;
  if (!ParseWire(data, &fields)) return false;
  for (const WireField& f : fields) {
    if (f.number == 1 && f.wire_type == 1) std::memcpy(&event->wall_time, &f.value, 8);
    if (f.number == 2 && f.wire_type == 0) event->step = static_cast<int64_t>(f.value);
    if (f.number == 3 && f.wire_type == 2) event->file_version = f.bytes;
    if (f.number != 5 || f.wire_type != 2) continue;
    std::vector<WireField> values;  // Summary.value
    if (!ParseWire(f.bytes, &values)) return false;
    for (const WireField& v : values) {
      std::vector<WireField> parts;
      if (v.number != 1 || !ParseWire(v.bytes, &parts)) return false;
      std::string tag;
      float simple_value = 0;
      for (const WireField& p : parts) {
        if (p.number == 1 && p.wire_type == 2) tag = p.bytes;
        if (p.number == 2 && p.wire_type == 5) {
          const auto bits = static_cast<uint32_t>(p.value);
          std::memcpy(&simple_value, &bits, 4);
        }
      }
      event->scalars[tag] = simple_value;
    }
  }
  return true;
}

inline DecodedFile DecodeEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  DecodedFile file;
  const auto fail = [&file](const char* why) {
    file.error = why;
    return file;
  };
  size_t at = 0;
  while (at < bytes.size()) {
    if (at + 12 > bytes.size()) return fail("truncated record header");
    const std::string length_bytes = bytes.substr(at, 8);
    const uint64_t length = ReadLittleEndian(bytes, at, 8);
    if (ReadLittleEndian(bytes, at + 8, 4) != MaskCrc(BitwiseCrc32c(length_bytes))) {
      return fail("bad length CRC");
    }
    at += 12;
    if (at + length + 4 > bytes.size()) return fail("truncated record");
    const std::string data = bytes.substr(at, length);
    if (ReadLittleEndian(bytes, at + length, 4) != MaskCrc(BitwiseCrc32c(data))) {
      return fail("bad data CRC");
    }
    at += length + 4;
    DecodedEvent event;
    if (!DecodeEvent(data, &event)) return fail("malformed Event");
    file.events.push_back(std::move(event));
  }
  return file;
}

}  // namespace flame::worker::testing
