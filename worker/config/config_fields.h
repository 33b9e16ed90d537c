// FieldReader: typed, validated reads of one config.json object (fla's field names), shared by
// the family parsers of model_config.cc and their own files (delta_net_config.cc, ...). Every
// error names the file and the key. Internal to flame_worker_config.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker::internal {

// Reads typed fields out of one config object, naming the file and key in every error.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& root, std::string source)
      : root_(root), source_(std::move(source)) {}

  absl::Status Error(const std::string& key, const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, " ", why));
  }

  bool IsSet(const std::string& key) const {
    return root_.contains(key) && !root_.at(key).is_null();
  }

  // Written as null: some fla defaults differ between "absent" (the config class's default) and
  // null (the layer's default).
  bool IsNull(const std::string& key) const {
    return root_.contains(key) && root_.at(key).is_null();
  }

  // Leaves *out unchanged when the key is absent or null (fla's default applies).
  absl::Status Int(const std::string& key, int64_t* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    const nlohmann::json& v = root_.at(key);
    if (v.is_number_integer()) {
      *out = v.get<int64_t>();
      return absl::OkStatus();
    }
    // Python writes 1.0 for some integer fields; accept integral floats.
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      *out = static_cast<int64_t>(v.get<double>());
      return absl::OkStatus();
    }
    return Error(key, absl::StrCat("must be an integer (got ", v.dump(), ")"));
  }

  absl::Status OptionalInt(const std::string& key, std::optional<int64_t>* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    int64_t value = 0;
    FLAME_RETURN_IF_ERROR(Int(key, &value));
    *out = value;
    return absl::OkStatus();
  }

  absl::Status Number(const std::string& key, double* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    const nlohmann::json& v = root_.at(key);
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number (got ", v.dump(), ")"));
    *out = v.get<double>();
    if (!std::isfinite(*out)) return Error(key, "must be finite");
    return absl::OkStatus();
  }

  absl::Status OptionalNumber(const std::string& key, std::optional<double>* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    double value = 0;
    FLAME_RETURN_IF_ERROR(Number(key, &value));
    *out = value;
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    const nlohmann::json& v = root_.at(key);
    if (!v.is_boolean())
      return Error(key, absl::StrCat("must be true or false (got ", v.dump(), ")"));
    *out = v.get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const std::string& key, std::string* out) const {
    if (!IsSet(key)) return absl::OkStatus();
    const nlohmann::json& v = root_.at(key);
    if (!v.is_string()) return Error(key, absl::StrCat("must be a string (got ", v.dump(), ")"));
    *out = v.get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Positive(const std::string& key, double value) const {
    if (value > 0) return absl::OkStatus();
    return Error(key, absl::StrCat("must be positive (got ", value, ")"));
  }

 private:
  const nlohmann::json& root_;
  std::string source_;
};

}  // namespace flame::worker::internal
