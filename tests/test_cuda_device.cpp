// The CUDA device layer: memory, copies, zero-fill, the caching allocator, streams and the
// per-device context. Tests that need a GPU skip with the reason when there is none, so the
// suite passes on CPU-only machines; the error-path tests run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/stream.h"
#include "cuda_fill.h"
#endif

using namespace dpt;

namespace {

// Runs `fn`, expecting a dpt::Error whose message contains `needle`.
template <class Fn>
void expect_error_containing(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected dpt::Error containing '" << needle << "', nothing was thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace

#ifndef DPT_WITH_CUDA

TEST(CudaDevice, CpuOnlyBuildRejectsCudaTensors) {
  expect_error_containing(
      [] {
        Tensor::empty({2, 3}, DType::f32, Device::cuda(0));
      },
      "no CUDA support in this build");
}

TEST(CudaDevice, GpuTests) {
  GTEST_SKIP() << "no CUDA device: this build of dpt has no CUDA backend (configured with DPT_CUDA=OFF, "
                  "or nvcc, cuDNN or NCCL was not found)";
}

#else  // DPT_WITH_CUDA

using namespace dpt::cuda;

namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

}  // namespace

// Runs everywhere: without a device the count is 0 (no throw) and a CUDA tensor is a clear
// error; with one, a device index past the last is the same kind of error.
TEST(CudaDevice, MissingDeviceIsAnError) {
  int count = cuda_device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda_available(), count > 0);
  if (count == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    expect_error_containing([] { Tensor::empty({2, 3}, DType::f32, Device::cuda(0)); }, "no CUDA device");
    expect_error_containing([] { pinned_alloc(64); }, "no CUDA device");
    expect_error_containing([] { cuda_set_device(0); }, "no CUDA device");
    EXPECT_EQ(allocator_stats(0).reserved_bytes, 0u);
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
    expect_error_containing(
        [count] {
          Tensor::empty({2, 3}, DType::f32, Device::cuda(count));
        },
        "does not exist");
  }
}

TEST(CudaDevice, CheckMacrosNameCallAndError) {
  expect_error_containing([] { CUDA_CHECK(cudaErrorInvalidValue); }, "CUDA error at test_cuda_device.cpp:");
  expect_error_containing([] { CUDA_CHECK(cudaErrorInvalidValue); },
                          "cudaErrorInvalidValue: invalid argument");
  expect_error_containing([] { CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); }, "cuBLAS error");
  expect_error_containing([] { CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); }, "CUDNN_STATUS_BAD_PARAM");
  expect_error_containing([] { NCCL_CHECK(ncclInvalidArgument); }, "NCCL error");
}

// The GPU tests: skipped, with the reason, where there is no device.
class CudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

TEST_F(CudaGpu, DeviceQueries) {
  EXPECT_FALSE(cuda_device_name(0).empty());
  cuda_set_device(0);
  EXPECT_EQ(cuda_current_device(), 0);
  expect_error_containing([] { cuda_device_name(-1); }, "does not exist");
}

TEST_F(CudaGpu, HostDeviceHostRoundTrip) {
  std::vector<float> values = random_floats((1 << 20) + 3, 1);
  Tensor host = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  Tensor device = host.to(Device::cuda(0));
  EXPECT_EQ(device.device(), Device::cuda(0));
  EXPECT_EQ(device.to_vector(), values);
  // Device to device, then back.
  Tensor copy = device.clone();
  EXPECT_NE(copy.raw_data(), device.raw_data());
  EXPECT_EQ(copy.to_vector(), values);
}

TEST_F(CudaGpu, EmptyTensorToCpu) {
  Tensor t = Tensor::empty({4, 5}, DType::f32, Device::cuda(0));
  Tensor host = t.to(Device::cpu());
  EXPECT_EQ(host.shape(), (Shape{4, 5}));
  EXPECT_EQ(host.dtype(), DType::f32);
  EXPECT_TRUE(host.device().is_cpu());
  Tensor none = Tensor::empty({0, 3}, DType::f32, Device::cuda(0));
  EXPECT_TRUE(none.to(Device::cpu()).to_vector().empty());
}

TEST_F(CudaGpu, FillKernelAndFillZero) {
  const int64_t n = 3 * 100000 + 7;
  Tensor t = Tensor::empty({n}, DType::f32, Device::cuda(0));
  dpt::testing::cuda_fill(t.data<float>(), n, 123.5f, 0);  // poison
  for (float v : t.to_vector()) ASSERT_EQ(v, 123.5f);
  t.zero_();
  for (float v : t.to_vector()) ASSERT_EQ(v, 0.0f);
  // Poisoned from the host this time, through zeros() instead of zero_().
  Tensor poisoned = Tensor::from_vector(std::vector<float>(n, NAN), {n}).to(Device::cuda(0));
  poisoned.zero_();
  for (float v : poisoned.to_vector()) ASSERT_EQ(v, 0.0f);
  for (float v : Tensor::zeros({5, 7}, DType::f32, Device::cuda(0)).to_vector()) ASSERT_EQ(v, 0.0f);
}

TEST_F(CudaGpu, AllocatorReusesFreedBlocks) {
  allocator_empty_cache();
  AllocatorStats s0 = allocator_stats(0);
  EXPECT_EQ(s0.reserved_bytes, s0.allocated_bytes);  // nothing cached after empty_cache

  void* a = device_alloc(1000, 0);
  AllocatorStats s1 = allocator_stats(0);
  EXPECT_EQ(s1.num_device_mallocs, s0.num_device_mallocs + 1);
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes + 1024);  // rounded to 512 B
  EXPECT_EQ(s1.reserved_bytes, s0.reserved_bytes + 1024);
  EXPECT_GE(s1.peak_allocated_bytes, s1.allocated_bytes);

  device_free(a, 0);
  AllocatorStats s2 = allocator_stats(0);
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(s2.reserved_bytes, s1.reserved_bytes);  // cached, not given back

  void* b = device_alloc(1000, 0);
  AllocatorStats s3 = allocator_stats(0);
  EXPECT_EQ(b, a);
  EXPECT_EQ(s3.num_device_mallocs, s2.num_device_mallocs);
  EXPECT_EQ(s3.num_cache_hits, s2.num_cache_hits + 1);
  EXPECT_EQ(s3.allocated_bytes, s1.allocated_bytes);

  // Large requests round to 2 MiB; a tiny request never takes a large cached block.
  void* big = device_alloc((3 << 20) + 1, 0);
  EXPECT_EQ(allocator_stats(0).allocated_bytes, s3.allocated_bytes + (4 << 20));
  device_free(big, 0);
  AllocatorStats s4 = allocator_stats(0);
  void* tiny = device_alloc(512, 0);
  EXPECT_NE(tiny, big);
  EXPECT_EQ(allocator_stats(0).num_device_mallocs, s4.num_device_mallocs + 1);

  device_free(tiny, 0);
  device_free(b, 0);
  AllocatorStats s5 = allocator_stats(0);
  EXPECT_EQ(s5.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(s5.reserved_bytes, s0.reserved_bytes + 1024 + 512 + (4 << 20));
  allocator_empty_cache();
  AllocatorStats s6 = allocator_stats(0);
  EXPECT_EQ(s6.reserved_bytes, s6.allocated_bytes);
  EXPECT_EQ(s6.allocated_bytes, s0.allocated_bytes);
}

TEST_F(CudaGpu, TensorsGoThroughTheCache) {
  { Tensor warm = Tensor::empty({256, 256}, DType::f32, Device::cuda(0)); }
  AllocatorStats before = allocator_stats(0);
  for (int i = 0; i < 10; ++i) Tensor t = Tensor::empty({256, 256}, DType::f32, Device::cuda(0));
  AllocatorStats after = allocator_stats(0);
  EXPECT_EQ(after.num_device_mallocs, before.num_device_mallocs);
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 10);
}

TEST_F(CudaGpu, OutOfMemoryIsAClearError) {
  expect_error_containing([] { device_alloc(size_t{1} << 52, 0); }, "CUDA out of memory on cuda:0");
  expect_error_containing([] { device_alloc(size_t{1} << 52, 0); }, "cudaMalloc calls");
  // The failure leaves no sticky error behind.
  void* p = device_alloc(4096, 0);
  EXPECT_NE(p, nullptr);
  device_free(p, 0);
  expect_error_containing([] { device_free(reinterpret_cast<void*>(0x1000), 0); }, "already freed");
}

TEST_F(CudaGpu, PinnedMemoryIsCached) {
  void* a = pinned_alloc(10000);
  ASSERT_NE(a, nullptr);
  std::vector<float> values = random_floats(2500, 2);
  std::copy(values.begin(), values.end(), static_cast<float*>(a));
  Tensor device = Tensor::empty({2500}, DType::f32, Device::cuda(0));
  copy_bytes(device.raw_data(), device.device(), a, Device::cpu(), 10000);
  EXPECT_EQ(device.to_vector(), values);
  pinned_free(a);
  EXPECT_EQ(pinned_alloc(10000), a);
  pinned_free(a);
}

TEST_F(CudaGpu, ContextIsOnePerDeviceWithHandles) {
  DeviceContext& context = device_context(0);
  EXPECT_EQ(&device_context(0), &context);
  EXPECT_EQ(context.device(), 0);
  EXPECT_EQ(compute_stream(0), context.stream().get());
  cublasHandle_t cublas = context.cublas();
  cudnnHandle_t cudnn = context.cudnn();
  EXPECT_NE(cublas, nullptr);
  EXPECT_NE(cudnn, nullptr);
  EXPECT_EQ(context.cublas(), cublas);
  EXPECT_EQ(context.cudnn(), cudnn);
}

TEST_F(CudaGpu, StreamsAndEventsOrderWork) {
  Stream side(0);
  Event start(true), done(true);
  Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
  start.record(compute_stream(0));
  dpt::testing::cuda_fill(t.data<float>(), t.numel(), 7.0f, 0);
  done.record(compute_stream(0));
  side.wait(done);
  side.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_GE(done.elapsed_ms(start), 0.0f);
  EXPECT_EQ(t.to_vector()[12345], 7.0f);
}

#endif  // DPT_WITH_CUDA
