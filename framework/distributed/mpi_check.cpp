// The out-of-line half of MPI_CHECK: the error message, and the mutex that serialises MPI
// calls when MPI does not grant MPI_THREAD_MULTIPLE.
#include "distributed/mpi_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace dpt::dist::detail {

bool mpi_serialized = false;
bool mpi_yields_when_idle = false;

std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool read_mpi_yields_when_idle() {
  int provided = 0, index = 0, count = 0, size = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
  bool yields = false;
  MPI_T_cvar_handle handle;
  char name[256];
  int name_length = sizeof name, verbosity = 0, bind = 0, scope = 0;
  MPI_Datatype type;
  MPI_T_enum enumtype;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS &&
      MPI_T_cvar_get_info(index, name, &name_length, &verbosity, &type, &enumtype, nullptr, nullptr, &bind,
                          &scope) == MPI_SUCCESS &&
      MPI_Type_size(type, &size) == MPI_SUCCESS && size >= 1 && size <= 8 &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    unsigned char value[8] = {};  // Open MPI's is a one-byte bool
    if (count == 1 && MPI_T_cvar_read(handle, value) == MPI_SUCCESS)
      yields = std::any_of(value, value + size, [](unsigned char b) { return b != 0; });
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return yields;
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
