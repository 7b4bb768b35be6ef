// The fused CUDA optimizer updates against the CPU loops they twin: SGD (plain, momentum,
// Nesterov, weight decay per group), AdamW and the weight EMA, several steps from the same
// parameters and gradients, more parameters than one launch takes and one large enough
// for the grid-stride loop; state made on the CPU follows a model moved to the GPU.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaOptim, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include <functional>
#include <memory>

#include "error_of.h"
#include "nn/layers.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/sgd.h"

using namespace dpt;
using namespace dpt::optim;
using dpt::testing::error_of;
using dpt::testing::expect_tensors_close;
using dpt::testing::random_tensor;

namespace {

using CudaOptim = dpt::testing::CudaTest;

// The fused kernels round like the CPU loops, up to fused multiply-adds.
const dpt::testing::Tolerance kUpdate{1e-6, 1e-5};

// 60 parameters (more than the 48 one launch takes), one of 2^21 + 3 elements, split into
// two groups with different weight decay; the same values on both devices.
struct Params {
  std::vector<Tensor> cpu, gpu;

  Params() {
    for (int i = 0; i < 60; ++i) {
      int64_t n = i == 7 ? (1 << 21) + 3 : 1 + 37 * i;
      Tensor p = random_tensor({n}, 100 + i);
      cpu.push_back(p.clone().set_requires_grad(true));
      gpu.push_back(p.to(Device::cuda(0)).set_requires_grad(true));
    }
  }
  std::vector<ParamGroup> groups(const std::vector<Tensor>& params) const {
    ParamGroup decay{{}, 0.05f}, none{{}, 0.0f};
    for (size_t i = 0; i < params.size(); ++i) (i % 3 == 0 ? none : decay).params.push_back(params[i]);
    return {decay, none};
  }
  // The same fresh gradients on both sides; parameter 5 gets none (it must stay as it is).
  void set_gradients(uint64_t seed) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (i == 5) continue;
      Tensor g = random_tensor(cpu[i].shape(), seed + i);
      cpu[i].set_grad(g);
      gpu[i].set_grad(g.to(Device::cuda(0)));
    }
  }
  void expect_equal(const std::string& what) const {
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_tensors_close(gpu[i], cpu[i], what + ", parameter " + std::to_string(i), kUpdate);
  }
};

void run_steps(Params& params, Optimizer& on_cpu, Optimizer& on_gpu, const std::string& what) {
  for (int step = 0; step < 4; ++step) {
    params.set_gradients(1000 * (step + 1));
    on_cpu.step(0.05f);
    on_gpu.step(0.05f);
  }
  params.expect_equal(what);
}

}  // namespace

TEST_F(CudaOptim, SgdMatchesCpu) {
  for (SgdOptions options : {SgdOptions{0.0f, false}, SgdOptions{0.9f, false}, SgdOptions{0.9f, true}}) {
    std::string what =
        "sgd momentum " + std::to_string(options.momentum) + (options.nesterov ? " nesterov" : "");
    Params params;
    Tensor untouched = params.gpu[5].to(Device::cpu());
    Sgd on_cpu(params.groups(params.cpu), options), on_gpu(params.groups(params.gpu), options);
    run_steps(params, on_cpu, on_gpu, what);
    for (size_t i = 0; i < on_cpu.momentum_buffers().size(); ++i) {
      EXPECT_TRUE(on_gpu.momentum_buffers()[i].device() == Device::cuda(0));
      expect_tensors_close(on_gpu.momentum_buffers()[i], on_cpu.momentum_buffers()[i], what + " velocity",
                           kUpdate);
    }
    EXPECT_EQ(params.gpu[5].to_vector(), untouched.to_vector()) << "a parameter without gradient moved";
  }
}

TEST_F(CudaOptim, AdamWMatchesCpu) {
  Params params;
  AdamW on_cpu(params.groups(params.cpu), {}), on_gpu(params.groups(params.gpu), {});
  run_steps(params, on_cpu, on_gpu, "adamw");
}

TEST_F(CudaOptim, StateFollowsAModelMovedAfterTheOptimizer) {
  Rng rng(1);
  nn::Linear model(5, 3, rng);
  Tensor weight = model.weight();
  Sgd sgd(param_groups(model, 0.0f, true), {0.9f, false});  // velocity made on the CPU
  model.to(Device::cuda(0));
  EXPECT_TRUE(weight.is_same(model.weight())) << "Module::to keeps each tensor's identity";
  EXPECT_TRUE(weight.device() == Device::cuda(0));
  for (const Tensor& p : model.parameters()) p.set_grad(Tensor::full(p.shape(), 1.0f).to(Device::cuda(0)));
  std::vector<float> before = weight.to_vector();
  sgd.step(0.1f);
  std::vector<float> after = weight.to_vector();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.1f, 1e-6);
  EXPECT_TRUE(sgd.momentum_buffers()[0].device() == Device::cuda(0));
  // A gradient left on the CPU is an error, not a kernel reading host memory.
  weight.set_grad(Tensor::full(weight.shape(), 1.0f));
  EXPECT_NE(error_of([&] {
              sgd.step(0.1f);
            }).find("sgd: parameter [3, 5] on cuda:0 and its gradient [3, 5] on cpu"),
            std::string::npos);
}

TEST_F(CudaOptim, EmaMatchesCpu) {
  nn::BatchNorm2d cpu_model(4), gpu_model(4);  // a parameter pair and two buffers
  gpu_model.to(Device::cuda(0));
  Ema on_cpu(cpu_model, 0.9f), on_gpu(gpu_model, 0.9f);
  for (int step = 0; step < 3; ++step) {
    auto cpu_state = cpu_model.state_dict(), gpu_state = gpu_model.state_dict();
    for (size_t i = 0; i < cpu_state.size(); ++i) {
      Tensor v = random_tensor(cpu_state[i].second.shape(), 10 * step + i);
      cpu_state[i].second.copy_from(v);
      gpu_state[i].second.copy_from(v);
    }
    on_cpu.update(cpu_model);
    on_gpu.update(gpu_model);
  }
  for (size_t i = 0; i < on_cpu.shadow().size(); ++i)
    expect_tensors_close(on_gpu.shadow()[i].second, on_cpu.shadow()[i].second, on_cpu.shadow()[i].first,
                         kUpdate);
  nn::BatchNorm2d moved_later(4);
  Ema made_on_cpu(moved_later, 0.9f);
  moved_later.to(Device::cuda(0));
  EXPECT_EQ(error_of([&] { made_on_cpu.update(moved_later); }),
            "ema: 'weight' is on cuda:0 but its average on cpu (make the Ema after moving the model)");
}

#endif  // DPT_WITH_CUDA
