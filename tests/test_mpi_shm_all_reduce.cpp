// The shared-memory path of small all-reduces (shm_buffer.h), under mpirun -np 2/3/4:
// many in flight at once with no wait between them (the double-buffered slots must never be
// overwritten early), interleaved with large ones that go through MPI, at every size up to
// the capacity and just past it; each result against its closed form, and against a group
// made with the shared-memory path switched off (DPT_SHM_ALLREDUCE_BYTES=0).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "mpi_waits.h"

using namespace dpt;
using namespace dpt::dist;

namespace {

// Integer-valued floats: sums are exact in any order, so closed forms compare with ==.
Tensor rank_tensor(int64_t n, int rank, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 3 + (i + salt) % 17);
  return Tensor::from_vector(v, {n});
}

float expected_sum(int64_t i, int size, int salt) {
  return static_cast<float>(3 * size * (size + 1) / 2 + size * ((i + salt) % 17));
}

TEST(ShmAllReduce, ManyInFlightInterleavedWithLargeOnes) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const int64_t capacity_floats = MpiProcessGroup::kShmAllReduceBytes / 4;
  std::vector<int64_t> sizes = {1, 2, 15, 16, 17, 255, capacity_floats - 1, capacity_floats, capacity_floats + 1,
                                100000};
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int round = 0; round < 25; ++round) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      int salt = round * 31 + static_cast<int>(k);
      tensors.push_back(rank_tensor(sizes[k], r, salt));
      works.push_back(w->all_reduce(tensors.back()));
    }
  }
  for (size_t j = works.size(); j-- > 0;) works[j]->wait();  // the last first: waits for all
  size_t j = 0;
  for (int round = 0; round < 25; ++round) {
    for (size_t k = 0; k < sizes.size(); ++k, ++j) {
      int salt = round * 31 + static_cast<int>(k);
      std::vector<float> got = tensors[j].to_vector();
      for (int64_t i = 0; i < sizes[k]; ++i) {
        ASSERT_EQ(got[i], expected_sum(i, n, salt)) << "round " << round << ", size " << sizes[k] << ", element " << i;
      }
    }
  }
}

TEST(ShmAllReduce, EveryOpAndDtypeMatchesTheMpiPath) {
  setenv("DPT_SHM_ALLREDUCE_BYTES", "0", 1);
  GroupPtr mpi_only = split(world(), 0, world()->rank());
  unsetenv("DPT_SHM_ALLREDUCE_BYTES");
  GroupPtr w = world();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
    for (int64_t size : {int64_t{1}, int64_t{333}, int64_t{4096}}) {
      Tensor a = rank_tensor(size, w->rank(), size), b = a.clone();
      auto first = w->all_reduce(a, op);
      auto second = mpi_only->all_reduce(b, op);
      first->wait();
      second->wait();
      EXPECT_EQ(a.to_vector(), b.to_vector()) << reduce_op_name(op) << " of " << size << " f32";

      std::vector<int64_t> ints(static_cast<size_t>(size));
      for (int64_t i = 0; i < size; ++i) ints[i] = (int64_t{1} << 40) * (w->rank() + 1) - i;
      Tensor c = Tensor::from_vector(ints, {size}), d = c.clone();
      w->all_reduce(c, op)->wait();
      mpi_only->all_reduce(d, op)->wait();
      EXPECT_EQ(std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + size),
                std::vector<int64_t>(d.data<int64_t>(), d.data<int64_t>() + size))
          << reduce_op_name(op) << " of " << size << " i64";
    }
  }
}

TEST(ShmAllReduce, IsCompletedAloneEventuallyCompletes) {
  // No wait(): polling is_completed() must be enough (it wakes the group's thread).
  Tensor t = rank_tensor(10, world()->rank(), 0);
  WorkPtr work = world()->all_reduce(t);
  ASSERT_TRUE(dpt::testing::completes_without_wait(*work))
      << "not complete after " << dpt::testing::kHungAfter.count() << " s of is_completed()";
  EXPECT_EQ(t.to_vector()[3], expected_sum(3, world()->size(), 0));
}

}  // namespace
