#include "profile/straggler.h"

#include <algorithm>
#include <cstdio>

#include "comm/dist.h"
#include "profile/timeline.h"

namespace dpt::profile {
namespace {

constexpr Phase kWorkPhases[] = {Phase::data, Phase::forward, Phase::backward, Phase::optimizer};

// The median of value(item) over `items` (0 for none).
template <class T, class Value>
double median(const std::vector<T>& items, Value value) {
  std::vector<double> values;
  for (const T& item : items) values.push_back(value(item));
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string ms(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", v);
  return text;
}

}  // namespace

RankMedians medians_of(const std::vector<StepPhases>& steps) {
  RankMedians m;
  for (Phase phase : kPhases) m.phases[phase] = median(steps, [&](const StepPhases& s) { return s[phase]; });
  m.work_ms = median(steps, [](const StepPhases& s) { return s.step_ms() - s[Phase::comm_wait]; });
  return m;
}

std::vector<std::string> straggler_lines(const std::vector<RankMedians>& ranks,
                                         const std::vector<std::string>& hosts, double threshold) {
  std::vector<std::string> lines;
  if (ranks.size() < 2) return lines;
  const double typical = median(ranks, [](const RankMedians& r) { return r.work_ms; });
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    RankMedians r = ranks[rank];
    if (r.work_ms <= (1 + threshold) * typical) continue;
    // The phase that adds most to this rank's work against the median rank's.
    Phase worst = Phase::data;
    double worst_extra = -1, worst_typical = 0;
    for (Phase phase : kWorkPhases) {
      const double phase_typical = median(ranks, [&](const RankMedians& m) { return m.phases[phase]; });
      if (r.phases[phase] - phase_typical > worst_extra) {
        worst_extra = r.phases[phase] - phase_typical;
        worst = phase;
        worst_typical = phase_typical;
      }
    }
    lines.push_back("straggler: rank " + std::to_string(rank) + " (host " + hosts.at(rank) + ") works " +
                    ms(r.work_ms) + " a step vs median " + ms(typical) + ": " + phase_name(worst) + " " +
                    ms(r.phases[worst]) + " vs " + ms(worst_typical));
  }
  return lines;
}

StragglerWatch::StragglerWatch() : hosts_(dist::gather_text(dist::info().host, *dist::world())) {}

void StragglerWatch::add(const StepPhases& step) {
  window_.push_back(step);
  run_.push_back(step);
}

std::vector<RankMedians> StragglerWatch::gather(const RankMedians& mine) const {
  const int ranks = dist::info().world_size;
  if (ranks == 1) return {mine};
  // Each rank's five phases, then its work.
  std::vector<float> values(mine.phases.ms.begin(), mine.phases.ms.end());
  values.push_back(static_cast<float>(mine.work_ms));
  Tensor all = Tensor::empty({6 * static_cast<int64_t>(ranks)});
  dist::world()->all_gather(all, Tensor::from_vector(values, {6}))->wait();
  std::vector<RankMedians> out(static_cast<size_t>(ranks));
  const float* a = all.data<float>();
  for (int r = 0; r < ranks; ++r, a += 6) {
    std::copy(a, a + 5, out[r].phases.ms.begin());
    out[r].work_ms = a[5];
  }
  return out;
}

std::vector<std::string> StragglerWatch::report() {
  const std::vector<RankMedians> ranks = gather(medians_of(window_));
  window_.clear();
  if (dist::info().rank != 0) return {};
  return straggler_lines(ranks, hosts_, kThreshold);
}

io::JsonOut StragglerWatch::run_report(size_t skip) {
  const std::vector<StepPhases> steps(run_.begin() + static_cast<std::ptrdiff_t>(std::min(skip, run_.size())),
                                      run_.end());
  const std::vector<RankMedians> ranks = gather(medians_of(steps));
  if (dist::info().rank != 0) return {};
  io::JsonOut per_rank = io::JsonOut::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    io::JsonOut entry = {{"rank", r}, {"host", hosts_[r]}, {"work_ms", ranks[r].work_ms}};
    ranks[r].phases.add_to(entry);
    per_rank.push_back(std::move(entry));
  }
  return {{"ranks", per_rank}, {"stragglers", straggler_lines(ranks, hosts_, kThreshold)}};
}

}  // namespace dpt::profile
