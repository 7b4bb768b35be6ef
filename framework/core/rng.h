// Seeded random numbers for initialisation, dropout and shuffling. Each user owns its
// generator, so results depend only on seeds, not on which code ran before.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "core/tensor.h"

namespace dpt {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : engine_(seed) {}
  uint64_t next_u64() { return engine_(); }
  // Fills a contiguous f32 CPU tensor.
  void fill_uniform(const Tensor& t, float low, float high);
  void fill_normal(const Tensor& t, float mean, float stddev);
  std::mt19937_64& engine() { return engine_; }
  // The generator's whole state as text (the standard's portable form), for checkpoints;
  // set_state(state()) continues the same sequence. set_state throws Error on bad text.
  std::string state() const;
  void set_state(const std::string& text);

 private:
  std::mt19937_64 engine_;
};

}  // namespace dpt
