#include "comm/shm_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/combine.h"
#include "comm/mpi_check.h"

namespace dpt::dist {

// One rank's control words, each counter on its own cache line: peers poll them while
// their owner works.
struct alignas(64) ShmBuffer::RankControl {
  std::atomic<uint64_t> arrived;
  uint64_t offset, bytes;  // of the op it arrived at; written before `arrived` is released
  alignas(64) std::atomic<uint64_t> reduced;
};

namespace {

constexpr size_t kPage = 4096;

// The reduction of elements [begin, end) over every rank's buffer (regions[r] + offset) goes
// into `dest` (from its element 0), or with no dest back into every rank's buffer: a block at
// a time through a buffer that stays in L1, so each byte is read and written once.
template <class T, class Region>
void reduce_into(Region region, int size, size_t offset, int64_t begin, int64_t end, ReduceOp op, T* dest) {
  constexpr int64_t kBlock = 2048;
  alignas(64) T acc[kBlock];
  const T divisor = static_cast<T>(size);
  auto at = [&](int r, int64_t i) { return reinterpret_cast<T*>(region(r) + offset) + i; };
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    combine_blocks(acc, [&](int r) { return at(r, b); }, size, n, op);
    if (op == ReduceOp::avg)
      for (int64_t i = 0; i < n; ++i) acc[i] /= divisor;  // as the MPI path divides its sum
    if (dest) {
      std::memcpy(dest + (b - begin), acc, static_cast<size_t>(n) * sizeof(T));
      continue;
    }
    for (int r = 0; r < size; ++r) std::memcpy(at(r, b), acc, static_cast<size_t>(n) * sizeof(T));
  }
}

// `bytes` of zeroed POSIX shared memory that every rank of comm maps (see create()), or
// nullptr on every rank alike.
char* map_shared(MPI_Comm comm, size_t bytes, bool want) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int all_want = 0, mine = want ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all_want, 1, MPI_INT, MPI_MIN, comm));
  if (!all_want) return nullptr;

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
  return static_cast<char*>(base);
}

}  // namespace

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

std::shared_ptr<ShmBuffer> ShmBuffer::create(MPI_Comm comm, size_t bytes, bool want) {
  int size = 0, rank = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // Pages apart: no two ranks' buffers share a cache line or a page.
  const size_t header = round_up(sizeof(RankControl) * static_cast<size_t>(size), kPage);
  const size_t stride = round_up(std::max<size_t>(bytes, 1), kPage);
  const size_t mapped = header + stride * static_cast<size_t>(size);
  char* base = map_shared(comm, mapped, want);
  if (!base) return nullptr;
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters live in memory shared by processes");
  return std::shared_ptr<ShmBuffer>(new ShmBuffer(base, mapped, bytes, header, stride, size, rank));
}

ShmBuffer::ShmBuffer(char* base, size_t mapped, size_t bytes, size_t header_bytes, size_t stride, int size,
                     int rank)
    : base_(base), mapped_(mapped), bytes_(bytes), header_bytes_(header_bytes), stride_(stride), size_(size),
      rank_(rank) {}

ShmBuffer::~ShmBuffer() { munmap(base_, mapped_); }

ShmBuffer::RankControl& ShmBuffer::control(int rank) const {
  // The pages start zeroed, a valid atomic 0 on this platform.
  return reinterpret_cast<RankControl*>(base_)[rank];
}

void ShmBuffer::arrive(uint64_t seq, size_t offset, size_t bytes) {
  RankControl& mine = control(rank_);
  mine.offset = offset;
  mine.bytes = bytes;
  mine.arrived.store(seq, std::memory_order_release);
}

bool ShmBuffer::all_arrived(uint64_t seq, const Work& task, bool same_range) const {
  const RankControl& mine = control(rank_);
  for (int r = 0; r < size_; ++r) {
    const RankControl& other = control(r);
    if (other.arrived.load(std::memory_order_acquire) < seq) return false;
    DPT_CHECK(!same_range || (other.offset == mine.offset && other.bytes == mine.bytes))
        << task.describe() << ": rank " << r << " reduces bytes " << other.offset << ".." << other.offset + other.bytes
        << " of its shared buffer, this rank " << mine.offset << ".." << mine.offset + mine.bytes
        << " (a collective_buffer must be used alike on every rank)";
  }
  return true;
}

void ShmBuffer::reduce_share(uint64_t seq, size_t offset, int64_t count, DType dtype, ReduceOp op) {
  // Chunks of whole 64-byte blocks, so ranks seldom write the same cache line.
  const int64_t per_block = static_cast<int64_t>(64 / dtype_size(dtype));
  const Chunk mine = chunk_of((count + per_block - 1) / per_block, size_, rank_);
  const int64_t begin = std::min(count, mine.begin * per_block), end = std::min(count, mine.end * per_block);
  reduce_range(seq, offset, begin, end, dtype, op, nullptr);
}

void ShmBuffer::reduce_chunk(uint64_t seq, size_t offset, int64_t count, DType dtype, ReduceOp op, void* out) {
  const Chunk mine = chunk_of(count, size_, rank_);
  reduce_range(seq, offset, mine.begin, mine.end, dtype, op, out);
}

void ShmBuffer::reduce_range(uint64_t seq, size_t offset, int64_t begin, int64_t end, DType dtype,
                             ReduceOp op, void* dest) {
  with_element_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    reduce_into([this](int r) { return region(r); }, size_, offset, begin, end, op, static_cast<T*>(dest));
  });
  control(rank_).reduced.store(seq, std::memory_order_release);
}

void ShmBuffer::gather_chunks(uint64_t seq, size_t offset, int64_t count, DType dtype) {
  const size_t element = dtype_size(dtype);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Chunk theirs = chunk_of(count, size_, r);
    const size_t at = offset + static_cast<size_t>(theirs.begin) * element;
    std::memcpy(region(rank_) + at, region(r) + at, static_cast<size_t>(theirs.end - theirs.begin) * element);
  }
  control(rank_).reduced.store(seq, std::memory_order_release);
}

bool ShmBuffer::all_reduced(uint64_t seq) const {
  for (int r = 0; r < size_; ++r)
    if (control(r).reduced.load(std::memory_order_acquire) < seq) return false;
  return true;
}

}  // namespace dpt::dist
