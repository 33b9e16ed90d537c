// The C interface of libflame_sentencepiece.so, the one place that links SentencePiece.
//
// Why a separately loaded module: Debian's libsentencepiece.so.0 bundles protobuf-lite and
// exports its google::protobuf symbols. In a process that also loads the system libprotobuf (any
// process with gRPC, such as flame-worker) the two copies interpose and libprotobuf crashes in
// its static initialisers. SentencePieceModel (sentencepiece_model.cc) therefore loads this
// module with dlmopen into a new link-map namespace, where SentencePiece binds to its own protobuf
// copy and stays invisible to the rest of the process. (RTLD_DEEPBIND would do too, but the
// sanitizer runtimes refuse it.) The namespace has its own C and C++ runtime, so only plain C
// types cross the boundary: no allocation, std:: object or exception.
#pragma once

#include <stddef.h>

extern "C" {

// An opaque model, or null with a message in `error` (NUL-terminated, truncated to size).
void* flame_spm_load(const char* path, char* error, size_t error_size);
void flame_spm_free(void* model);

// Writes up to `capacity` ids of `text` to `ids` and returns how many the text has (call again
// with more room when that exceeds `capacity`), or -1 with a message in `error`.
long flame_spm_encode(void* model, const char* text, size_t length, int* ids, size_t capacity,
                      char* error, size_t error_size);

int flame_spm_piece_size(void* model);
int flame_spm_bos_id(void* model);  // -1 when the model has none
int flame_spm_eos_id(void* model);
}
