#include "backend/cpu/elementwise.h"

#include <vector>

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
  if (same_dense || (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous())) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  if (b.numel() == 1 && a.is_contiguous()) {
    float s = pb[0];
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], s);
    return;
  }
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

void add_inplace(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add: return map_binary([](float x, float y) { return x + y; }, a, b, out);
    case BinaryOp::sub: return map_binary([](float x, float y) { return x - y; }, a, b, out);
    case BinaryOp::mul: return map_binary([](float x, float y) { return x * y; }, a, b, out);
    case BinaryOp::div: return map_binary([](float x, float y) { return x / y; }, a, b, out);
  }
}

void affine(const Tensor& a, float scale, float shift, const Tensor& out) {
  Tensor src = a.contiguous();
  const float* p = src.data<float>();
  float* o = out.data<float>();
  int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) o[i] = p[i] * scale + shift;
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

}  // namespace dpt::cpu
