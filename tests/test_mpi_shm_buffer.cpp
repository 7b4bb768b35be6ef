// Buffers all-reduced in place through shared memory (shm_buffer.h), under mpirun -np 2/3/4:
// the memory really is shared (a /dev/shm mapping), whole buffers and disjoint parts of one
// buffer in flight at once across several buffers, every op and dtype against the MPI path
// on private memory, bit-identical results on every rank, a rank that turns the path off
// turns it off for all, ranks that reduce different parts get an error instead of a hang, and
// only ranks of one host share memory (under tools/cluster.sh too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "mpi_waits.h"

using namespace dpt;
using namespace dpt::dist;

namespace {

// Whether [p, p + bytes) lies in a mapping of a /dev/shm file of dpt's (from /proc/self/maps).
bool in_shared_memory(const void* p, size_t bytes) {
  std::ifstream maps("/proc/self/maps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    const uintptr_t begin = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (address >= begin && address + bytes <= end) return line.find("/dev/shm/dpt-") != std::string::npos;
  }
  return false;
}

// Integer-valued floats: exact sums in any order, so results compare with closed forms.
float value(int rank, int64_t i, int salt) {
  return static_cast<float>((rank + 1) * 5 + (i * 7 + salt) % 23);
}
float expected_sum(int size, int64_t i, int salt) {
  return static_cast<float>(5 * size * (size + 1) / 2 + size * ((i * 7 + salt) % 23));
}

void fill(const Tensor& t, int rank, int salt) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value(rank, i, salt);
}

TEST(ShmBuffer, IsSharedMemoryAndZeroed) {
  GroupPtr w = world();
  Tensor t = w->collective_buffer(1000, DType::f32, Device::cpu());
  ASSERT_EQ(t.numel(), 1000);
  EXPECT_EQ(in_shared_memory(t.raw_data(), 4000), w->size() > 1 && info().node_count == 1);
  for (float x : t.to_vector()) ASSERT_EQ(x, 0.0f);
}

// Shared memory joins the ranks of one host and no others, even where hosts share /dev/shm
// (tools/cluster.sh's namespaces): a host's group maps one buffer, a group of one rank per
// host and the world across hosts reduce through MPI, each to the closed form.
TEST(ShmBuffer, OnlyAmongTheRanksOfOneHost) {
  GroupPtr w = world();
  const InitInfo& me = info();
  GroupPtr host = split(w, me.node, me.rank);
  GroupPtr across = split(w, me.local_rank, me.rank);  // one rank of each host
  const std::vector<std::pair<GroupPtr, bool>> cases = {
      {w, w->size() > 1 && me.node_count == 1}, {host, host->size() > 1}, {across, false}};
  for (const auto& [group, shared] : cases) {
    Tensor t = group->collective_buffer(1000, DType::f32, Device::cpu());
    EXPECT_EQ(in_shared_memory(t.raw_data(), 4000), shared) << group->name() << " on host " << me.host;
    fill(t, group->rank(), 5);
    group->all_reduce(t)->wait();
    for (int64_t i = 0; i < 1000; ++i)
      ASSERT_EQ(t.data<float>()[i], expected_sum(group->size(), i, 5)) << group->name() << ", element " << i;
  }
}

TEST(ShmBuffer, WholeBuffersAndPartsInFlightTogether) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  // Sizes around the 4 KB below which parts are copied through the small-message segment
  // instead, around the chunk split (64-byte blocks over the ranks), and one of 4 MB.
  std::vector<int64_t> sizes = {1, 17, 1024, 1025, 3 * 1024 + 16 * n - 1, 100003, 1 << 20};
  std::vector<Tensor> buffers;
  for (int64_t size : sizes) buffers.push_back(w->collective_buffer(size, DType::f32, Device::cpu()));
  for (int round = 0; round < 20; ++round) {
    std::vector<Tensor> parts;
    std::vector<WorkPtr> works;
    for (size_t b = 0; b < buffers.size(); ++b) {
      fill(buffers[b], r, round + static_cast<int>(b));
      const int64_t size = sizes[b];
      if (size >= 3 && round % 2 == 1) {  // three disjoint parts, not waited for in between
        const int64_t cut1 = size / 3, cut2 = 2 * size / 3;
        for (auto [begin, end] : {std::pair{cut1, cut2}, std::pair{int64_t{0}, cut1}, std::pair{cut2, size}})
          works.push_back(w->all_reduce(buffers[b].as_strided({end - begin}, {1}, begin)));
      } else {
        works.push_back(w->all_reduce(buffers[b]));
      }
    }
    works.back()->wait();  // completes every earlier one too
    for (size_t b = 0; b < buffers.size(); ++b) {
      const float* got = buffers[b].data<float>();
      for (int64_t i = 0; i < sizes[b]; ++i)
        ASSERT_EQ(got[i], expected_sum(n, i, round + static_cast<int>(b)))
            << "round " << round << ", buffer of " << sizes[b] << ", element " << i;
    }
  }
}

// reduce_scatter from a shared buffer and all_gather into one (ZeRO-1's pair, parallel/zero.h):
// sizes that leave ranks uneven or empty chunks, parts of a buffer, and all_gather's `in`
// both in place and private; against closed forms, with every rank's result poisoned first.
TEST(ShmBuffer, ReduceScatterAndAllGatherThroughSharedBuffers) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  for (int64_t size : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{1025}, int64_t{100003}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    Tensor grads = w->collective_buffer(size + 5, DType::f32, Device::cpu());
    Tensor params = w->collective_buffer(size + 5, DType::f32, Device::cpu());
    EXPECT_EQ(in_shared_memory(grads.raw_data(), 4), n > 1 && info().node_count == 1);
    const Tensor in = grads.as_strided({size}, {1}, 5), out_all = params.as_strided({size}, {1}, 3);
    const Chunk c = chunk_of(size, n, r);
    for (int round = 0; round < 3; ++round) {
      fill(in, r, round);
      Tensor sum = Tensor::full({c.end - c.begin}, -1.0f), avg = sum.clone();
      WorkPtr a = w->reduce_scatter(sum, in), b = w->reduce_scatter(avg, in, ReduceOp::avg);
      b->wait();
      a->wait();
      for (int64_t j = 0; j < c.end - c.begin; ++j) {
        ASSERT_EQ(sum.data<float>()[j], expected_sum(n, c.begin + j, round)) << "element " << c.begin + j;
        ASSERT_EQ(avg.data<float>()[j], expected_sum(n, c.begin + j, round) / static_cast<float>(n));
      }
      std::fill_n(out_all.data<float>(), size, -1.0f);
      const bool in_place = round != 1;
      Tensor mine = in_place ? out_all.as_strided({c.end - c.begin}, {1}, out_all.offset() + c.begin)
                             : Tensor::empty({c.end - c.begin});
      for (int64_t j = 0; j < c.end - c.begin; ++j)
        mine.data<float>()[j] = static_cast<float>(3 * (c.begin + j) + round);
      w->all_gather(out_all, mine)->wait();
      for (int64_t i = 0; i < size; ++i)
        ASSERT_EQ(out_all.data<float>()[i], static_cast<float>(3 * i + round))
            << "all_gather element " << i << (in_place ? ", in place" : "");
    }
  }
}

// f32: against a plain loop over every rank's input (gathered) in rank order, bit for bit —
// MPI's own order varies with the group size, so it is no reference for rounding. i64 (exact):
// against MPI on private memory.
TEST(ShmBuffer, EveryOpAndDtypeMatchesAPlainLoopBitForBit) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
    for (int64_t size : {int64_t{1}, int64_t{1001}, int64_t{1025}, int64_t{300000}}) {
      Tensor shared = w->collective_buffer(size, DType::f32, Device::cpu());
      Rng(100 + r).fill_normal(shared, 0.0f, 1.0f);
      Tensor inputs = Tensor::empty({size * n});
      w->all_gather(inputs, shared.clone())->wait();
      w->all_reduce(shared, op)->wait();
      const float* in = inputs.data<float>();
      std::vector<float> expected(in, in + size);
      for (int k = 1; k < n; ++k)
        for (int64_t i = 0; i < size; ++i) {
          const float x = in[k * size + i];
          if (op == ReduceOp::sum || op == ReduceOp::avg) expected[i] += x;
          if (op == ReduceOp::min) expected[i] = std::min(expected[i], x);
          if (op == ReduceOp::max) expected[i] = std::max(expected[i], x);
        }
      if (op == ReduceOp::avg)
        for (float& e : expected) e /= static_cast<float>(n);
      EXPECT_EQ(shared.to_vector(), expected) << reduce_op_name(op) << " of " << size << " f32";

      Tensor ints = w->collective_buffer(size, DType::i64, Device::cpu());
      int64_t* p = ints.data<int64_t>();
      for (int64_t i = 0; i < size; ++i) p[i] = (int64_t{1} << 40) * (r + 1) - 3 * i + r;
      Tensor ints_private = ints.clone();
      w->all_reduce(ints, op)->wait();
      w->all_reduce(ints_private, op)->wait();
      EXPECT_EQ(std::vector<int64_t>(p, p + size),
                std::vector<int64_t>(ints_private.data<int64_t>(), ints_private.data<int64_t>() + size))
          << reduce_op_name(op) << " of " << size << " i64";
    }
  }
}

TEST(ShmBuffer, ResultsAreBitIdenticalOnEveryRank) {
  GroupPtr w = world();
  const int n = w->size();
  Tensor t = w->collective_buffer(5000, DType::f32, Device::cpu());
  Rng(7 + w->rank()).fill_normal(t, 0.0f, 1.0f);
  w->all_reduce(t, ReduceOp::avg)->wait();
  Tensor all = Tensor::empty({5000 * n});
  w->all_gather(all, t)->wait();
  std::vector<float> v = all.to_vector();
  for (int k = 1; k < n; ++k)
    ASSERT_TRUE(std::equal(v.begin(), v.begin() + 5000, v.begin() + 5000 * k)) << "rank " << k << " differs";
}

TEST(ShmBuffer, IsCompletedAloneCompletes) {
  Tensor t = world()->collective_buffer(10, DType::f32, Device::cpu());
  fill(t, world()->rank(), 3);
  WorkPtr work = world()->all_reduce(t);
  ASSERT_TRUE(dpt::testing::completes_without_wait(*work))
      << "not complete after " << dpt::testing::kHungAfter.count() << " s of is_completed()";
  EXPECT_EQ(t.data<float>()[4], expected_sum(world()->size(), 4, 3));
}

TEST(ShmBuffer, OneRankTurningItOffTurnsItOffForAll) {
  GroupPtr w = world();
  if (w->rank() == w->size() - 1) setenv("DPT_SHM_BUFFERS", "0", 1);
  Tensor t = w->collective_buffer(777, DType::f32, Device::cpu());
  unsetenv("DPT_SHM_BUFFERS");
  EXPECT_FALSE(in_shared_memory(t.raw_data(), 777 * 4));
  fill(t, w->rank(), 9);
  w->all_reduce(t)->wait();  // through MPI on every rank: a mix would hang
  for (int64_t i = 0; i < 777; ++i) ASSERT_EQ(t.data<float>()[i], expected_sum(w->size(), i, 9));
}

TEST(ShmBuffer, RanksReducingDifferentPartsGetAnError) {
  GroupPtr w = world();
  if (w->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Tensor t = w->collective_buffer(20000, DType::f32, Device::cpu());
  const int64_t begin = w->rank() == 0 ? 0 : 10000;
  try {
    w->all_reduce(t.as_strided({10000}, {1}, begin))->wait();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of its shared buffer"), std::string::npos) << e.what();
  }
}

}  // namespace
