#include "ops/shape.h"

#include "autograd/node.h"
#include "ops/device_check.h"

namespace dpt {

Tensor reshape(const Tensor& x, Shape shape) {
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DPT_CHECK(inferred < 0) << "reshape: more than one -1 in " << shape_str(shape);
      inferred = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0 && known > 0) shape[inferred] = x.numel() / known;
  DPT_CHECK(shape_numel(shape) == x.numel())
      << "reshape: cannot reshape " << shape_str(x.shape()) << " into " << shape_str(shape);
  Tensor out = contiguous_on_device(x).view(shape);
  autograd::record("reshape", out, {x}, [in_shape = x.shape()](const Tensor& g) {
    return std::vector<Tensor>{contiguous_on_device(g).view(in_shape)};
  });
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim) {
  DPT_CHECK(start_dim >= 0 && start_dim < x.dim())
      << "flatten: start_dim " << start_dim << " out of range for " << shape_str(x.shape());
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  shape.push_back(-1);
  return reshape(x, shape);
}

}  // namespace dpt
