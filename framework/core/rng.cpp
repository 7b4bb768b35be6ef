#include "core/rng.h"

#include <sstream>

namespace dpt {

void Rng::fill_uniform(const Tensor& t, float low, float high) {
  DPT_CHECK(t.is_contiguous() && t.device().is_cpu()) << "fill_uniform: needs a contiguous CPU tensor";
  std::uniform_real_distribution<float> dist(low, high);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = dist(engine_);
}

void Rng::fill_normal(const Tensor& t, float mean, float stddev) {
  DPT_CHECK(t.is_contiguous() && t.device().is_cpu()) << "fill_normal: needs a contiguous CPU tensor";
  std::normal_distribution<float> dist(mean, stddev);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = dist(engine_);
}

std::string Rng::state() const {
  std::ostringstream out;
  out << engine_;
  return out.str();
}

void Rng::set_state(const std::string& text) {
  std::istringstream in(text);
  std::mt19937_64 engine;
  in >> engine;
  std::string rest;
  const bool ok = !in.fail() && !(in >> rest);  // read, and nothing after it
  DPT_CHECK(ok) << "random generator state: expected the 313 numbers of an mt19937_64 state";
  engine_ = engine;
}

}  // namespace dpt
