// A timeline of training steps as a Chrome trace (chrome://tracing, ui.perfetto.dev): one
// process row per rank, and in it one thread row per track — the compute thread (data
// wait, forward, backward with one span per autograd node, the all-reduce wait backward
// did not hide, optimizer) and one row per DDP bucket (its all-reduce from launch to
// completion) — so overlap of communication with backward shows at a glance; and counters
// (the collectives and bytes of each step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "io/json.h"

namespace dpt::profile {

// steady_clock nanoseconds since its epoch: the clock every span is given in.
double now_ns();

class Timeline {
 public:
  // Collective over the world: rank 0 checks that `path` can be written (creating its
  // folder), so a bad path fails before training rather than after (Error naming it); then
  // leaves a barrier and takes the time as the origin, so the ranks of one machine line up to
  // within the barrier's skew (tens of microseconds).
  explicit Timeline(std::string path);
  // The id of this rank's row `name`; rows are listed in the order first asked for.
  int track(const std::string& name);
  // A span [begin_ns, end_ns] on `track`, with `args` (a JSON object, e.g. {"bytes": 4096}).
  void add(int track, const std::string& name, double begin_ns, double end_ns,
           io::JsonOut args = io::JsonOut::object());
  // A counter sample at `at_ns` (chrome://tracing draws one graph per name and rank, each
  // key of `values` a series): it holds until the next sample of that name.
  void counter(const std::string& name, double at_ns, io::JsonOut values);
  // Collective over the world: every rank's spans go to rank 0, which writes the path (one
  // JSON object with "traceEvents"). Throws Error naming the file when it cannot.
  void write() const;

 private:
  std::string path_;
  double origin_ns_ = 0;
  std::vector<std::string> tracks_;
  io::JsonOut events_ = io::JsonOut::array();  // the spans' trace events
};

// While alive, every node the backward engine runs on this thread becomes a span on
// `track`: named after its op, with its sequence number and gradient shape (for an
// accumulate_grad node, the parameter's element count: when and how big each gradient
// became ready, which tools/predict_scaling reads back).
class BackwardRecorder : public autograd::NodeObserver {
 public:
  BackwardRecorder(Timeline& timeline, int track);
  ~BackwardRecorder() override;
  BackwardRecorder(const BackwardRecorder&) = delete;
  BackwardRecorder& operator=(const BackwardRecorder&) = delete;
  void node_started(const autograd::Node& node, const Tensor& grad) override;
  void node_finished(const autograd::Node& node, const Tensor& grad) override;

 private:
  Timeline& timeline_;
  int track_;
  autograd::NodeObserver* previous_;
  std::vector<double> started_ns_;  // a stack: nodes do not nest today, but hooks could run backward
};

}  // namespace dpt::profile
