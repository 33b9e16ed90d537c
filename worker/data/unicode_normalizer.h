// Unicode normalization for tokenizer.json normalizers (NFC is the one byte-level BPE files use).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flame::worker {

// `text` in Normalization Form C (ICU). Where the text needs changing, invalid UTF-8 in it comes
// back as U+FFFD.
absl::StatusOr<std::string> NormalizeNfc(absl::string_view text);

}  // namespace flame::worker
