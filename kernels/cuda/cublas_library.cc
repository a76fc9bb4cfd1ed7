#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tpserve::cuda {
namespace {

// Resolves `name` in `handle` into `fn`; false (with `error` set) when it is missing.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn != nullptr) return true;
  const char* why = dlerror();
  *error = absl::StrCat("no symbol ", name, why != nullptr ? absl::StrCat(": ", why) : "");
  return false;
}

absl::StatusOr<const CublasLibrary*> Load() {
  const std::string file = CublasLibrary::FileName();
  // RTLD_LOCAL: its symbols stay out of the global namespace; never closed (it lives as long
  // as any handle made from it, i.e. the process).
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS: cannot open ", file, ": ", why != nullptr ? why : "unknown error",
                     " (is the CUDA toolkit's lib64 on the library path?)"));
  }
  auto* lib = new CublasLibrary();  // leaked on purpose: the process's one copy
  std::string error;
  if (!Resolve(handle, "cublasCreate_v2", &lib->create, &error) ||
      !Resolve(handle, "cublasDestroy_v2", &lib->destroy, &error) ||
      !Resolve(handle, "cublasSetStream_v2", &lib->set_stream, &error) ||
      !Resolve(handle, "cublasGetStream_v2", &lib->get_stream, &error) ||
      !Resolve(handle, "cublasSetWorkspace_v2", &lib->set_workspace, &error) ||
      !Resolve(handle, "cublasSetPointerMode_v2", &lib->set_pointer_mode, &error) ||
      !Resolve(handle, "cublasGemmEx", &lib->gemm_ex, &error) ||
      !Resolve(handle, "cublasGetProperty", &lib->get_property, &error) ||
      !Resolve(handle, "cublasGetStatusName", &lib->status_name, &error)) {
    delete lib;
    return absl::FailedPreconditionError(absl::StrCat("cuBLAS: ", file, ": ", error));
  }
  return lib;
}

}  // namespace

std::string CublasLibrary::FileName() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

absl::StatusOr<const CublasLibrary*> CublasLibrary::Get() {
  // Initialised once, thread-safely, on the first call; never destroyed.
  static const auto* const loaded = new absl::StatusOr<const CublasLibrary*>(Load());
  return *loaded;
}

}  // namespace tpserve::cuda
