// Collectives of the world group under mpirun (np 1-4, and as a plain process), each
// checked against a closed form of rank-dependent inputs (flashlight's AllReduceTest).
// To add one: give rank r an input that is a simple function of (r, i), work out the
// result in closed form, and check every element (values stay exact integers in f32).
// Every rank runs every test; collectives come before the checks, so one rank's failed
// EXPECT cannot leave the others waiting.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "closed_form.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "mpi_waits.h"

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::expect_values;
using dpt::testing::make;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, (1 << 20) + 3};
const std::vector<int64_t> kChunkedSizes = {0, 1, 2, 3, 5, 7, 10, 1000003};  // most do not divide by np
constexpr int64_t kBig = int64_t(1) << 33;                                   // i64 values beyond 32 bits

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Case {
  std::string what;
  int64_t n;
};

}  // namespace

TEST(MpiCollectives, InitInfo) {
  const InitInfo& i = info();
  GroupPtr w = world();
  EXPECT_EQ(i.world_size, w->size());
  EXPECT_EQ(i.rank, w->rank());
  EXPECT_EQ(w->name(), "world");
  // The ranks of a host against those that report its name (tools/cluster.sh's hosts have
  // names of their own): local rank and size, and hosts numbered by their lowest rank.
  std::vector<char> names(256 * static_cast<size_t>(i.world_size), '\0');
  char mine[256] = {};
  gethostname(mine, sizeof mine - 1);
  MPI_Allgather(mine, 256, MPI_CHAR, names.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
  auto name_of = [&](int r) { return std::string(names.data() + 256 * r); };
  int local_size = 0, local_rank = 0, node = -1;
  std::vector<std::string> hosts;  // in order of their lowest rank
  for (int r = 0; r < i.world_size; ++r) {
    if (std::find(hosts.begin(), hosts.end(), name_of(r)) == hosts.end()) hosts.push_back(name_of(r));
    if (name_of(r) != mine) continue;
    ++local_size;
    if (r < i.rank) ++local_rank;
    node = static_cast<int>(hosts.size()) - 1;
  }
  EXPECT_EQ(i.host, mine);
  EXPECT_EQ(i.local_size, local_size);
  EXPECT_EQ(i.local_rank, local_rank);
  EXPECT_EQ(i.node, node);
  EXPECT_EQ(i.node_count, static_cast<int>(hosts.size()));
  for (int r = 0; r < w->size(); ++r) EXPECT_EQ(w->world_ranks()[r], r);
  EXPECT_TRUE(initialized());
  EXPECT_EQ(&init(), &info());  // idempotent
}

TEST(MpiCollectives, AllReduceF32) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;  // sum over ranks of r + 1
  for (int64_t size : kSizes) {
    auto input = [&](int64_t i) { return (r + 1) + i % 101; };
    Tensor sum = make<float>(size, input), avg = make<float>(size, input);
    Tensor mn = make<float>(size, input), mx = make<float>(size, input);
    auto works = {w->all_reduce(sum), w->all_reduce(avg, ReduceOp::avg), w->all_reduce(mn, ReduceOp::min),
                  w->all_reduce(mx, ReduceOp::max)};
    for (const auto& work : works) work->wait();
    std::string at = " at n " + std::to_string(size);
    expect_values<float>(
        sum, [&](int64_t i) { return s + n * (i % 101); }, "sum" + at);
    expect_values<float>(
        avg, [&](int64_t i) { return static_cast<float>(s + n * (i % 101)) / n; }, "avg" + at);
    expect_values<float>(
        mn, [&](int64_t i) { return 1 + i % 101; }, "min" + at);
    expect_values<float>(
        mx, [&](int64_t i) { return n + i % 101; }, "max" + at);
  }
}

TEST(MpiCollectives, AllReduceI64) {
  GroupPtr w = world();
  const int64_t n = w->size(), r = w->rank();
  const int64_t s = n * (n + 1) / 2;
  for (int64_t size : kSizes) {
    auto input = [&](int64_t i) { return (r + 1) * kBig + i; };
    Tensor sum = make<int64_t>(size, input), avg = make<int64_t>(size, input);
    Tensor mn = make<int64_t>(size, input), mx = make<int64_t>(size, input);
    auto works = {w->all_reduce(sum), w->all_reduce(avg, ReduceOp::avg), w->all_reduce(mn, ReduceOp::min),
                  w->all_reduce(mx, ReduceOp::max)};
    for (const auto& work : works) work->wait();
    std::string at = " at n " + std::to_string(size);
    expect_values<int64_t>(
        sum, [&](int64_t i) { return s * kBig + n * i; }, "sum" + at);
    expect_values<int64_t>(
        avg, [&](int64_t i) { return (s * kBig + n * i) / n; }, "avg" + at);
    expect_values<int64_t>(
        mn, [&](int64_t i) { return kBig + i; }, "min" + at);
    expect_values<int64_t>(
        mx, [&](int64_t i) { return n * kBig + i; }, "max" + at);
  }
}

TEST(MpiCollectives, BroadcastFromEveryRoot) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  for (int root = 0; root < n; ++root) {
    for (int64_t size : kSizes) {
      Tensor f = make<float>(size, [&](int64_t i) { return r * 1000 + i % 1000; });
      Tensor l = make<int64_t>(size, [&](int64_t i) { return r * kBig + i; });
      WorkPtr a = w->broadcast(f, root), b = w->broadcast(l, root);
      b->wait();
      EXPECT_TRUE(a->is_completed());  // completion in call order
      std::string at = " from root " + std::to_string(root) + " at n " + std::to_string(size);
      expect_values<float>(
          f, [&](int64_t i) { return root * 1000 + i % 1000; }, "f32" + at);
      expect_values<int64_t>(
          l, [&](int64_t i) { return root * kBig + i; }, "i64" + at);
    }
  }
}

TEST(MpiCollectives, AllGatherUneven) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  for (int64_t size : kChunkedSizes) {
    Chunk c = chunk_of(size, n, r);
    Tensor out = make<float>(size, [](int64_t) { return -1; });
    Tensor in = make<float>(c.end - c.begin, [&](int64_t j) { return 2 * (c.begin + j) + 1; });
    Tensor out64 = make<int64_t>(size, [](int64_t) { return -1; });
    Tensor in64 = make<int64_t>(c.end - c.begin, [&](int64_t j) { return (c.begin + j) * kBig + 7; });
    // In place: `in` is this rank's own chunk of `out`.
    Tensor out_in_place =
        make<float>(size, [&](int64_t i) { return i >= c.begin && i < c.end ? 2 * i + 1 : -1; });
    Tensor own = out_in_place.as_strided({c.end - c.begin}, {1}, c.begin);
    WorkPtr a = w->all_gather(out, in), b = w->all_gather(out64, in64), d = w->all_gather(out_in_place, own);
    d->wait();
    b->wait();
    a->wait();
    std::string at = " at n " + std::to_string(size);
    expect_values<float>(
        out, [](int64_t i) { return 2 * i + 1; }, "f32" + at);
    expect_values<int64_t>(
        out64, [](int64_t i) { return i * kBig + 7; }, "i64" + at);
    expect_values<float>(
        out_in_place, [](int64_t i) { return 2 * i + 1; }, "in place" + at);
  }
}

TEST(MpiCollectives, ReduceScatterUneven) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;
  for (int64_t size : kChunkedSizes) {
    Chunk c = chunk_of(size, n, r);
    auto input = [&](int64_t i) { return (r + 1) + i % 7; };
    Tensor in = make<float>(size, input);
    std::vector<Tensor> outs;
    std::vector<WorkPtr> works;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      outs.push_back(make<float>(c.end - c.begin, [](int64_t) { return -1; }));
      works.push_back(w->reduce_scatter(outs.back(), in, op));
    }
    Tensor in64 = make<int64_t>(size, [&](int64_t i) { return (r + 1) * kBig + i; });
    Tensor out64 = make<int64_t>(c.end - c.begin, [](int64_t) { return -1; });
    works.push_back(w->reduce_scatter(out64, in64));
    for (const auto& work : works) work->wait();
    std::string at = " at n " + std::to_string(size) + ", rank " + std::to_string(r);
    auto g = [&](int64_t j) { return c.begin + j; };  // element j of the chunk is element g(j) of the whole
    expect_values<float>(
        outs[0], [&](int64_t j) { return s + n * (g(j) % 7); }, "sum" + at);
    expect_values<float>(
        outs[1], [&](int64_t j) { return static_cast<float>(s + n * (g(j) % 7)) / n; }, "avg" + at);
    expect_values<float>(
        outs[2], [&](int64_t j) { return 1 + g(j) % 7; }, "min" + at);
    expect_values<float>(
        outs[3], [&](int64_t j) { return n + g(j) % 7; }, "max" + at);
    expect_values<int64_t>(
        out64, [&](int64_t j) { return static_cast<int64_t>(s) * kBig + n * g(j); }, "i64 sum" + at);
  }
}

TEST(MpiCollectives, BarrierWaitsForTheSlowestRank) {
  // Rank 0 comes 200 ms late; no rank may leave the barrier before rank 0 entered it. The
  // ranks compare moments on steady_clock, which is one clock (CLOCK_MONOTONIC) for every
  // process on this machine, so the check is an ordering: how long the others waited
  // depends on how busy the machine is, not on the barrier.
  GroupPtr w = world();
  w->barrier()->wait();
  using Clock = std::chrono::steady_clock;
  if (w->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t entered = Clock::now().time_since_epoch().count();
  w->barrier()->wait();
  const int64_t left = Clock::now().time_since_epoch().count();
  Tensor rank0_entered = Tensor::from_vector(std::vector<int64_t>{entered}, {1});
  w->broadcast(rank0_entered, 0)->wait();
  EXPECT_GE(left, rank0_entered.data<int64_t>()[0]) << "the barrier returned before rank 0 reached it";
  for (int i = 0; i < 20; ++i) w->barrier()->wait();
}

TEST(MpiCollectives, SendRecvRing) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t size : kSizes) {
    // Large messages use rendezvous: a send completes only once its recv is posted, so
    // this deadlocks unless the recv starts while the send is in flight.
    Tensor mine = make<float>(size, [&](int64_t i) { return r * 10 + i % 10; });
    Tensor got = make<float>(size, [](int64_t) { return -1; });
    WorkPtr s = w->send(mine, next, 3), q = w->recv(got, prev, 3);
    q->wait();
    s->wait();
    expect_values<float>(
        got, [&](int64_t i) { return prev * 10 + i % 10; }, "ring at n " + std::to_string(size));
  }
  // Tags select the message: received in the other order than sent.
  Tensor a = make<int64_t>(3, [&](int64_t i) { return r * kBig + i; }),
         b = make<int64_t>(5, [&](int64_t) { return r; });
  Tensor got_a = make<int64_t>(3, [](int64_t) { return -1; }),
         got_b = make<int64_t>(5, [](int64_t) { return -1; });
  WorkPtr sa = w->send(a, next, 1), sb = w->send(b, next, 2);
  WorkPtr qb = w->recv(got_b, prev, 2), qa = w->recv(got_a, prev, 1);
  qa->wait();
  sb->wait();
  sa->wait();
  qb->wait();
  expect_values<int64_t>(
      got_a, [&](int64_t i) { return prev * kBig + i; }, "tag 1");
  expect_values<int64_t>(
      got_b, [&](int64_t) { return prev; }, "tag 2");
}

TEST(MpiCollectives, RecvOfAShorterMessageFailsAtWait) {
  GroupPtr w = world();
  if (w->size() == 1) GTEST_SKIP() << "needs two ranks";
  if (w->rank() == 0) {
    WorkPtr s = w->send(make<float>(5, [](int64_t i) { return i; }), 1, 7);
    s->wait();
  } else if (w->rank() == 1) {
    Tensor got = Tensor::zeros({6});
    WorkPtr q = w->recv(got, 0, 7);
    std::string message = error_of([&] { q->wait(); });
    EXPECT_NE(
        message.find("recv of 6 f32 from rank 0 (tag 7) on world: expected 6 elements, the message had 5"),
        std::string::npos)
        << message;
    EXPECT_EQ(error_of([&] { q->wait(); }), message);  // every wait() rethrows
  }
  w->barrier()->wait();
}

TEST(MpiCollectives, ManyInFlightWaitedInReverse) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  // Two chains on one tensor each, whose result shows the order the ops ran in, among
  // independent all-reduces of various sizes.
  Tensor chain_a = make<float>(5, [&](int64_t) { return r + 1; });  // max then sum: n * n
  Tensor chain_b = make<int64_t>(4, [&](int64_t) { return r; });    // broadcast(0) then sum: 0
  std::vector<Tensor> independent;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 40; ++k) {
    if (k == 3) works.push_back(w->all_reduce(chain_a, ReduceOp::max));
    if (k == 4) works.push_back(w->broadcast(chain_b, 0));
    if (k == 20) works.push_back(w->all_reduce(chain_a, ReduceOp::sum));
    if (k == 21) works.push_back(w->all_reduce(chain_b, ReduceOp::sum));
    independent.push_back(make<float>(k * 997 % 5000, [&](int64_t i) { return (r + 1) * (k + 1) + i % 3; }));
    works.push_back(w->all_reduce(independent.back()));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) {
    (*it)->wait();
    if (it == works.rbegin()) {
      for (const auto& work : works) EXPECT_TRUE(work->is_completed()) << "completion out of call order";
    }
  }
  const double s = n * (n + 1) / 2.0;
  for (int k = 0; k < 40; ++k) {
    expect_values<float>(
        independent[k], [&](int64_t i) { return s * (k + 1) + n * (i % 3); },
        "independent " + std::to_string(k));
  }
  expect_values<float>(
      chain_a, [&](int64_t) { return n * n; }, "max then sum");
  expect_values<int64_t>(
      chain_b, [&](int64_t) { return 0; }, "broadcast from 0 then sum");
}

TEST(MpiCollectives, ErrorsAtTheCall) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  Chunk c = chunk_of(10, n, r);
  std::string m = error_of([&] { w->all_gather(Tensor::zeros({10}), Tensor::zeros({c.end - c.begin + 1})); });
  EXPECT_TRUE(has(m, "all_gather on world: out has 10 elements, so rank " + std::to_string(r) +
                         "'s in must have " + std::to_string(c.end - c.begin) + " (chunk_of), got " +
                         std::to_string(c.end - c.begin + 1)))
      << m;
  m = error_of([&] { w->reduce_scatter(Tensor::zeros({c.end - c.begin + 2}), Tensor::zeros({10})); });
  EXPECT_TRUE(has(m, "reduce_scatter on world: in has 10 elements, so rank " + std::to_string(r))) << m;
  m = error_of([&] { w->all_gather(Tensor::zeros({10}, DType::i64), Tensor::zeros({c.end - c.begin})); });
  EXPECT_TRUE(has(m, "all_gather on world: out is i64 but in is f32")) << m;
  m = error_of([&] { w->all_reduce(Tensor::zeros({4}, DType::bf16)); });
  EXPECT_TRUE(has(m, "all_reduce on world: the tensor has dtype bf16; the MPI backend supports f32 and i64"))
      << m;
  m = error_of([&] { w->all_reduce(Tensor::zeros({2, 3}).as_strided({3, 2}, {1, 3}, 0)); });
  EXPECT_TRUE(has(m, "all_reduce on world: the tensor (shape [3, 2]) must be contiguous")) << m;
  m = error_of([&] { w->all_reduce(Tensor()); });
  EXPECT_TRUE(has(m, "all_reduce on world: the tensor is an undefined tensor")) << m;
  m = error_of([&] { w->broadcast(Tensor::zeros({1}), n); });
  EXPECT_TRUE(has(m, "broadcast on world: root " + std::to_string(n) + " is not a rank of this group of " +
                         std::to_string(n)))
      << m;
  m = error_of([&] { w->send(Tensor::zeros({1}), r); });
  EXPECT_TRUE(has(m, "send on world: dst " + std::to_string(r) + " is this rank")) << m;
  m = error_of([&] { w->recv(Tensor::zeros({1}), -1); });
  EXPECT_TRUE(has(m, "recv on world: src -1 is not a rank")) << m;
  m = error_of([&] { w->send(Tensor::zeros({1}), (r + 1) % n, -2); });
  if (n > 1) {
    EXPECT_TRUE(has(m, "send on world: tag -2 is outside 0..")) << m;
  }
  Tensor storage = Tensor::zeros({16});
  Chunk c8 = chunk_of(8, n, r);
  Tensor out = storage.as_strided({8}, {1}, 0),
         shifted = storage.as_strided({c8.end - c8.begin}, {1}, c8.begin + 1);
  m = error_of([&] { w->all_gather(out, shifted); });
  if (c8.end > c8.begin) {
    EXPECT_TRUE(has(m, "all_gather on world: in overlaps out other than as rank")) << m;
  }

  // A size only one rank gets wrong is caught on that rank, before anything is sent.
  if (n > 1 && r == 1) {
    m = error_of([&] { w->all_gather(Tensor::zeros({10}), Tensor::zeros({4})); });
    EXPECT_TRUE(has(m, "all_gather on world: out has 10 elements, so rank 1's in must have")) << m;
  }
  w->barrier()->wait();  // and the group is still usable
}

TEST(MpiCollectives, TimeoutNamesTheCollective) {
  GroupPtr w = world();
  if (w->size() == 1) GTEST_SKIP() << "needs two ranks";
  auto* mpi = dynamic_cast<MpiProcessGroup*>(w.get());
  ASSERT_NE(mpi, nullptr);
  Tensor got = Tensor::zeros({3});
  if (w->rank() == 0) {
    mpi->set_timeout(std::chrono::milliseconds(200));
    WorkPtr q = w->recv(got, 1, 99);  // rank 1 sends only after the barrier below
    mpi->set_timeout(std::chrono::milliseconds(0));
    std::string m = error_of([&] { q->wait(); });
    EXPECT_NE(m.find("recv of 3 f32 from rank 1 (tag 99) on world: not complete after 0.2"),
              std::string::npos)
        << m;
    w->barrier()->wait();
    q->wait();  // now complete
    expect_values<float>(
        got, [](int64_t i) { return i; }, "late message");
  } else {
    w->barrier()->wait();
    if (w->rank() == 1) w->send(make<float>(3, [](int64_t i) { return i; }), 0, 99)->wait();
  }
}

// The paths of comm_thread.h: the caller starts a collective when the group's poll token is
// free and polls its own in wait(); the communication thread progresses what is left in
// flight.
namespace {

MpiProcessGroup& mpi_world() {
  auto* mpi = dynamic_cast<MpiProcessGroup*>(world().get());
  if (!mpi) throw std::runtime_error("world() is not an MpiProcessGroup");
  return *mpi;
}

// Runs `body` with the (only) poll policy; the name is what messages print.
void for_each_policy(const std::function<void(const std::string&)>& body) { body("caller progress"); }

}  // namespace

TEST(MpiCommPaths, WaitsInEveryOrderWhileTheThreadHasWorkInFlight) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;
  const std::vector<int64_t> sizes = {1, 300000, 7, 1 << 20, 0, 5000};
  // Wait orders: the middle first, the last first, the first first, and a jumble.
  const std::vector<std::vector<int>> orders = {
      {2, 5, 0, 1, 3, 4}, {5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5}, {3, 0, 5, 1, 4, 2}};
  for_each_policy([&](const std::string& policy) {
    for (const auto& order : orders) {
      std::vector<Tensor> tensors;
      std::vector<WorkPtr> works;
      for (size_t k = 0; k < sizes.size(); ++k) {
        tensors.push_back(make<float>(sizes[k], [&](int64_t i) { return (r + 1) * (k + 1) + i % 5; }));
        works.push_back(w->all_reduce(tensors.back()));
        // As between DDP's buckets: compute, while the thread polls what is in flight.
        if (k % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
      for (int k : order) {
        works[k]->wait();
        for (int j = 0; j <= k; ++j) {
          EXPECT_TRUE(works[j]->is_completed())
              << policy << ": work " << j << " not complete after wait() on " << k;
        }
      }
      for (size_t k = 0; k < sizes.size(); ++k) {
        expect_values<float>(
            tensors[k], [&](int64_t i) { return s * (k + 1) + n * (i % 5); },
            policy + ", tensor " + std::to_string(k));
      }
    }
  });
}

TEST(MpiCommPaths, CallerStartedThenMoreWithoutWaiting) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;
  for_each_policy([&](const std::string& policy) {
    for (int64_t size : {int64_t(1), int64_t(1000), int64_t(1) << 19}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the thread is idle: the caller starts
      Tensor a = make<float>(size, [&](int64_t i) { return r + 1 + i % 3; });
      Tensor b = make<int64_t>(size, [&](int64_t i) { return (r + 1) * kBig + i; });
      Chunk c = chunk_of(size, n, r);
      Tensor gathered = make<float>(size, [](int64_t) { return -1; });
      Tensor scattered = make<float>(c.end - c.begin, [](int64_t) { return -1; });
      std::vector<WorkPtr> works;
      works.push_back(w->all_reduce(a));                 // started by the caller
      works.push_back(w->all_reduce(b, ReduceOp::max));  // independent: may start at once
      works.push_back(w->broadcast(a, n - 1));           // writes a: after the first
      works.push_back(w->all_gather(gathered, a.as_strided({c.end - c.begin}, {1}, c.begin)));  // reads a
      works.push_back(w->reduce_scatter(scattered, a));  // reads a, after the broadcast
      works.push_back(w->barrier());
      works.push_back(w->all_reduce(a));  // writes a: after all the above
      works.back()->wait();
      for (size_t k = 0; k < works.size(); ++k) {
        EXPECT_TRUE(works[k]->is_completed()) << policy << ": work " << k << " at n " << size;
      }
      std::string at = policy + " at n " + std::to_string(size);
      // a: summed (s + n * (i % 3)), broadcast (the same everywhere), summed again (times n).
      expect_values<float>(
          a, [&](int64_t i) { return n * (s + n * (i % 3)); }, "a, " + at);
      expect_values<int64_t>(
          b, [&](int64_t i) { return n * kBig + i; }, "b, " + at);
      expect_values<float>(
          gathered, [&](int64_t i) { return s + n * (i % 3); }, "all_gather, " + at);
      expect_values<float>(
          scattered, [&](int64_t j) { return n * (s + n * ((c.begin + j) % 3)); }, "reduce_scatter, " + at);
    }
  });
}

TEST(MpiCommPaths, CallerStartedCompletesWithoutWait) {
  // A collective the caller starts and leaves in flight while it computes: only the
  // communication thread can progress it (a 4 MB all_reduce needs several rounds of MPI
  // progress), also after the thread has been idle long enough to block.
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  for_each_policy([&](const std::string& policy) {
    for (int k = 0; k < 3; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      Tensor t = make<float>(1 << 20, [&](int64_t i) { return r + 1 + i % 2; });
      WorkPtr work = w->all_reduce(t);
      EXPECT_TRUE(dpt::testing::completes_without_wait(*work)) << policy;
      work->wait();
      expect_values<float>(
          t, [&](int64_t i) { return n * (n + 1) / 2 + n * (i % 2); }, policy);
    }
  });
}

TEST(MpiCommPaths, WaitsFromSeveralThreads) {
  // One thread at a time polls; the others sleep until the collective they wait for is
  // complete, whoever completes it. Collectives are posted by one thread only (the call
  // order must be the same on every rank).
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;
  for_each_policy([&](const std::string& policy) {
    for (int round = 0; round < 10; ++round) {
      std::vector<Tensor> tensors;
      std::vector<WorkPtr> works;
      for (int k = 0; k < 8; ++k) {
        tensors.push_back(
            make<float>(k % 2 ? 100000 : 10, [&](int64_t i) { return (r + 1) * (k + 1) + i % 3; }));
        works.push_back(w->all_reduce(tensors.back()));
      }
      std::vector<std::string> errors(3);
      auto waiter = [&](int which, int slot) {
        try {
          works[which]->wait();
          for (int j = 0; j <= which; ++j) {
            if (!works[j]->is_completed()) errors[slot] = "work " + std::to_string(j) + " not complete";
          }
        } catch (const std::exception& e) {
          errors[slot] = e.what();
        }
      };
      std::thread late(waiter, 7, 0), early(waiter, (round % 3) + 1, 1);
      waiter(4, 2);
      late.join();
      early.join();
      for (const auto& e : errors) EXPECT_EQ(e, "") << policy << ", round " << round;
      for (int k = 0; k < 8; ++k) {
        expect_values<float>(
            tensors[k], [&](int64_t i) { return s * (k + 1) + n * (i % 3); },
            policy + ", tensor " + std::to_string(k));
      }
    }
  });
}

TEST(MpiCommPaths, RandomCallsAndWaits) {
  // The same calls on every rank (one seed), but waits, their order and pauses that differ
  // per rank, so the threads of each rank race differently. Tensor j is summed counts[j]
  // times: rank r starts it at r + 1, so it ends at s * n^(counts[j] - 1).
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  const double s = n * (n + 1) / 2.0;
  const std::vector<int64_t> sizes = {1, 1000, 100000};
  for_each_policy([&](const std::string& policy) {
    std::mt19937 calls(1234), mine(99 + r);
    for (int iteration = 0; iteration < 60; ++iteration) {
      std::vector<Tensor> tensors;
      for (int64_t size : sizes) tensors.push_back(make<float>(size, [&](int64_t) { return r + 1; }));
      std::vector<int> counts(sizes.size(), 0);
      std::vector<WorkPtr> works;
      const int ops = 1 + static_cast<int>(calls() % 6);
      for (int k = 0; k < ops; ++k) {
        const size_t j = calls() % sizes.size();
        if (calls() % 4 == 0) {
          works.push_back(w->barrier());
        } else {
          works.push_back(w->all_reduce(tensors[j]));
          ++counts[j];
        }
        if (mine() % 3 == 0) works[mine() % works.size()]->wait();
        if (mine() % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(mine() % 400));
      }
      std::shuffle(works.begin(), works.end(), mine);
      for (const auto& work : works) work->wait();
      for (size_t j = 0; j < sizes.size(); ++j) {
        double expected = r + 1;
        if (counts[j] > 0) expected = s * std::pow(n, counts[j] - 1);
        expect_values<float>(
            tensors[j], [&](int64_t) { return expected; },
            policy + ", iteration " + std::to_string(iteration) + ", tensor " + std::to_string(j));
      }
    }
  });
}

TEST(MpiCommPaths, TimeoutWhileTheCallerPolls) {
  // Rank 0 polls its barrier in wait() and gives up after 0.2 s; the barrier stays in flight,
  // the communication thread completes it once the other ranks arrive (no wait() needed),
  // and a collective posted after the timed-out one still runs after it. The other ranks
  // arrive only once rank 0 has timed out (AfterTheTimeouts), however slow the machine.
  GroupPtr w = world();
  if (w->size() == 1) GTEST_SKIP() << "needs two ranks";
  const int n = w->size(), r = w->rank();
  dpt::testing::AfterTheTimeouts after_the_timeouts;
  for_each_policy([&](const std::string& policy) {
    Tensor x = make<float>(1000, [&](int64_t i) { return r + 1 + i % 2; });
    if (r == 0) {
      mpi_world().set_timeout(std::chrono::milliseconds(200));
      WorkPtr b = w->barrier();
      mpi_world().set_timeout(std::chrono::milliseconds(0));
      auto begin = std::chrono::steady_clock::now();
      std::string m = error_of([&] { b->wait(); });
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      after_the_timeouts.timed_out();
      // Its number in the group, and who has not called it: every other rank, held back.
      EXPECT_NE(m.find("barrier on world (collective #"), std::string::npos) << policy << ": " << m;
      EXPECT_NE(m.find("): not complete after 0.2 s"), std::string::npos) << policy << ": " << m;
      EXPECT_NE(m.find("did not arrive: rank 1 (its latest collective on world: "), std::string::npos)
          << policy << ": " << m;
      // The deadline counts from wait(): never early. Late by as long as rank 0 is kept
      // from running, so only a bound that a hang would break.
      EXPECT_GE(s, 0.2) << policy;
      EXPECT_LT(s, dpt::testing::kHungAfter.count()) << policy;
      WorkPtr a = w->all_reduce(x);
      EXPECT_TRUE(dpt::testing::completes_without_wait(*b)) << policy;
      a->wait();
      EXPECT_EQ(error_of([&] { b->wait(); }), "(no error)") << policy;
    } else {
      after_the_timeouts.wait_for_early_ranks();
      w->barrier()->wait();
      w->all_reduce(x)->wait();
    }
    expect_values<float>(
        x, [&](int64_t i) { return n * (n + 1) / 2 + n * (i % 2); }, policy);
  });
}
