// One block of POSIX shared memory mapped by every rank of a communicator whose ranks all
// run on this machine: the plumbing under the shared-memory all-reduces (shm_buffer.h,
// for small messages and for buffers reduced in place).
//
// Why POSIX shared memory and not an MPI window: unmapping is local, so groups and buffers
// may be freed in any order on each rank, without a collective MPI_Win_free that could
// deadlock.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

namespace dpt::dist {

class SharedMapping {
 public:
  // Collective over comm (on its calling thread; no collective may be in flight on it).
  // Returns nullptr on every rank alike when any rank passes want = false or cannot create
  // or map the memory (no /dev/shm, or too little room: the bytes are reserved up front, so
  // a full /dev/shm fails here rather than with SIGBUS on first touch). The memory starts
  // zeroed; its name is unlinked once every rank has mapped it, so nothing outlives the
  // processes.
  static std::unique_ptr<SharedMapping> create(MPI_Comm comm, size_t bytes, bool want = true);
  ~SharedMapping();  // munmap: local
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  char* data() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  SharedMapping(char* base, size_t bytes) : base_(base), bytes_(bytes) {}
  char* base_;
  size_t bytes_;
};

// Whether every rank of comm runs on this machine. Collective over comm.
bool all_on_this_node(MPI_Comm comm);

inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace dpt::dist
