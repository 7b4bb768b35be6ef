// oneDNN pooling on plain NCHW tensors. oneDNN's JIT pooling is about 5x faster on the
// blocked nChw16c layout than on nchw (N=128, 32 channels, 28x28, 2x2/2, 2 threads:
// 0.08 ms vs 0.4-0.7 ms), and the two reorders cost about 0.15 ms; nhwc pools as fast
// but its reorders are 3-4x slower. So nChw16c with reorders, for 16 channels or more;
// below that the padding to 16 would cost more than it saves and nchw is used. That is
// for NCHW tensors; channels-last ones are pooled as nhwc directly, with no reorder.
#include "backend/cpu/kernels.h"
#include "backend/cpu/onednn.h"

namespace dpt::cpu {
namespace {

using namespace onednn;

struct Geometry {
  memory::dims src, dst, kernel, strides, pad_l, pad_r;
  memory::desc plain_src, plain_dst, work_src, work_dst;  // work_*: the layout pooled in
  algorithm alg;
};

Geometry geometry_of(PoolKind kind, const Shape& x, const Shape& out, const PoolParams& p, Layout layout) {
  Geometry g;
  g.src = dims_of(x);
  g.dst = dims_of(out);
  g.kernel = {p.kernel, p.kernel};
  g.strides = {p.stride, p.stride};
  g.pad_l = {p.padding, p.padding};
  // Exact right padding for floor-mode output sizes (may be below the left one).
  g.pad_r = {(out[2] - 1) * p.stride + p.kernel - x[2] - p.padding,
             (out[3] - 1) * p.stride + p.kernel - x[3] - p.padding};
  g.plain_src = layout_desc(g.src, layout);
  g.plain_dst = layout_desc(g.dst, layout);
  Tag work = layout == Layout::nhwc ? Tag::nhwc : x[1] >= 16 ? Tag::nChw16c : Tag::nchw;
  g.work_src = plain_desc(g.src, work);
  g.work_dst = plain_desc(g.dst, work);
  g.alg = kind == PoolKind::max ? algorithm::pooling_max : algorithm::pooling_avg_include_padding;
  return g;
}

std::string key_of(const char* op, PoolKind kind, const Shape& x, const PoolParams& p, Layout layout) {
  return cache_key(op, {static_cast<int64_t>(kind), x[0], x[1], x[2], x[3], p.kernel, p.stride, p.padding,
                        static_cast<int64_t>(layout)});
}

dnnl::pooling_forward::primitive_desc forward_pd(const Geometry& g, prop_kind prop) {
  return dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(prop, g.alg, g.work_src, g.work_dst, g.strides, g.kernel, g.pad_l, g.pad_r),
      engine());
}

struct ForwardEntry {
  dnnl::pooling_forward pool;
  Bridge src, dst;
  memory::desc workspace;  // empty for average pooling and for inference
};

struct BackwardEntry {
  dnnl::pooling_backward pool;
  Bridge diff_dst, diff_src;
  memory::desc workspace;
};

}  // namespace

// Max pooling keeps oneDNN's argmax workspace for the backward; average pooling needs none.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                    bool keep_for_backward, PoolSaved& saved) {
  // x's layout rules: out is in it, or (1x1 maps) holds the same bytes either way.
  Layout layout = layout_of(x);
  const bool training = keep_for_backward;  // oneDNN's training forward keeps the workspace
  auto entry = cached<ForwardEntry>(
      key_of(training ? "pool_fwd_training" : "pool_fwd_inference", kind, x.shape(), p, layout), [&] {
        Geometry g = geometry_of(kind, x.shape(), out.shape(), p, layout);
        auto pd = forward_pd(g, training ? prop_kind::forward_training : prop_kind::forward_inference);
        return std::make_shared<ForwardEntry>(
            ForwardEntry{dnnl::pooling_forward(pd), bridge_make(g.plain_src, pd.src_desc(), Direction::in),
                         bridge_make(g.plain_dst, pd.dst_desc(), Direction::out), pd.workspace_desc()});
      });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, bridge_in(entry->src, x.raw_data(), Scratch::src)},
      {DNNL_ARG_DST, bridge_out_memory(entry->dst, out.raw_data(), Scratch::dst)}};
  if (size_t bytes = entry->workspace.get_size(); keep_for_backward && bytes > 0) {
    saved.workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)});
    args[DNNL_ARG_WORKSPACE] = memory(entry->workspace, engine(), saved.workspace.raw_data());
  }
  execute(entry->pool, args);
  bridge_out(entry->dst, args[DNNL_ARG_DST], out.raw_data());
}

void pool2d_backward(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                     const Tensor& grad_x) {
  const Shape& x_shape = grad_x.shape();
  Layout layout = layout_of(grad_x);  // grad_out is in it too (see pool2d_forward)
  Geometry g = geometry_of(kind, x_shape, grad_out.shape(), p, layout);
  auto entry = cached<BackwardEntry>(key_of("pool_bwd", kind, x_shape, p, layout), [&] {
    auto hint = forward_pd(g, prop_kind::forward_training);
    dnnl::pooling_backward::primitive_desc pd(
        dnnl::pooling_backward::desc(g.alg, g.work_src, g.work_dst, g.strides, g.kernel, g.pad_l, g.pad_r),
        engine(), hint);
    return std::make_shared<BackwardEntry>(
        BackwardEntry{dnnl::pooling_backward(pd), bridge_make(g.plain_dst, pd.diff_dst_desc(), Direction::in),
                      bridge_make(g.plain_src, pd.diff_src_desc(), Direction::out), hint.workspace_desc()});
  });
  memory diff_src = bridge_out_memory(entry->diff_src, grad_x.raw_data(), Scratch::diff_src);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_DIFF_DST, bridge_in(entry->diff_dst, grad_out.raw_data(), Scratch::diff_dst)},
      {DNNL_ARG_DIFF_SRC, diff_src}};
  if (entry->workspace.get_size() > 0) {
    DPT_CHECK(saved.workspace.defined()) << "max_pool2d backward: no workspace from a training forward";
    args[DNNL_ARG_WORKSPACE] = memory(entry->workspace, engine(), saved.workspace.raw_data());
  }
  execute(entry->pool, args);
  bridge_out(entry->diff_src, diff_src, grad_x.raw_data());
}

// NCHW: one sum per (n, c) plane. Channels-last: each image is [HW, C], the mean runs down
// its columns.
void global_avg_pool2d_forward(const Tensor& x, const Tensor& out) {
  const float* p = x.data<float>();
  float* o = out.data<float>();
  int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  if (layout_of(x) == Layout::nhwc) {
    float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for schedule(static) if (n * c * hw > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float* image = p + i * hw * c;
      float* row = o + i * c;
      for (int64_t k = 0; k < c; ++k) row[k] = 0.0f;
      for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
        for (int64_t k = 0; k < c; ++k) row[k] += image[j * c + k];
      for (int64_t k = 0; k < c; ++k) row[k] *= inv;
    }
    return;
  }
  double inv = 1.0 / static_cast<double>(hw);
#pragma omp parallel for schedule(static) if (n * c * hw > 65536)
  for (int64_t i = 0; i < n * c; ++i) {
    const float* plane = p + i * hw;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < hw; ++j) s += plane[j];
    o[i] = static_cast<float>(s * inv);
  }
}

void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) {
  const float* g = grad_out.data<float>();
  float* o = grad_x.data<float>();
  int64_t n = grad_x.size(0), c = grad_x.size(1), hw = grad_x.size(2) * grad_x.size(3);
  float inv = 1.0f / static_cast<float>(hw);
  if (layout_of(grad_x) == Layout::nhwc) {
#pragma omp parallel for schedule(static) if (n * c * hw > 65536)
    for (int64_t i = 0; i < n; ++i) {
      float* image = o + i * hw * c;
      for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
        for (int64_t k = 0; k < c; ++k) image[j * c + k] = g[i * c + k] * inv;
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n * c * hw > 65536)
  for (int64_t i = 0; i < n * c; ++i) {
    float v = g[i] * inv;
    float* plane = o + i * hw;
    for (int64_t j = 0; j < hw; ++j) plane[j] = v;
  }
}

}  // namespace dpt::cpu
