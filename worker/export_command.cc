#include "worker/export_command.h"

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/exporter.h"

namespace flame::worker {
namespace {

constexpr int kExitOk = 0, kExitUsage = 2;

constexpr char kUsage[] =
    "usage: flame-worker export --checkpoint <dump>/checkpoint/step-N --config <config.json>\n"
    "                           --output <dir> [--dtype float32|bfloat16|float16]\n"
    "                           [--tokenizer <file>] [--reference-logits]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "flame-worker export: %s\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int RunExportCommand(int argc, char** argv) {
  // Flags take their value as the next argument or after '='.
  std::map<std::string, std::string> values;
  bool reference_logits = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (flag == "--reference-logits") {
      reference_logits = true;
      continue;
    }
    std::string value;
    const size_t equals = flag.find('=');
    if (equals != std::string::npos) {
      value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Fail(absl::StrCat(flag, " needs a value"));
    }
    if (flag != "--checkpoint" && flag != "--config" && flag != "--output" && flag != "--dtype" &&
        flag != "--tokenizer") {
      return Fail(absl::StrCat("unknown flag ", flag));
    }
    if (value.empty()) return Fail(absl::StrCat(flag, " needs a value"));
    values[flag] = value;
  }
  for (const char* required : {"--checkpoint", "--config", "--output"}) {
    if (!values.contains(required)) return Fail(absl::StrCat(required, " is required"));
  }
  ExportRequest request;
  request.checkpoint = values["--checkpoint"];
  request.model_config = values["--config"];
  request.output = values["--output"];
  if (values.contains("--dtype")) request.dtype = values["--dtype"];
  if (values.contains("--tokenizer")) request.tokenizer = values["--tokenizer"];
  request.reference_logits = reference_logits;
  absl::Status status;
  try {
    status = ExportCheckpoint(request);
  } catch (const std::exception& e) {  // LibTorch on a file it cannot read
    status = absl::InvalidArgumentError(e.what());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "flame-worker export: %s\n", std::string(status.message()).c_str());
    return kExitUsage;
  }
  std::printf("exported %s to %s (%s)\n", request.checkpoint.c_str(), request.output.c_str(),
              request.dtype.c_str());
  return kExitOk;
}

}  // namespace flame::worker
