#include "worker/data/byte_level.h"

#include <array>

namespace flame::worker {
namespace {

// Byte -> stand-in code point, built once.
std::array<char32_t, 256> BuildTable() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// Stand-in UTF-8 strings, so that ToByteLevel is one table lookup per byte.
std::array<std::string, 256> BuildUtf8Table() {
  std::array<std::string, 256> strings;
  for (int b = 0; b < 256; ++b)
    AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(b)), &strings[b]);
  return strings;
}

}  // namespace

char32_t ByteLevelCodePoint(uint8_t byte) {
  static const std::array<char32_t, 256> table = BuildTable();
  return table[byte];
}

std::string ToByteLevel(absl::string_view text) {
  static const std::array<std::string, 256> strings = BuildUtf8Table();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += strings[static_cast<uint8_t>(c)];
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

char32_t DecodeUtf8(absl::string_view text, size_t pos, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const uint8_t lead = byte(0);
  size_t n = 0;
  char32_t c = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    *length = 1;
    return lead;
  } else if ((lead & 0xE0) == 0xC0) {
    n = 2, c = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    n = 3, c = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    n = 4, c = lead & 0x07, min = 0x10000;
  }
  if (n == 0 || pos + n > text.size()) {
    *length = 1;
    return 0xFFFD;
  }
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) {
      *length = 1;
      return 0xFFFD;
    }
    c = (c << 6) | (byte(i) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    *length = 1;
    return 0xFFFD;
  }
  *length = n;
  return c;
}

size_t Utf8CharLength(absl::string_view text, size_t pos) {
  size_t length = 1;
  DecodeUtf8(text, pos, &length);
  return length;
}

bool IsUnicodeWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace flame::worker
