// The byte-level alphabet of GPT-2-style BPE tokenizers, and the UTF-8 helpers around it.
//
// Byte-level BPE runs on bytes, but its vocabulary and merges are written as text: each of the
// 256 byte values stands for one printable Unicode character. Printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 (controls, space, soft hyphen, ...) take
// U+0100, U+0101, ... in byte order, so a space is 'Ġ' (U+0120) and a newline 'Ċ' (U+010A).
// Every tokenizer.json with a ByteLevel pre-tokenizer uses this exact table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flame::worker {

// The code point that stands for `byte`.
char32_t ByteLevelCodePoint(uint8_t byte);

// `text` with every byte replaced by the UTF-8 of its stand-in character.
std::string ToByteLevel(absl::string_view text);

// UTF-8 encoding of one code point, appended to *out.
void AppendUtf8(char32_t code_point, std::string* out);

// Length in bytes of the UTF-8 sequence that starts at text[pos]; 1 for a byte that does not
// start a valid sequence (each such byte is then treated as a character of its own).
size_t Utf8CharLength(absl::string_view text, size_t pos);

// The code point at text[pos] (U+FFFD for an invalid sequence) and its length in bytes.
char32_t DecodeUtf8(absl::string_view text, size_t pos, size_t* length);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool IsUnicodeWhitespace(char32_t c);

}  // namespace flame::worker
