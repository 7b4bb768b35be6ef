// The cold path of the CUDA_CHECK family: builds the one-line message and throws.
#include "backend/cuda/check.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace dpt::cuda::detail {

void check_failed(const char* library, const char* call, const char* file, int line, int code,
                  const char* text) {
  // A failed runtime call also sets the thread's "last error"; clear it, or the next
  // CUDA_CHECK(cudaGetLastError()) after a kernel launch would report this failure again.
  if (std::strcmp(library, "CUDA") == 0) (void)cudaGetLastError();
  const char* slash = std::strrchr(file, '/');
  throw Error(std::string(library) + " error at " + (slash ? slash + 1 : file) + ":" + std::to_string(line) +
              ": " + call + ": " + (text ? text : "unknown error") + " (code " + std::to_string(code) + ")");
}

}  // namespace dpt::cuda::detail
