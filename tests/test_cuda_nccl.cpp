// The NCCL backend at world size 1 (one GPU): CUDA tensors given to the world group go to
// its NCCL backend; results are checked against the CPU copies of the inputs, and a kernel
// queued after wait() sees the result (stream ordering). A split gives an NCCL sub-group
// through ncclCommSplit. Skips with a message where there is no GPU or no CUDA build.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"

#include "comm/watchdog.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/device.h"
#include "cuda_fill.h"
#endif

using namespace dpt;

namespace {

#ifdef DPT_WITH_CUDA

class CudaNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::cuda_unavailable_reason();
    dist::init();
    if (dist::info().world_size != 1) GTEST_SKIP() << "this is the world-size-1 check; run it without mpirun";
  }
};

Tensor iota_on_gpu(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i) * 0.5f;
  return Tensor::from_vector(v, {n}).to(Device::cuda(0));
}

TEST_F(CudaNccl, AllReduceEveryOpIsTheIdentityOnOneRank) {
  for (dist::ReduceOp op :
       {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::min, dist::ReduceOp::max}) {
    Tensor t = iota_on_gpu(1000003, -7.0f);
    std::vector<float> expected = t.to(Device::cpu()).to_vector();
    dist::world()->all_reduce(t, op)->wait();
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), expected) << dist::reduce_op_name(op);
  }
}

TEST_F(CudaNccl, WaitOrdersLaterCopiesAfterTheCollective) {
  // Many collectives in flight, then one wait: the copy to the host queued after it on the
  // compute stream must see every result.
  std::vector<Tensor> ts;
  std::vector<dist::WorkPtr> works;
  for (int i = 0; i < 20; ++i) {
    ts.push_back(iota_on_gpu(4096 + i, static_cast<float>(i)));
    works.push_back(dist::world()->all_reduce(ts.back(), dist::ReduceOp::sum));
  }
  works.back()->wait();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ts[i].to(Device::cpu()).to_vector()[0], static_cast<float>(i));
  dist::world()->barrier()->wait();
  for (auto& w : works) EXPECT_TRUE(w->is_completed());
}

TEST_F(CudaNccl, BroadcastGatherScatterAndZeroElements) {
  Tensor t = iota_on_gpu(5, 1.0f);
  dist::world()->broadcast(t, 0)->wait();
  EXPECT_EQ(t.to(Device::cpu()).to_vector(), iota_on_gpu(5, 1.0f).to(Device::cpu()).to_vector());

  Tensor in = iota_on_gpu(7, 3.0f), out = Tensor::zeros({7}, DType::f32, Device::cuda(0));
  dist::world()->all_gather(out, in)->wait();
  EXPECT_EQ(out.to(Device::cpu()).to_vector(), in.to(Device::cpu()).to_vector());

  Tensor scattered = Tensor::zeros({7}, DType::f32, Device::cuda(0));
  dist::world()->reduce_scatter(scattered, in, dist::ReduceOp::sum)->wait();
  EXPECT_EQ(scattered.to(Device::cpu()).to_vector(), in.to(Device::cpu()).to_vector());

  Tensor empty = Tensor::zeros({0}, DType::f32, Device::cuda(0));
  dist::world()->all_reduce(empty)->wait();
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(CudaNccl, ReduceGatherScatterAllToAllOnOneRank) {
  // On one rank each is the identity (a copy for gather, scatter and all_to_all, into
  // outputs poisoned first); test_mpi_cuda_collectives checks them across ranks.
  dist::GroupPtr w = dist::world();
  for (dist::ReduceOp op :
       {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::min, dist::ReduceOp::max}) {
    Tensor t = iota_on_gpu(100003, -3.0f);
    w->reduce(t, 0, op)->wait();
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), iota_on_gpu(100003, -3.0f).to(Device::cpu()).to_vector())
        << dist::reduce_op_name(op);
  }
  Tensor in = iota_on_gpu(1001, 5.0f);
  const std::vector<float> expected = in.to(Device::cpu()).to_vector();
  auto poisoned = [] { return Tensor::full({1001}, -1.0f).to(Device::cuda(0)); };
  Tensor gathered = poisoned(), scattered = poisoned(), exchanged = poisoned(), split = poisoned();
  std::vector<dist::WorkPtr> works = {w->gather(gathered, in, 0), w->scatter(scattered, in, 0),
                                      w->all_to_all(exchanged, in), w->all_to_all(split, in, {1001}, {1001})};
  works.back()->wait();
  EXPECT_EQ(gathered.to(Device::cpu()).to_vector(), expected);
  EXPECT_EQ(scattered.to(Device::cpu()).to_vector(), expected);
  EXPECT_EQ(exchanged.to(Device::cpu()).to_vector(), expected);
  EXPECT_EQ(split.to(Device::cpu()).to_vector(), expected);

  Tensor ints = Tensor::from_vector(std::vector<int64_t>{int64_t(1) << 40, -7, 3}, {3}).to(Device::cuda(0));
  Tensor ints_out = Tensor::zeros({3}, DType::i64, Device::cuda(0));
  w->all_to_all(ints_out, ints)->wait();
  Tensor back = ints_out.to(Device::cpu());
  EXPECT_EQ(std::vector<int64_t>(back.data<int64_t>(), back.data<int64_t>() + 3),
            (std::vector<int64_t>{int64_t(1) << 40, -7, 3}));
}

TEST_F(CudaNccl, SplitMakesAnNcclSubGroup) {
  Tensor t = iota_on_gpu(10, 2.0f);
  dist::world()->all_reduce(t)->wait();  // the world's NCCL backend exists from here on
  dist::GroupPtr sub = dist::split(dist::world(), 0, 0);
  ASSERT_TRUE(sub);
  Tensor s = iota_on_gpu(10, 4.0f);
  sub->all_reduce(s, dist::ReduceOp::max)->wait();
  EXPECT_EQ(s.to(Device::cpu()).to_vector(), iota_on_gpu(10, 4.0f).to(Device::cpu()).to_vector());
}

TEST_F(CudaNccl, AShutDownGroupRefusesCudaCollectives) {
  // shutdown() (what dist::finalize() calls) destroys the NCCL backend with the MPI
  // communicators, so a CUDA collective afterwards is an Error, as a CPU one is.
  dist::GroupPtr sub = dist::split(dist::world(), 0, 0);
  ASSERT_TRUE(sub);
  Tensor t = iota_on_gpu(10, 1.0f);
  sub->all_reduce(t)->wait();  // the sub-group's NCCL backend exists from here on
  auto* mpi = dynamic_cast<dist::MpiProcessGroup*>(sub.get());
  ASSERT_NE(mpi, nullptr);
  mpi->shutdown();
  try {
    sub->all_reduce(t);
    ADD_FAILURE() << "a CUDA all_reduce on a shut-down group was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("used after it was shut down"), std::string::npos) << e.what();
  }
}

TEST_F(CudaNccl, BadArgumentsAreErrorsNamingTheGroup) {
  Tensor ints = Tensor::zeros({4}, DType::i64, Device::cuda(0));
  try {
    dist::world()->all_reduce(ints, dist::ReduceOp::avg);
    ADD_FAILURE() << "avg on i64 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce on world (NCCL): avg needs a floating dtype"),
              std::string::npos)
        << e.what();
  }
  Tensor strided = Tensor::zeros({4, 4}, DType::f32, Device::cuda(0)).as_strided({4}, {4}, 0);
  EXPECT_THROW(dist::world()->all_reduce(strided), Error);

  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  Tensor four = Tensor::zeros({4}, DType::f32, Device::cuda(0)),
         five = Tensor::zeros({5}, DType::f32, Device::cuda(0));
  std::string m = error_of([&] { dist::world()->reduce(ints, 0, dist::ReduceOp::avg); });
  EXPECT_NE(m.find("reduce on world (NCCL): avg needs a floating dtype"), std::string::npos) << m;
  m = error_of([&] { dist::world()->gather(five, four, 0); });
  EXPECT_NE(m.find("gather on world: root 0's out must hold 1 x 4 = 4 elements (a block of in's size per "
                   "rank), got 5"),
            std::string::npos)
      << m;
  m = error_of([&] { dist::world()->scatter(four, five, 0); });
  EXPECT_NE(m.find("scatter on world: root 0's in must hold 1 x 4 = 4 elements (a block of out's size per "
                   "rank), got 5"),
            std::string::npos)
      << m;
  m = error_of([&] { dist::world()->all_to_all(four, four, {4}, {4}); });
  EXPECT_NE(m.find("all_to_all on world: out overlaps in"), std::string::npos) << m;
  m = error_of([&] { dist::world()->all_to_all(four, five, {4}, {5}); });
  EXPECT_NE(m.find("all_to_all on world: rank 0 sends itself 5 elements (in split 0) but expects 4"),
            std::string::npos)
      << m;
  m = error_of([&] { dist::world()->scatter(four, Tensor::zeros({4}), 0); });
  EXPECT_NE(m.find("scatter on world (NCCL): in is on cpu"), std::string::npos) << m;
}

TEST_F(CudaNccl, ACollectiveStuckPastTheTimeoutIsReportedWithItsNumber) {
  // A kernel spins 4 s ahead of an all_reduce whose group times out after 1 s: the process
  // watchdog aborts the group's communicator and reports the collective and its number
  // within the timeout and a few polls, long before the kernel ends. Here the report comes
  // to the test; in a job it ends every rank (abort_all). A sub-group of its own, so that
  // the aborted communicator is not the world's.
  std::mutex mutex;
  std::vector<std::string> reports;
  auto previous = dist::process_watchdog().set_on_failure([&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    reports.push_back(m);
  });
  dist::GroupPtr sub = dist::split(dist::world(), 0, 0);
  ASSERT_TRUE(sub);
  dynamic_cast<dist::MpiProcessGroup&>(*sub).set_timeout(std::chrono::milliseconds(1000));
  Tensor t = iota_on_gpu(16, 1.0f);
  sub->all_reduce(t)->wait();  // #1, completes
  dpt::testing::cuda_spin(4.0, 0);
  const auto start = std::chrono::steady_clock::now();
  sub->all_reduce(t);  // #2, queued behind the spinning kernel
  std::string report;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!reports.empty()) report = reports.front();
    }
    if (!report.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cuda::cuda_synchronize(0);
  dist::process_watchdog().set_on_failure(previous);
  ASSERT_FALSE(report.empty()) << "no report within 10 s";
  EXPECT_NE(report.find("all_reduce(sum) of 16 f32 on " + sub->name() +
                        " (collective #2): not complete after 1 s (distributed.timeout_s"),
            std::string::npos)
      << report;
  EXPECT_GE(seconds, 1.0);
  EXPECT_LT(seconds, 3.0) << report;
}

#else

TEST(CudaNccl, GpuTests) { GTEST_SKIP() << "no CUDA device: this build of dpt has no CUDA backend"; }

#endif

}  // namespace
