// libflame_sentencepiece.so: SentencePiece behind a C interface (see sentencepiece_module.h).
// It must include no Abseil header either: sentencepiece_processor.h declares its own
// `namespace absl { using std::string_view; }`.
#include "worker/data/sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

void CopyError(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

sentencepiece::SentencePieceProcessor* Processor(void* model) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

}  // namespace

extern "C" {

void* flame_spm_load(const char* path, char* error, size_t error_size) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const sentencepiece::util::Status status = processor->Load(path);
  if (!status.ok()) {
    CopyError(status.ToString(), error, error_size);
    delete processor;
    return nullptr;
  }
  return processor;
}

void flame_spm_free(void* model) { delete Processor(model); }

long flame_spm_encode(void* model, const char* text, size_t length, int* ids, size_t capacity,
                      char* error, size_t error_size) {
  std::vector<int> pieces;
  const sentencepiece::util::Status status =
      Processor(model)->Encode(std::string(text, length), &pieces);
  if (!status.ok()) {
    CopyError(status.ToString(), error, error_size);
    return -1;
  }
  std::copy_n(pieces.begin(), std::min(pieces.size(), capacity), ids);
  return static_cast<long>(pieces.size());
}

int flame_spm_piece_size(void* model) { return Processor(model)->GetPieceSize(); }
int flame_spm_bos_id(void* model) { return Processor(model)->bos_id(); }
int flame_spm_eos_id(void* model) { return Processor(model)->eos_id(); }
}
