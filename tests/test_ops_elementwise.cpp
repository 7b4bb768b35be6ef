// How to add an op and its test: write the op in framework/ops/<family>.cpp (forward,
// then autograd::record with its backward), its kernel in backend/cpu/, and here a
// gradient check (gradcheck.h) plus, for kernels with a library behind them, a
// plain-loop reference computed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd/node.h"
#include "gradcheck.h"
#include "inputs.h"
#include "ops/elementwise.h"

using namespace dpt;
using dpt::testing::away_from_zero;
using dpt::testing::expect_gradients_match;
using dpt::testing::random_tensor;

namespace {

// Element `index` (an index of the output, of its rank) of an operand broadcast to the
// output: logical values `v` (row-major) of shape `s`; a size-1 or missing dimension
// repeats.
double broadcast_at(const std::vector<float>& v, const Shape& s, const std::vector<int64_t>& index) {
  const size_t lead = index.size() - s.size();
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + (s[d] == 1 ? 0 : index[lead + d]);
  return v[flat];
}

// Walks every output index in a plain loop and compares op(a, b) with f of the two
// operands' elements in double, rounded once to f32: one IEEE operation, so the kernel's
// result is that to the bit (double rounding through double is exact for + - * /).
void expect_binary_matches_loop(const std::string& what,
                                const std::function<Tensor(const Tensor&, const Tensor&)>& op,
                                const std::function<double(double, double)>& f, const Tensor& a,
                                const Tensor& b, const Shape& out_shape) {
  Tensor out = op(a, b);
  ASSERT_EQ(out.shape(), out_shape) << what;
  const std::vector<float> va = a.to_vector(), vb = b.to_vector(), vo = out.to_vector();
  std::vector<int64_t> index(out_shape.size(), 0);
  for (size_t i = 0; i < vo.size(); ++i) {
    const float want =
        static_cast<float>(f(broadcast_at(va, a.shape(), index), broadcast_at(vb, b.shape(), index)));
    if (vo[i] != want) {
      ADD_FAILURE() << what << ": element " << i << " of " << shape_str(out_shape) << " is " << vo[i]
                    << ", expected " << want;
      return;
    }
    for (size_t d = index.size(); d-- > 0;)
      if (++index[d] < out_shape[d])
        break;
      else
        index[d] = 0;
  }
}

}  // namespace

TEST(Elementwise, EveryBinaryOpMatchesALoopOnEveryLayout) {
  struct Case {
    std::string what;
    Tensor a, b;
    Shape out;
  };
  Tensor base = random_tensor({3, 4}, 7), other = away_from_zero({4, 3}, 8);
  Tensor spaced = away_from_zero({2, 3, 8}, 9);  // every other element of the last dimension
  const std::vector<Case> cases = {
      {"same shape", random_tensor({2, 3, 4}, 1), away_from_zero({2, 3, 4}, 2), {2, 3, 4}},
      {"b repeats over dims 0 and 2", random_tensor({2, 3, 4}, 1), away_from_zero({3, 1}, 3), {2, 3, 4}},
      {"both repeat", random_tensor({3, 1}, 4), away_from_zero({1, 4}, 5), {3, 4}},
      {"b one element", random_tensor({2, 3, 4}, 1), away_from_zero({1}, 6), {2, 3, 4}},
      {"a one element", random_tensor({1}, 6), away_from_zero({2, 3, 4}, 2), {2, 3, 4}},
      {"a fewer dims", random_tensor({4}, 10), away_from_zero({2, 3, 4}, 2), {2, 3, 4}},
      {"b one element, fewer dims of a", random_tensor({4}, 10), away_from_zero({1, 1, 1}, 11), {1, 1, 4}},
      {"a transposed", base.as_strided({4, 3}, {1, 4}, 0), other, {4, 3}},
      {"b transposed", other, base.as_strided({4, 3}, {1, 4}, 0), {4, 3}},
      {"both strided alike",
       random_tensor({2, 3, 8}, 12).as_strided({2, 3, 4}, {24, 8, 2}, 1),
       spaced.as_strided({2, 3, 4}, {24, 8, 2}, 0),
       {2, 3, 4}},
      {"both channels-last",
       random_tensor({2, 3, 2, 2}, 13).channels_last(),
       away_from_zero({2, 3, 2, 2}, 14).channels_last(),
       {2, 3, 2, 2}},
  };
  struct Op {
    std::string name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> f;
  };
  const std::vector<Op> ops = {
      {"add", [](const Tensor& x, const Tensor& y) { return add(x, y); },
       [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& x, const Tensor& y) { return sub(x, y); },
       [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& x, const Tensor& y) { return mul(x, y); },
       [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& x, const Tensor& y) { return dpt::div(x, y); },
       [](double x, double y) { return x / y; }},
  };
  for (const Case& c : cases)
    for (const Op& o : ops) expect_binary_matches_loop(o.name + ", " + c.what, o.op, o.f, c.a, c.b, c.out);
}

TEST(Elementwise, AffineMatchesALoop) {
  // x * scale + shift may be one fused multiply-add: within an f32 rounding of the double.
  Tensor contiguous = random_tensor({2, 3, 5}, 1, -3.0f, 3.0f);
  Tensor transposed = random_tensor({5, 6}, 2, -3.0f, 3.0f).as_strided({6, 5}, {1, 6}, 0);
  for (const Tensor& x : {contiguous, transposed}) {
    for (auto [scale, shift] : {std::pair<float, float>{-1.5f, 0.3f}, {2.0f, 0.0f}, {0.0f, -7.25f}}) {
      const std::string what = "affine(" + shape_str(x.shape()) + (x.is_contiguous() ? "" : " strided") +
                               ", " + std::to_string(scale) + ", " + std::to_string(shift) + ")";
      std::vector<float> got = affine(x, scale, shift).to_vector(), in = x.to_vector();
      ASSERT_EQ(got.size(), in.size()) << what;
      for (size_t i = 0; i < in.size(); ++i) {
        const double want = static_cast<double>(in[i]) * scale + shift;
        if (!(std::abs(got[i] - want) <= 1e-6 * std::abs(want) + 1e-7)) {  // one failure per case
          ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want;
          break;
        }
      }
      if (shift == 0.0f) {
        EXPECT_EQ(mul(x, scale).to_vector(), affine(x, scale, 0.0f).to_vector()) << what;
      }
    }
  }
}

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
