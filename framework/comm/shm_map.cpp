#include "comm/shm_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "comm/mpi_check.h"

namespace dpt::dist {

std::unique_ptr<SharedMapping> SharedMapping::create(MPI_Comm comm, size_t bytes, bool want) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int all_want = 0, mine = want ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all_want, 1, MPI_INT, MPI_MIN, comm));
  if (!all_want || bytes == 0) return nullptr;

  static std::atomic<int> counter{0};
  char name[64] = {};
  int fd = -1;
  if (rank == 0) {
    std::snprintf(name, sizeof name, "/dpt-%d-%d", static_cast<int>(getpid()), counter++);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate, not just ftruncate: tmpfs pages are otherwise taken on first touch,
    // and a full /dev/shm would then kill the process with SIGBUS mid-training.
    if (fd >= 0 && (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
                    posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0)) {
      close(fd);
      fd = -1;
      shm_unlink(name);
      name[0] = '\0';
    }
  }
  MPI_CHECK(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm));
  if (rank != 0 && name[0]) fd = shm_open(name, O_RDWR, 0600);
  void* base = nullptr;
  if (fd >= 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) base = nullptr;
    close(fd);  // the mapping keeps the memory
  }
  int ok = base ? 1 : 0, all_ok = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));  // every rank has opened it by now
  if (rank == 0 && name[0]) shm_unlink(name);
  if (!all_ok) {
    if (base) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<SharedMapping>(new SharedMapping(static_cast<char*>(base), bytes));
}

SharedMapping::~SharedMapping() { munmap(base_, bytes_); }

bool all_on_this_node(MPI_Comm comm) {
  int size = 0, rank = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int node_size = 0;
  MPI_CHECK(MPI_Comm_size(node, &node_size));
  MPI_CHECK(MPI_Comm_free(&node));
  int local = node_size == size ? 1 : 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, comm));
  return all == 1;
}

}  // namespace dpt::dist
