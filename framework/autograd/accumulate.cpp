#include "autograd/accumulate.h"

#include "backend/kernels.h"

namespace dpt::autograd {
namespace {

void add_inplace(const Tensor& dst, const Tensor& src) {
  DPT_CHECK(dst.shape() == src.shape()) << "gradient of shape " << shape_str(src.shape())
                                        << " added to one of shape " << shape_str(dst.shape());
  DPT_CHECK(dst.device() == src.device())
      << "gradient on " << src.device().str() << " added to one on " << dst.device().str();
  DPT_CHECK(dst.is_dense()) << "gradient accumulation into a non-dense tensor";
  // Two gradients may differ in layout (an NCHW one from a test or a loss, a
  // channels-last one from a conv): src is brought to dst's, then the buffers add.
  const Kernels& k = kernels_for(dst.device());
  Tensor s = src;
  if (src.strides() != dst.strides()) {
    s = Tensor::empty_strided(dst.shape(), dst.strides(), src.dtype(), src.device());
    k.copy(src, s);
  }
  k.add_inplace(dst, s);
}

}  // namespace

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  // `a` may alias a tensor the forward pass still holds (ops pass gradients through), so
  // the sum goes into a new tensor, in a's layout (channels-last gradients stay so).
  Tensor sum = a.clone_preserving_strides();
  add_inplace(sum, b);
  return sum;
}

void accumulate_into_leaf(const Tensor& leaf, const Tensor& grad) {
  TensorImpl* impl = leaf.impl();
  if (impl->grad.defined())
    add_inplace(impl->grad, grad);
  else if (grad.device().is_cuda())
    impl->grad = grad.clone_preserving_strides();  // private: `grad` may alias another gradient or activation
  else
    impl->grad = grad.clone();
  for (const PostAccumulateHook& hook : impl->post_accumulate_hooks) hook(leaf);
}

}  // namespace dpt::autograd
