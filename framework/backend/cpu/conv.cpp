// oneDNN convolutions on NCHW or channels-last (NHWC) activations. With a channels-last
// output the primitive works in nhwc for src and dst (brgconv/jit avx512: 32->64, 14x14,
// N=128: fwd 2.3, bwd-data 2.0, bwd-weights 2.2 ms), so channels-last tensors pass
// without any reorder and an NCHW input (a network's first layer) is reordered once.
// With an NCHW output (DPT_CHANNELS_LAST=0) every activation descriptor says
// format_tag::any, so oneDNN picks its fastest layout (nChw16c on AVX-512), and the
// Bridges reorder at the boundary. Weights always say any (blocked, reordered from
// plain OIHW: parameters never change layout). Measured on this machine (2 threads, N=128):
//   32->64, 14x14, 3x3 pad 1: nchw (gemm:jit) fwd 3.9 ms, bwd-data 4.2, bwd-weights 3.7;
//     any (jit:avx512_core) fwd 1.9, bwd-data 1.8, bwd-weights 1.9, plus 0.05-0.08 ms
//     per activation reorder;
//   1->32, 28x28: nchw fwd 1.6, bwd-weights 3.4; any fwd 0.22 + 0.12 reorder of dst,
//     bwd-weights 0.18 + 0.12 reorder of diff_dst.
// End to end through the op (bench_kernels: bias, fused ReLU, reorders, allocation):
//   1->32 fwd 0.45 ms, bwd 1.3 (weights only); 32->64 fwd 2.3, bwd 5.0 — against
//   6.7, 2.8, 7.6 and 8.7 ms with nchw src/dst (gemm; worse still with the ReLU post-op).
// So blocked-plus-reorders wins by 2-3x, and is what this file does.
#include "backend/cpu/kernels.h"
#include "backend/cpu/onednn.h"

namespace dpt::cpu {
namespace {

using namespace onednn;

struct Geometry {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
  memory::desc plain_src, plain_weights, plain_bias, plain_dst;
  Layout src_layout, dst_layout;
};

Geometry geometry_of(const Shape& x, const Shape& w, const Shape& out, const ConvParams& p, Layout src_layout,
                     Layout dst_layout) {
  Geometry g;
  int64_t groups = p.groups;
  g.src = dims_of(x);
  g.dst = dims_of(out);
  g.bias = {w[0]};
  if (groups == 1)
    g.weights = dims_of(w);
  else
    g.weights = {groups, w[0] / groups, w[1], w[2], w[3]};
  g.strides = {p.stride, p.stride};
  g.dilates = {p.dilation - 1, p.dilation - 1};  // oneDNN counts the gaps: 0 is dense
  g.pad_l = {p.padding, p.padding};
  // The right padding that makes oneDNN's size check exact; it can be below the left one
  // (even negative) when the last stride does not fit, as in PyTorch's floor mode.
  g.pad_r = {(out[2] - 1) * p.stride + (w[2] - 1) * p.dilation + 1 - x[2] - p.padding,
             (out[3] - 1) * p.stride + (w[3] - 1) * p.dilation + 1 - x[3] - p.padding};
  g.plain_src = layout_desc(g.src, src_layout);
  g.plain_weights = plain_desc(g.weights, groups == 1 ? Tag::oihw : Tag::goihw);
  g.plain_bias = plain_desc(g.bias, Tag::x);
  g.plain_dst = layout_desc(g.dst, dst_layout);
  g.src_layout = src_layout;
  g.dst_layout = dst_layout;
  return g;
}

memory::desc any_desc(const memory::dims& dims) {
  return memory::desc(dims, memory::data_type::f32, Tag::any);
}

// The layout the primitive computes src/dst (and their gradients) in: nhwc when the
// output is channels-last, oneDNN's choice otherwise.
memory::desc work_desc(const Geometry& g, const memory::dims& dims) {
  return g.dst_layout == Layout::nhwc ? layout_desc(dims, Layout::nhwc) : any_desc(dims);
}

std::string key_of(const char* op, const Shape& x, const Shape& w, const ConvParams& p, bool bias, bool relu,
                   const Geometry& g) {
  return cache_key(
      op, {x[0], x[1], x[2], x[3], w[0], w[2], w[3], p.stride, p.padding, p.dilation, p.groups, bias ? 1 : 0,
           relu ? 1 : 0, static_cast<int64_t>(g.src_layout), static_cast<int64_t>(g.dst_layout)});
}

dnnl::convolution_forward::primitive_desc forward_pd(const Geometry& g, bool bias, bool relu) {
  memory::desc src = work_desc(g, g.src), weights = any_desc(g.weights), dst = work_desc(g, g.dst);
  // A zero bias descriptor is oneDNN's "no bias".
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, src,
                                       weights, bias ? g.plain_bias : memory::desc(), dst, g.strides,
                                       g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, relu_attr(relu), engine());
}

struct ForwardEntry {
  dnnl::convolution_forward conv;
  Bridge src, weights, dst;
};

struct BackwardDataEntry {
  dnnl::convolution_backward_data conv;
  Bridge diff_dst, weights, diff_src;
};

struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights conv;
  Bridge src, diff_dst, diff_weights;
};

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out) {
  bool has_bias = bias.defined();
  Geometry g = geometry_of(x.shape(), w.shape(), out.shape(), p, layout_of(x), layout_of(out));
  auto entry = cached<ForwardEntry>(key_of("conv_fwd", x.shape(), w.shape(), p, has_bias, relu, g), [&] {
    auto pd = forward_pd(g, has_bias, relu);
    return std::make_shared<ForwardEntry>(
        ForwardEntry{dnnl::convolution_forward(pd), bridge_make(g.plain_src, pd.src_desc(), Direction::in),
                     bridge_make(g.plain_weights, pd.weights_desc(), Direction::in),
                     bridge_make(g.plain_dst, pd.dst_desc(), Direction::out)});
  });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, bridge_in(entry->src, x.raw_data(), Scratch::src)},
      {DNNL_ARG_WEIGHTS, bridge_in(entry->weights, w.raw_data(), Scratch::weights)},
      {DNNL_ARG_DST, bridge_out_memory(entry->dst, out.raw_data(), Scratch::dst)}};
  if (has_bias) args[DNNL_ARG_BIAS] = memory(g.plain_bias, engine(), bias.raw_data());
  execute(entry->conv, args);
  bridge_out(entry->dst, args[DNNL_ARG_DST], out.raw_data());
}

void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias) {
  // The input's layout: grad_x has it when defined, else x (read by the weights pass).
  Layout src_layout = layout_of(grad_x.defined() ? grad_x : x);
  Geometry g = geometry_of(x_shape, w_shape, grad_out.shape(), p, src_layout, layout_of(grad_out));
  memory diff_dst_blocked;  // shared by both passes when they want the same layout
  memory::desc diff_dst_layout;

  if (grad_x.defined()) {
    auto entry =
        cached<BackwardDataEntry>(key_of("conv_bwd_data", x_shape, w_shape, p, false, false, g), [&] {
          auto hint = forward_pd(g, false, false);
          auto desc = dnnl::convolution_backward_data::desc(
              algorithm::convolution_direct, work_desc(g, g.src), any_desc(g.weights), work_desc(g, g.dst),
              g.strides, g.dilates, g.pad_l, g.pad_r);
          dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), hint);
          return std::make_shared<BackwardDataEntry>(
              BackwardDataEntry{dnnl::convolution_backward_data(pd),
                                bridge_make(g.plain_dst, pd.diff_dst_desc(), Direction::in),
                                bridge_make(g.plain_weights, pd.weights_desc(), Direction::in),
                                bridge_make(g.plain_src, pd.diff_src_desc(), Direction::out)});
        });
    diff_dst_blocked = bridge_in(entry->diff_dst, grad_out.raw_data(), Scratch::diff_dst);
    diff_dst_layout = entry->diff_dst.chosen;
    memory diff_src = bridge_out_memory(entry->diff_src, grad_x.raw_data(), Scratch::diff_src);
    execute(entry->conv, {{DNNL_ARG_DIFF_DST, diff_dst_blocked},
                          {DNNL_ARG_WEIGHTS, bridge_in(entry->weights, w.raw_data(), Scratch::weights)},
                          {DNNL_ARG_DIFF_SRC, diff_src}});
    bridge_out(entry->diff_src, diff_src, grad_x.raw_data());
  }

  if (grad_w.defined() || grad_bias.defined()) {
    bool has_bias = grad_bias.defined();
    auto entry = cached<BackwardWeightsEntry>(
        key_of("conv_bwd_weights", x_shape, w_shape, p, has_bias, false, g), [&] {
          auto hint = forward_pd(g, has_bias, false);
          dnnl::convolution_backward_weights::desc desc(
              algorithm::convolution_direct, work_desc(g, g.src), any_desc(g.weights),
              has_bias ? g.plain_bias : memory::desc(), work_desc(g, g.dst), g.strides, g.dilates, g.pad_l,
              g.pad_r);
          dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(), hint);
          return std::make_shared<BackwardWeightsEntry>(BackwardWeightsEntry{
              dnnl::convolution_backward_weights(pd), bridge_make(g.plain_src, pd.src_desc(), Direction::in),
              bridge_make(g.plain_dst, pd.diff_dst_desc(), Direction::in),
              bridge_make(g.plain_weights, pd.diff_weights_desc(), Direction::out)});
        });
    memory diff_dst = diff_dst_blocked && diff_dst_layout == entry->diff_dst.chosen
                          ? diff_dst_blocked
                          : bridge_in(entry->diff_dst, grad_out.raw_data(), Scratch::diff_dst);
    // Bias wanted without weights: oneDNN computes both, so the weights go to scratch.
    void* diff_w_data =
        grad_w.defined() ? grad_w.raw_data() : scratch(Scratch::extra, entry->diff_weights.plain.get_size());
    memory diff_w = bridge_out_memory(entry->diff_weights, diff_w_data, Scratch::diff_weights);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bridge_in(entry->src, x.raw_data(), Scratch::src)},
                                         {DNNL_ARG_DIFF_DST, diff_dst},
                                         {DNNL_ARG_DIFF_WEIGHTS, diff_w}};
    if (has_bias) args[DNNL_ARG_DIFF_BIAS] = memory(g.plain_bias, engine(), grad_bias.raw_data());
    execute(entry->conv, args);
    bridge_out(entry->diff_weights, diff_w, diff_w_data);
  }
}

// x stays in its layout (NCHW or channels-last), weights are plain OIHW, and the output is
// channels-last unless DPT_CHANNELS_LAST=0: a network converts once, at its first
// convolution, and its activations stay NHWC from there.
ConvForward conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const ConvParams& p,
                           bool relu, const Shape& out_shape) {
  ConvForward run{Tensor(), x_in, w_in.contiguous(), p};
  run.params.nhwc = onednn::channels_last_enabled();
  run.out = onednn::empty_in(out_shape, run.params.nhwc ? onednn::Layout::nhwc : onednn::Layout::nchw);
  conv2d_forward(run.x, run.w, bias.defined() ? bias.contiguous() : Tensor(), run.params, relu, run.out);
  return run;
}

}  // namespace dpt::cpu
