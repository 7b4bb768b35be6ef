// oneDNN matmul with strided (transposed) operands. Measured for a linear layer at
// N=128 (2 threads): 3136->128, inner_product with plain weights (gemm:jit) fwd 0.31 ms,
// bwd-data 0.21, bwd-weights 0.21; inner_product with blocked weights (brgemm) 0.21,
// 0.22, 0.24 plus a weight reorder each way; matmul (brg) 0.22, 0.21, 0.21 with no
// reorder. 128->10: all variants 2-5 us. So matmul, which also needs no weight layout.
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/onednn.h"

namespace dpt::cpu {
namespace {

using namespace onednn;

// [rows, cols] of op(t), with the strides that read t transposed when asked.
memory::desc operand_desc(const Tensor& t, bool transpose) {
  int64_t r = t.size(0), c = t.size(1);
  if (!transpose) return memory::desc({r, c}, memory::data_type::f32, memory::dims{c, 1});
  return memory::desc({c, r}, memory::data_type::f32, memory::dims{1, c});
}

}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out) {
  bool has_bias = bias.defined();
  int64_t m = out.size(0), n = out.size(1);
  int64_t k = transpose_a ? a.size(0) : a.size(1);
  memory::desc a_desc = operand_desc(a, transpose_a), b_desc = operand_desc(b, transpose_b);
  memory::desc c_desc = plain_desc({m, n}, Tag::ab), bias_desc = plain_desc({1, n}, Tag::ab);
  auto prim =
      cached<dnnl::matmul>(cache_key("matmul", {m, k, n, transpose_a, transpose_b, has_bias, relu}), [&] {
        dnnl::matmul::desc desc(a_desc, b_desc, has_bias ? bias_desc : memory::desc(), c_desc);
        return std::make_shared<dnnl::matmul>(dnnl::matmul::primitive_desc(desc, relu_attr(relu), engine()));
      });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a_desc, engine(), a.raw_data())},
                                       {DNNL_ARG_WEIGHTS, memory(b_desc, engine(), b.raw_data())},
                                       {DNNL_ARG_DST, memory(c_desc, engine(), out.raw_data())}};
  if (has_bias) args[DNNL_ARG_BIAS] = memory(bias_desc, engine(), bias.raw_data());
  execute(*prim, args);
}

void sum_rows(const Tensor& t, const Tensor& out) {
  const float* p = t.data<float>();
  float* o = out.data<float>();
  int64_t rows = t.size(0), cols = t.size(1);
  // Rows outer, columns inner (contiguous, vectorised); split columns across threads.
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t j0 = 0; j0 < cols; j0 += 64) {
    int64_t j1 = std::min(cols, j0 + 64);
    float acc[64] = {};
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = p + i * cols;
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += row[j];
    }
    for (int64_t j = j0; j < j1; ++j) o[j] = acc[j - j0];
  }
}

}  // namespace dpt::cpu
