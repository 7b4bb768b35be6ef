// ShmSegment: the shared segment of a one-machine group, and the arrive / reduce steps of
// its small all-reduces (see the header for why the buffers cannot be overwritten early).
#include "comm/shm_all_reduce.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "comm/combine.h"
#include "comm/mpi_check.h"

namespace dpt::dist {
namespace {

constexpr size_t kHeader = 128;  // each rank's arrival counter on its own pair of cache lines

size_t capacity_from_environment(size_t fallback) {
  const char* text = std::getenv("DPT_SHM_ALLREDUCE_BYTES");
  if (!text || !*text) return fallback;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  DPT_CHECK(end && *end == '\0' && value >= 0 && value <= (1ll << 30))
      << "DPT_SHM_ALLREDUCE_BYTES must be a byte count 0..2^30 (0 disables the shared-memory all-reduce), got '"
      << text << "'";
  return static_cast<size_t>(value);
}

template <class T, class SlotOf>
void reduce_slots(T* out, SlotOf slot_of, int size, int64_t n, ReduceOp op) {
  std::memcpy(out, slot_of(0), static_cast<size_t>(n) * sizeof(T));
  for (int r = 1; r < size; ++r) combine(out, slot_of(r), n, op);  // avg: the task divides afterwards
}

}  // namespace

std::unique_ptr<ShmSegment> ShmSegment::create(MPI_Comm comm, size_t capacity) {
  int size = 0, rank = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // The smallest capacity any rank asks for, so all ranks take the same path for a message.
  unsigned long long mine = capacity_from_environment(capacity), agreed = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &agreed, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm));
  capacity = round_up(static_cast<size_t>(agreed), 64);
  if (capacity == 0) return nullptr;
  auto memory = SharedMapping::create(comm, (kHeader + 2 * capacity) * static_cast<size_t>(size));
  if (!memory) return nullptr;
  return std::unique_ptr<ShmSegment>(new ShmSegment(std::move(memory), capacity, size, rank));
}

ShmSegment::ShmSegment(std::unique_ptr<SharedMapping> memory, size_t capacity, int size, int rank)
    : memory_(std::move(memory)), capacity_(capacity), slot_stride_(kHeader + 2 * capacity), size_(size), rank_(rank) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "arrival counters live in memory shared by processes");
}

ShmSegment::~ShmSegment() = default;

std::atomic<uint64_t>& ShmSegment::arrived(int rank) const {
  // The pages start zeroed (ftruncate), which is a valid atomic 0 on this platform.
  return *reinterpret_cast<std::atomic<uint64_t>*>(memory_->data() + slot_stride_ * rank);
}

const char* ShmSegment::slot(int rank, uint64_t seq) const {
  return memory_->data() + slot_stride_ * rank + kHeader + (seq & 1) * capacity_;
}

void ShmSegment::arrive(uint64_t seq, const void* data, size_t bytes) {
  std::memcpy(const_cast<char*>(slot(rank_, seq)), data, bytes);
  arrived(rank_).store(seq, std::memory_order_release);
}

bool ShmSegment::all_arrived(uint64_t seq) const {
  for (int r = 0; r < size_; ++r)
    if (arrived(r).load(std::memory_order_acquire) < seq) return false;
  return true;
}

void ShmSegment::reduce(uint64_t seq, void* out, int64_t count, DType dtype, ReduceOp op) const {
  if (dtype == DType::i64) {
    auto slot_of = [&](int r) { return reinterpret_cast<const int64_t*>(slot(r, seq)); };
    reduce_slots(static_cast<int64_t*>(out), slot_of, size_, count, op);
  } else {
    auto slot_of = [&](int r) { return reinterpret_cast<const float*>(slot(r, seq)); };
    reduce_slots(static_cast<float*>(out), slot_of, size_, count, op);
  }
}

}  // namespace dpt::dist
