// SentencePiece, loaded at run time from libflame_sentencepiece.so (see sentencepiece_module.h
// for why it cannot simply be linked), with std-only types.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace flame::worker {

class SentencePieceModel {
 public:
  // Null on failure, with the reason in *error.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // Piece ids of `text` (no BOS/EOS). False on failure, with the reason in *error.
  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  int PieceSize() const;
  int BosId() const;  // -1 when the model has none
  int EosId() const;

  struct Module;  // the resolved functions of the loaded module

 private:
  SentencePieceModel(const Module* module, void* handle) : module_(module), handle_(handle) {}
  const Module* module_;
  void* handle_;
};

}  // namespace flame::worker
