#include "worker/data/unicode_normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "absl/strings/str_cat.h"

namespace flame::worker {

absl::StatusOr<std::string> NormalizeNfc(absl::string_view text) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error)) {
    return absl::InternalError(absl::StrCat("ICU NFC normalizer: ", u_errorName(error)));
  }
  const icu::UnicodeString input = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  // Most text is already in NFC: then the input comes back as it was, without a copy.
  if (nfc->isNormalized(input, error) && U_SUCCESS(error)) return std::string(text);
  error = U_ZERO_ERROR;
  const icu::UnicodeString output = nfc->normalize(input, error);
  if (U_FAILURE(error)) return absl::InternalError(absl::StrCat("NFC: ", u_errorName(error)));
  std::string out;
  output.toUTF8String(out);
  return out;
}

}  // namespace flame::worker
