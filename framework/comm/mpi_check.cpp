// The out-of-line half of MPI_CHECK: the error message, and the mutex that serialises MPI
// calls when MPI does not grant MPI_THREAD_MULTIPLE.
#include "comm/mpi_check.h"

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace dpt::dist::detail {

bool mpi_serialized = false;

std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "unknown MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void mpi_check_failed(const char* call, const char* file, int line, int code) {
  const char* base = std::strrchr(file, '/');
  std::ostringstream message;
  message << "MPI error at " << (base ? base + 1 : file) << ":" << line << ": " << call << ": "
          << mpi_error_string(code);
  throw Error(message.str());
}

}  // namespace dpt::dist::detail
