// What the test_cuda_* files share: a fixture that skips (with the reason) where there is
// no CUDA device and poisons every device allocation while a test runs, the tolerance for
// each dtype, and the CUDA-vs-CPU comparison of an op's output and input gradients.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gradcheck.h"
#include "kernel_check.h"

namespace dpt::testing {

// Why a CPU-only build skips the CUDA tests.
inline constexpr const char* kNoCudaBackend =
    "no CUDA device: this build of dpt has no CUDA backend (configured with DPT_CUDA=OFF, or nvcc, cuDNN or "
    "NCCL was not found)";

}  // namespace dpt::testing

#ifdef DPT_WITH_CUDA

#include "backend/cuda/allocator.h"
#include "backend/cuda/device.h"

namespace dpt::testing {

// Skips without a device. While a test runs, every block the caching allocator hands out
// is filled with 0xff bytes first (NaN as f32): an output element a kernel forgets to
// write, or a read of memory nobody initialised, shows up as NaN.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::cuda_unavailable_reason();
    cuda::allocator_set_poison(true);
  }
  void TearDown() override { cuda::allocator_set_poison(false); }
  const Device gpu = Device::cuda(0);
};

struct Tolerance {
  double atol, rtol;
};

// CUDA against CPU, |cuda - cpu| <= atol + rtol |cpu|: f32 leaves room for other summation
// orders (cuDNN's algorithms, tree reductions), not for other formulas; the 16-bit types
// for their 8 (bf16) or 11 (f16) significant bits.
inline Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {1e-2, 1.6e-2};
    case DType::f16:
      return {1e-3, 2e-3};
    default:
      return {1e-4, 1e-4};
  }
}

inline void expect_tensors_close(const Tensor& got, const Tensor& want, const std::string& what,
                                 Tolerance tol = tolerance_for(DType::f32)) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(got, to_double(want), what, tol.atol, tol.rtol);
}

// ||got - want|| / ||want||, in double: how far a whole gradient tensor moved. Whole-model
// steps compare gradients by it, not element by element: one ReLU or max-pool input that
// lands on the other side of its kink (an f32 summation order can do that) changes a whole
// channel's gradient through batch norm by far more than f32 rounding.
inline double relative_l2(const Tensor& got, const Tensor& want) {
  std::vector<float> a = got.to_vector(), b = want.to_vector();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Fresh leaves holding the inputs' values on `device`, requiring grad where the input does.
inline std::vector<Tensor> leaves_on(const std::vector<Tensor>& inputs, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    Tensor copy = device.is_cpu() ? t.detach().clone() : t.detach().to(device);
    if (t.requires_grad()) copy.set_requires_grad(true);
    out.push_back(copy);
  }
  return out;
}

// Runs f on CPU copies and on cuda:0 copies of `inputs` (CPU tensors; i64 ones pass as
// they are), backward from the same random upstream gradient, and compares the outputs
// and the gradient of every input that requires one.
inline void expect_cuda_matches_cpu(const std::string& what, const OpFn& f, const std::vector<Tensor>& inputs,
                                    Tolerance tol = tolerance_for(DType::f32)) {
  std::vector<Tensor> cpu = leaves_on(inputs, Device::cpu()), gpu = leaves_on(inputs, Device::cuda(0));
  Tensor out_cpu = f(cpu), out_gpu = f(gpu);
  ASSERT_TRUE(out_gpu.device() == Device::cuda(0)) << what << ": output on " << out_gpu.device().str();
  expect_tensors_close(out_gpu, out_cpu, what + " output", tol);
  if (!out_cpu.requires_grad()) return;
  std::vector<float> w(out_cpu.numel());
  std::mt19937 gen(99);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : w) x = dist(gen);
  Tensor upstream = Tensor::from_vector(w, out_cpu.shape());
  out_cpu.backward(upstream);
  out_gpu.backward(upstream.to(Device::cuda(0)));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    ASSERT_TRUE(gpu[k].grad().defined()) << what << ": input " << k << " got no gradient on CUDA";
    EXPECT_TRUE(gpu[k].grad().device() == Device::cuda(0))
        << what << ": gradient " << k << " left the device";
    expect_tensors_close(gpu[k].grad(), cpu[k].grad(), what + " gradient of input " + std::to_string(k), tol);
  }
}

}  // namespace dpt::testing

#endif  // DPT_WITH_CUDA
