#include "worker/data/sentencepiece_model.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "worker/data/sentencepiece_module.h"

namespace flame::worker {

struct SentencePieceModel::Module {
  decltype(&flame_spm_load) load = nullptr;
  decltype(&flame_spm_free) free = nullptr;
  decltype(&flame_spm_encode) encode = nullptr;
  decltype(&flame_spm_piece_size) piece_size = nullptr;
  decltype(&flame_spm_bos_id) bos_id = nullptr;
  decltype(&flame_spm_eos_id) eos_id = nullptr;
};

namespace {

constexpr char kModuleName[] = "libflame_sentencepiece.so";

// Where the module may be: $FLAME_SENTENCEPIECE_MODULE, next to the executable (bin/ holds
// flame-worker and the module), and where this build put it (tests run from the build tree).
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("FLAME_SENTENCEPIECE_MODULE")) paths.emplace_back(env);
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) paths.push_back((exe.parent_path() / kModuleName).string());
#ifdef FLAME_SENTENCEPIECE_MODULE_PATH
  paths.emplace_back(FLAME_SENTENCEPIECE_MODULE_PATH);
#endif
  return paths;
}

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(::dlsym(library, name));
  return *out != nullptr;
}

// Loads the module once per process; null (with *error) when it cannot be found or is broken.
const SentencePieceModel::Module* LoadModule(std::string* error) {
  static std::once_flag once;
  static SentencePieceModel::Module* module = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& path : Candidates()) {
      if (::access(path.c_str(), R_OK) != 0) continue;
      // A link-map namespace of its own: SentencePiece, its bundled protobuf and its own copy of
      // the C++ runtime see nothing of the process's libprotobuf, and the process sees nothing of
      // them. Only C types cross (sentencepiece_module.h).
      void* library = ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) {
        tried += std::string(" ") + ::dlerror() + ";";
        continue;
      }
      auto* loaded = new SentencePieceModel::Module;
      if (Resolve(library, "flame_spm_load", &loaded->load) &&
          Resolve(library, "flame_spm_free", &loaded->free) &&
          Resolve(library, "flame_spm_encode", &loaded->encode) &&
          Resolve(library, "flame_spm_piece_size", &loaded->piece_size) &&
          Resolve(library, "flame_spm_bos_id", &loaded->bos_id) &&
          Resolve(library, "flame_spm_eos_id", &loaded->eos_id)) {
        module = loaded;
        return;
      }
      delete loaded;
      tried += " " + path + " lacks the flame_spm_* functions;";
    }
    load_error = std::string("cannot load ") + kModuleName +
                 " (set FLAME_SENTENCEPIECE_MODULE or install it next to flame-worker)" + tried;
  });
  if (module == nullptr) *error = load_error;
  return module;
}

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  const Module* module = LoadModule(error);
  if (module == nullptr) return nullptr;
  char message[512] = {};
  void* handle = module->load(path.c_str(), message, sizeof(message));
  if (handle == nullptr) {
    *error = message;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(module, handle));
}

SentencePieceModel::~SentencePieceModel() { module_->free(handle_); }

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids,
                                std::string* error) const {
  char message[512] = {};
  // Pieces are rarely more than one per byte (byte fallback gives exactly one per byte).
  ids->resize(text.size() + 16);
  long count = module_->encode(handle_, text.data(), text.size(), ids->data(), ids->size(), message,
                               sizeof(message));
  if (count > static_cast<long>(ids->size())) {
    ids->resize(static_cast<size_t>(count));
    count = module_->encode(handle_, text.data(), text.size(), ids->data(), ids->size(), message,
                            sizeof(message));
  }
  if (count < 0) {
    *error = message;
    return false;
  }
  ids->resize(static_cast<size_t>(count));
  return true;
}

int SentencePieceModel::PieceSize() const { return module_->piece_size(handle_); }
int SentencePieceModel::BosId() const { return module_->bos_id(handle_); }
int SentencePieceModel::EosId() const { return module_->eos_id(handle_); }

}  // namespace flame::worker
