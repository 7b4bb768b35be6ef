// How to add an op and its test: write the op in framework/ops/<family>.cpp (forward,
// then autograd::record with its backward), its kernel in backend/cpu/, and here a
// gradient check (gradcheck.h) plus, for kernels with a library behind them, a
// plain-loop reference computed in double.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "gradcheck.h"
#include "ops/elementwise.h"

using namespace dpt;
using dpt::testing::expect_gradients_match;
using dpt::testing::random_tensor;

TEST(Elementwise, BroadcastForwardMatchesLoop) {
  Tensor a = random_tensor({2, 3, 4}, 1), b = random_tensor({3, 1}, 2);
  Tensor out = add(a, b);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 4}));
  std::vector<float> va = a.to_vector(), vb = b.to_vector(), vo = out.to_vector();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(vo[(i * 3 + j) * 4 + k], va[(i * 3 + j) * 4 + k] + vb[j]);
}

TEST(Elementwise, IncompatibleShapesThrow) {
  EXPECT_THROW(add(random_tensor({2, 3}, 1), random_tensor({4}, 2)), Error);
}

TEST(Elementwise, GradientsWithBroadcasting) {
  auto a = random_tensor({2, 3, 4}, 1).set_requires_grad(true);
  auto b = random_tensor({3, 1}, 2).set_requires_grad(true);
  auto c = random_tensor({4}, 3, 0.5f, 2.0f).set_requires_grad(true);  // divisor away from 0
  expect_gradients_match([](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {a, b});
  expect_gradients_match([](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {a, b});
  expect_gradients_match([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {a, b});
  expect_gradients_match([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {a, c});
  expect_gradients_match([](const std::vector<Tensor>& x) { return affine(x[0], -1.5f, 0.3f); }, {a});
}

TEST(Autograd, SharedInputGradientsAreSummedAndHooksFireOnce) {
  auto a = random_tensor({5}, 1).set_requires_grad(true);
  int fired = 0;
  autograd::add_post_accumulate_hook(a, [&](const Tensor&) { ++fired; });
  Tensor y = mul(a, a);  // dy/da = 2a
  y.backward(Tensor::full({5}, 1.0f));
  EXPECT_EQ(fired, 1);
  std::vector<float> va = a.to_vector(), ga = a.grad().to_vector();
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(ga[i], 2 * va[i]);
  // A second backward accumulates (+=) into the existing .grad.
  mul(a, a).backward(Tensor::full({5}, 1.0f));
  ga = a.grad().to_vector();
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(ga[i], 4 * va[i]);
}

TEST(Autograd, NoGradRecordsNothingAndFreedGraphThrows) {
  auto a = random_tensor({3}, 1).set_requires_grad(true);
  {
    autograd::NoGrad guard;
    EXPECT_FALSE(mul(a, 2.0f).requires_grad());
  }
  Tensor y = mul(a, a);
  y.backward(Tensor::full({3}, 1.0f));
  EXPECT_THROW(y.backward(Tensor::full({3}, 1.0f)), Error);
}

// The final callbacks (DDP's end of backward) run whether backward finishes or throws,
// told which; the first error, a node's or a callback's, is the one backward() throws.
TEST(Autograd, FinalCallbacksRunWhenBackwardFailsAndTheFirstErrorLeaves) {
  auto a = random_tensor({3}, 1).set_requires_grad(true);
  std::vector<std::string> calls;
  // An identity whose backward queues two callbacks, the first throwing when asked to,
  // and then throws itself when asked to.
  auto run = [&](bool node_throws, bool callback_throws) {
    calls.clear();
    Tensor out = a.detach().clone();
    autograd::record("queues_callbacks", out, {a}, [&, node_throws, callback_throws](const Tensor& g) {
      autograd::queue_callback([&, callback_throws](bool failed) {
        calls.push_back(failed ? "first(failed)" : "first");
        DPT_CHECK(!callback_throws) << "the first callback's error";
      });
      autograd::queue_callback([&](bool failed) { calls.push_back(failed ? "second(failed)" : "second"); });
      DPT_CHECK(!node_throws) << "the node's error";
      return std::vector<Tensor>{g};
    });
    try {
      out.backward(Tensor::full({3}, 1.0f));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(run(false, false), "no error");
  EXPECT_EQ(calls, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(run(true, false), "the node's error");
  EXPECT_EQ(calls, (std::vector<std::string>{"first(failed)", "second(failed)"}));
  EXPECT_EQ(run(false, true), "the first callback's error");
  EXPECT_EQ(calls, (std::vector<std::string>{"first", "second(failed)"}));
  EXPECT_EQ(run(true, true), "the node's error");
  EXPECT_EQ(calls, (std::vector<std::string>{"first(failed)", "second(failed)"}));
}
