#include <gtest/gtest.h>
#include "core/tensor.h"
#include "autograd/node.h"
using namespace dpt;
TEST(Tensor, Basics) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Storage, LargeHostBlocksAreReusedNotReturned) {
  void* first;
  {
    Tensor t = Tensor::empty({1 << 18});  // 1 MiB
    first = t.raw_data();
  }
  Tensor again = Tensor::empty({1 << 18});
  EXPECT_EQ(again.raw_data(), first);  // from the free list, no new mapping
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.raw_data()) % 64, 0u);
  Tensor small = Tensor::empty({3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % 64, 0u);
}

TEST(Tensor, FromAnEmptyVector) {
  // An empty vector's data() may be null: copying 0 bytes from it must not be attempted
  // (UndefinedBehaviorSanitizer reported it).
  Tensor f = Tensor::from_vector(std::vector<float>{}, {0});
  Tensor i = Tensor::from_vector(std::vector<int64_t>{}, {2, 0});
  EXPECT_EQ(f.numel(), 0);
  EXPECT_EQ(i.numel(), 0);
  EXPECT_EQ(i.dtype(), DType::i64);
}
