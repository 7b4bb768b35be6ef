// Shapes and strides are short vectors of int64, in elements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape shape_contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[128, 1, 28, 28]"

}  // namespace dpt
