// The pieces the Trainer uses on a GPU, each against a CPU reference: batches uploaded
// ahead through pinned staging (values, sizes that change, a dropped upload), the finite
// check of many gradients with one flag, evaluation totals kept on the device (f32 and bf16
// logits), the loss summed on the device, and checkpoints written from device tensors (the
// same bytes as from the CPU) and loaded back onto the device. Skipped without a GPU.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaTrain, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include "backend/cuda/batch_upload.h"
#include "backend/cuda/kernels.h"
#include "inputs.h"
#include "io/checkpoint.h"
#include "io/loss_meter.h"
#include "models/registry.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "optim/ema.h"
#include "optim/nonfinite.h"
#include "optim/sgd.h"
#include "temp_dir.h"

using namespace dpt;
using dpt::testing::expect_tensors_close;
using dpt::testing::random_labels;
using dpt::testing::random_tensor;

namespace {

using CudaTrain = dpt::testing::CudaTest;

std::vector<int64_t> to_i64(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}

TEST_F(CudaTrain, UploadedBatchesArriveWhileComputeIsQueued) {
  cuda::BatchUploader up(0);
  const std::vector<int64_t> sizes = {7, 7, 3, 0, 9, 1};
  auto host_batch = [](int64_t n, uint64_t seed) {
    return std::vector<Tensor>{random_tensor({n, 3, 4, 4}, seed), random_labels(n, 10, seed + 1)};
  };
  std::vector<std::vector<Tensor> > sent;
  sent.push_back(host_batch(sizes[0], 0));
  // Clones: the uploader must copy the host tensors before start() returns.
  up.start({sent[0][0].clone(), sent[0][1].clone()});
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(up.pending());
    std::vector<Tensor> got = up.take();
    EXPECT_FALSE(up.pending());
    if (i + 1 < sizes.size()) {
      sent.push_back(host_batch(sizes[i + 1], 10 * (i + 1)));
      std::vector<Tensor> scratch = {sent.back()[0].clone(), sent.back()[1].clone()};
      up.start(scratch);
      scratch[0].fill_(-7.0f);  // too late to change what goes up
    }
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].device(), gpu);
    EXPECT_EQ(got[0].shape(), sent[i][0].shape());
    EXPECT_EQ(got[1].dtype(), DType::i64);
    // Compute queued after take() sees the copied values.
    Tensor doubled = mul(got[0], 2.0f);
    expect_tensors_close(doubled, mul(sent[i][0], 2.0f), "batch " + std::to_string(i), {0, 0});
    EXPECT_EQ(to_i64(got[1]), to_i64(sent[i][1])) << "batch " << i;
  }
}

TEST_F(CudaTrain, DroppedUploadLeavesTheUploaderUsable) {
  cuda::BatchUploader up(0);
  up.start({random_tensor({4, 2}, 1)});
  up.drop();
  EXPECT_FALSE(up.pending());
  Tensor next = random_tensor({5, 2}, 2);
  up.start({next});
  expect_tensors_close(up.take()[0], next, "after a drop", {0, 0});
  EXPECT_THROW(up.take(), Error);
  up.start({next});
  EXPECT_THROW(up.start({next}), Error);
}

TEST_F(CudaTrain, FiniteCheckFindsOneBadValueAmongManyGradients) {
  // 70 parameters: more than one launch's worth (64); one large enough to need many blocks.
  std::vector<Tensor> params;
  for (int i = 0; i < 70; ++i) {
    Tensor p = random_tensor({i == 40 ? (int64_t{1} << 22) + 3 : 3 + i}, i).to(gpu).set_requires_grad(true);
    p.set_grad(random_tensor(p.shape(), 100 + i).to(gpu));
    params.push_back(p);
  }
  EXPECT_TRUE(optim::gradients_finite(params));
  auto poke = [&](int which, int64_t index, float value) {
    Tensor g = params[which].grad().to(Device::cpu());
    float saved = g.data<float>()[index];
    g.data<float>()[index] = value;
    params[which].grad().copy_from(g);
    bool finite = optim::gradients_finite(params);
    g.data<float>()[index] = saved;
    params[which].grad().copy_from(g);
    return finite;
  };
  EXPECT_FALSE(poke(66, 2, NAN));
  EXPECT_FALSE(poke(0, 0, INFINITY));
  EXPECT_FALSE(poke(40, (int64_t{1} << 22) + 2, -INFINITY));
  EXPECT_TRUE(optim::gradients_finite(params));
  params[5].set_grad(Tensor());  // a parameter without a gradient is skipped
  EXPECT_TRUE(optim::gradients_finite(params));
}

TEST_F(CudaTrain, EvalTotalsMatchTheCpuLossAndCount) {
  Tensor totals = Tensor::zeros({3}, DType::f32, gpu);
  double loss_sum = 0;
  int64_t correct = 0, rows = 0;
  for (int64_t n : {1000, 37, 0}) {
    Tensor logits = random_tensor({n, 10}, n);
    if (n > 2) {  // a tie at the label and one beside it: the first maximum counts
      float* p = logits.data<float>();
      p[0 * 10 + 3] = p[0 * 10 + 4] = 5.0f;
      p[1 * 10 + 3] = p[1 * 10 + 4] = 5.0f;
    }
    Tensor labels = random_labels(n, 10, n + 1);
    if (n > 2) {
      labels.data<int64_t>()[0] = 3;
      labels.data<int64_t>()[1] = 4;
    }
    if (n > 0) {
      loss_sum += cross_entropy(logits, labels).item() * static_cast<double>(n);
      correct += count_correct(logits, labels);
    }
    Tensor lg = logits.to(gpu), lb = labels.to(gpu);
    if (n == 37) {  // a transposed view: [10, 37] storage read as [37, 10]
      Tensor t = Tensor::empty({10, n});
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < 10; ++c) t.data<float>()[c * n + r] = logits.data<float>()[r * 10 + c];
      lg = t.to(gpu).as_strided({n, 10}, {1, n}, 0);
    }
    Tensor loss = n > 0 ? cross_entropy(lg, lb) : Tensor::zeros({1}, DType::f32, gpu);
    cuda::eval_totals_add(totals, loss, lg, lb);
    rows += n;
  }
  std::vector<float> got = totals.to_vector();
  EXPECT_NEAR(got[0], loss_sum, 1e-5 * loss_sum);
  EXPECT_EQ(got[1], static_cast<float>(correct));
  EXPECT_EQ(got[2], static_cast<float>(rows));
}

// precision: bf16 hands evaluation bf16 logits: the totals are those of the same values
// in f32 on the CPU (widening is exact, so the same rows are correct).
TEST_F(CudaTrain, EvalTotalsTakeBf16Logits) {
  const int64_t n = 500;
  Tensor logits = random_tensor({n, 10}, 7, -3.0f, 3.0f);
  for (float& v : std::span<float>(logits.data<float>(), n * 10)) v = bf16_to_float(float_to_bf16(v));
  Tensor labels = random_labels(n, 10, 8);
  Tensor lg = cast(logits.to(gpu), DType::bf16), lb = labels.to(gpu);
  ASSERT_EQ(lg.dtype(), DType::bf16);
  Tensor totals = Tensor::zeros({3}, DType::f32, gpu);
  cuda::eval_totals_add(totals, cross_entropy(lg, lb), lg, lb);
  std::vector<float> got = totals.to_vector();
  const double loss_sum = cross_entropy(logits, labels).item() * static_cast<double>(n);
  EXPECT_NEAR(got[0], loss_sum, 1e-5 * loss_sum);
  EXPECT_EQ(got[1], static_cast<float>(count_correct(logits, labels)));
  EXPECT_EQ(got[2], static_cast<float>(n));
}

TEST_F(CudaTrain, LossMeterSumsOnTheDeviceAsTheCpuDoes) {
  io::LossMeter on_gpu, on_cpu;
  double want = 0;
  for (int i = 0; i < 120; ++i) {
    Tensor loss = random_tensor({1}, i, 0.1f, 2.5f);
    want += loss.item();
    on_cpu.add(loss);
    on_gpu.add(loss.to(gpu));
    if (i == 49) {  // a mid-epoch read-back
      EXPECT_NEAR(on_gpu.sum(), on_cpu.sum(), 1e-6 * on_cpu.sum());
    }
  }
  EXPECT_DOUBLE_EQ(on_cpu.sum(), want);
  EXPECT_NEAR(on_gpu.sum(), want, 1e-6 * want);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A model, SGD with momentum and an EMA on one device, built identically from seed 0.
struct Objects {
  nn::ModulePtr model;
  std::unique_ptr<optim::Sgd> sgd;
  std::unique_ptr<optim::Ema> ema;
  io::TrainingObjects objects() { return {*model, "mnist_cnn", *sgd, "sgd", ema.get()}; }
};

Objects make_objects(Device device) {
  Objects o;
  o.model = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 28, 28, 10, 0});
  o.model->to(device);
  o.sgd =
      std::make_unique<optim::Sgd>(optim::param_groups(*o.model, 5e-4f, true), optim::SgdOptions{0.9f, true});
  o.ema = std::make_unique<optim::Ema>(*o.model, 0.9f);
  return o;
}

TEST_F(CudaTrain, CheckpointsFromTheDeviceAreTheCpusBytesAndLoadBackOntoIt) {
  dpt::testing::TempDir dir("dpt_cuda_ckpt");
  Objects g = make_objects(gpu);
  for (int step = 0; step < 2; ++step) {  // momentum and EMA that are not their initial values
    Tensor loss = cross_entropy((*g.model)(random_tensor({8, 1, 28, 28}, step).to(gpu)),
                                random_labels(8, 10, step).to(gpu));
    g.sgd->zero_grad();
    loss.backward();
    g.sgd->step(0.05f);
    g.ema->update(*g.model);
  }
  io::CheckpointInfo info;
  info.progress.step = 2;
  info.batch_size = 8;
  info.config_yaml = "model: {name: mnist_cnn}\n";
  io::checkpoint_save(dir.file("gpu"), g.objects(), g.objects().optimizer.state_for_save(), info, 0);

  // The same values on the CPU (loaded from those files) written from the CPU.
  Objects c = make_objects(Device::cpu());
  io::checkpoint_load(dir.file("gpu") + "/step-2.json", c.objects());
  io::checkpoint_save(dir.file("cpu"), c.objects(), c.objects().optimizer.state_for_save(), info, 0);
  for (const char* name : {"step-2.safetensors", "step-2.optimizer.safetensors", "step-2.json"})
    EXPECT_EQ(file_bytes(dir.file("gpu") + "/" + name), file_bytes(dir.file("cpu") + "/" + name)) << name;

  // Resuming onto the device restores every tensor exactly.
  Objects back = make_objects(gpu);
  io::checkpoint_load(dir.file("cpu") + "/step-2.json", back.objects());
  nn::NamedTensors want = g.model->state_dict(), got = back.model->state_dict();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].second.device(), gpu);
    EXPECT_EQ(got[i].second.to_vector(), want[i].second.to_vector()) << want[i].first;
  }
  auto want_state = g.sgd->state_tensors(), got_state = back.sgd->state_tensors();
  for (size_t i = 0; i < want_state.size(); ++i)
    EXPECT_EQ(got_state[i].value.to_vector(), want_state[i].value.to_vector())
        << want_state[i].kind << " " << i;
  for (size_t i = 0; i < g.ema->shadow().size(); ++i)
    EXPECT_EQ(back.ema->shadow()[i].second.to_vector(), g.ema->shadow()[i].second.to_vector())
        << "ema " << g.ema->shadow()[i].first;
}

}  // namespace

#endif  // DPT_WITH_CUDA
