// MPI_CHECK: every MPI call dpt makes goes through it. Our communicators use
// MPI_ERRORS_RETURN, so a failure becomes a dpt::Error naming the call, file:line and MPI's
// own error string; and where MPI gives less than MPI_THREAD_MULTIPLE the call is serialised.
#pragma once

#include <mpi.h>

#include <mutex>
#include <string>

namespace dpt::dist::detail {

// Set once by dist::init(): true when MPI granted MPI_THREAD_SERIALIZED rather than
// MPI_THREAD_MULTIPLE. Then every MPI call takes one process-wide mutex.
extern bool mpi_serialized;
std::mutex& mpi_mutex();

// ensures: holds mpi_mutex() when mpi_serialized, else owns nothing (costs a branch).
inline std::unique_lock<std::mutex> mpi_guard() {
  return mpi_serialized ? std::unique_lock<std::mutex>(mpi_mutex()) : std::unique_lock<std::mutex>();
}

// MPI's text for an error code: "MPI_ERR_TRUNCATE: message truncated".
std::string mpi_error_string(int code);

// Throws dpt::Error; out of line so that the macro expands to a compare and a call.
[[noreturn]] void mpi_check_failed(const char* call, const char* file, int line, int code);

}  // namespace dpt::dist::detail

// MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
#define MPI_CHECK(call)                                                                  \
  do {                                                                                   \
    int dpt_mpi_status_;                                                                 \
    {                                                                                    \
      auto dpt_mpi_guard_ = ::dpt::dist::detail::mpi_guard();                            \
      dpt_mpi_status_ = (call);                                                          \
    }                                                                                    \
    if (dpt_mpi_status_ != MPI_SUCCESS)                                                  \
      ::dpt::dist::detail::mpi_check_failed(#call, __FILE__, __LINE__, dpt_mpi_status_); \
  } while (0)
