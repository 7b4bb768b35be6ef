// The CPU's plain-loop elementwise kernels, parallel with OpenMP: broadcast arithmetic,
// affine maps, ReLU, dropout, and whole-tensor sums.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"

namespace dpt::cpu {
namespace {

template <class F>
void map_binary(F f, const Tensor& a, const Tensor& b, const Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  int64_t n = out.numel();
  bool same_dense = a.shape() == b.shape() && a.strides() == b.strides() && out.strides() == a.strides() &&
                    a.is_dense();  // e.g. channels-last, out made by empty_like(a)
  if (same_dense || (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()))
    return for_each_index(n, [=](int64_t i) { po[i] = f(pa[i], pb[i]); });
  if (b.numel() == 1 && a.is_contiguous())
    return for_each_index(n, [=, s = pb[0]](int64_t i) { po[i] = f(pa[i], s); });
  // General case: walk the output, stepping each input by its broadcast stride (0 where
  // that input has size 1). The innermost dimension is the inner loop.
  const Shape& shape = out.shape();
  size_t nd = shape.size();
  auto broadcast_strides = [&](const Tensor& t) {
    Shape s(nd, 0);
    size_t lead = nd - t.shape().size();
    for (size_t d = 0; d < t.shape().size(); ++d) s[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
    return s;
  };
  Shape sa = broadcast_strides(a), sb = broadcast_strides(b);
  int64_t inner = nd ? shape[nd - 1] : 1;
  int64_t outer = inner ? n / inner : 0;
  int64_t ia_step = nd ? sa[nd - 1] : 0, ib_step = nd ? sb[nd - 1] : 0;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, oa = 0, ob = 0;
    for (size_t d = nd - 1; d-- > 0;) {
      int64_t i = rest % shape[d];
      rest /= shape[d];
      oa += i * sa[d];
      ob += i * sb[d];
    }
    float* dst = po + o * inner;
    for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[oa + i * ia_step], pb[ob + i * ib_step]);
  }
}

}  // namespace

void add_inplace(const Tensor& dst, const Tensor& src) {
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  for_each_index(dst.numel(), [=](int64_t i) { d[i] += s[i]; });
}

void relu_forward(const Tensor& x, const Tensor& out) {
  const float* p = x.data<float>();
  float* o = out.data<float>();
  for_each_index(out.numel(), [=](int64_t i) { o[i] = p[i] > 0.0f ? p[i] : 0.0f; });
}

void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* o = out.data<float>();
  for_each_index(out.numel(), [=](int64_t i) {
    float s = pa[i] + pb[i];
    o[i] = s > 0.0f ? s : 0.0f;
  });
}

void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  const float* o = out.data<float>();
  const float* g = grad_out.data<float>();
  float* gi = grad_in.data<float>();
  for_each_index(out.numel(), [=](int64_t i) { gi[i] = o[i] > 0.0f ? g[i] : 0.0f; });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add:
      return map_binary([](float x, float y) { return x + y; }, a, b, out);
    case BinaryOp::sub:
      return map_binary([](float x, float y) { return x - y; }, a, b, out);
    case BinaryOp::mul:
      return map_binary([](float x, float y) { return x * y; }, a, b, out);
    case BinaryOp::div:
      return map_binary([](float x, float y) { return x / y; }, a, b, out);
  }
}

void affine(const Tensor& a, float scale, float shift, const Tensor& out) {
  Tensor src = a.contiguous();
  const float* p = src.data<float>();
  float* o = out.data<float>();
  for_each_index(out.numel(), [=](int64_t i) { o[i] = p[i] * scale + shift; });
}

Tensor sum_to_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  // Sum over leading dimensions that `shape` lacks, and over dimensions where it has 1.
  const Shape& full = t.shape();
  size_t nd = full.size(), lead = nd - shape.size();
  Shape kept(nd);  // the target shape, padded with leading 1s
  for (size_t d = 0; d < nd; ++d) kept[d] = d < lead ? 1 : shape[d - lead];
  Tensor src = t.contiguous();
  Tensor out = Tensor::zeros(shape);
  const float* p = src.data<float>();
  float* o = out.data<float>();
  Shape out_strides = shape_contiguous_strides(kept);
  std::vector<double> acc(out.numel(), 0.0);
  std::vector<int64_t> index(nd, 0);
  for (int64_t i = 0, n = src.numel(); i < n; ++i) {
    int64_t target = 0;
    for (size_t d = 0; d < nd; ++d)
      if (kept[d] != 1) target += index[d] * out_strides[d];
    acc[target] += p[i];
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < full[d]) break;
      index[d] = 0;
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<float>(acc[i]);
  return out;
}

void dropout_forward(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out) {
  Tensor in = x.contiguous();
  float keep_scale = 1.0f / (1.0f - p);
  float* m = mask.data<float>();
  const float* xi = in.data<float>();
  float* o = out.data<float>();
  // Two 32-bit draws from each 64-bit number.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
  for (int64_t i = 0, n = x.numel(); i < n; i += 2) {
    uint64_t bits = rng.next_u64();
    m[i] = (bits & 0xffffffffu) < threshold ? 0.0f : keep_scale;
    if (i + 1 < n) m[i + 1] = (bits >> 32) < threshold ? 0.0f : keep_scale;
  }
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = xi[i] * m[i];
}

// In double: a mean over a whole batch of activations loses digits in f32. An OpenMP
// reduction clause would add the threads' partial sums in the order they finish.
void sum_scaled(const Tensor& x, double scale, const Tensor& out) {
  constexpr int64_t kChunk = 32768;
  Tensor c = x.contiguous();
  const float* p = c.data<float>();
  const int64_t n = c.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t k = 0; k < chunks; ++k) {
    double s = 0;
    for (int64_t i = k * kChunk, end = std::min(n, i + kChunk); i < end; ++i) s += p[i];
    partial[k] = s;
  }
  double s = 0;
  for (double v : partial) s += v;
  out.data<float>()[0] = static_cast<float>(s * scale);
}

void fill_scaled(const Tensor& out, const Tensor& scalar, float scale) { out.fill_(scalar.item() * scale); }

}  // namespace dpt::cpu
