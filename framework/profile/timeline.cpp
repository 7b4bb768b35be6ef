#include "profile/timeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/dist.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace dpt::profile {
namespace {

// Trace times are microseconds; kept to the nanosecond.
double micros(double ns) { return std::round(ns) / 1e3; }

// The metadata events that name rank `rank`'s process row and its thread rows.
io::JsonOut row_names(int rank, const std::vector<std::string>& tracks) {
  auto meta = [&](const char* name, io::JsonOut args) {
    return io::JsonOut{{"ph", "M"}, {"name", name}, {"pid", rank}, {"args", std::move(args)}};
  };
  io::JsonOut out = {meta("process_name", {{"name", "rank " + std::to_string(rank)}}),
                     meta("process_sort_index", {{"sort_index", rank}})};
  for (size_t t = 0; t < tracks.size(); ++t) {
    for (io::JsonOut event :
         {meta("thread_name", {{"name", tracks[t]}}), meta("thread_sort_index", {{"sort_index", t}})}) {
      event["tid"] = t;
      out.push_back(std::move(event));
    }
  }
  return out;
}

}  // namespace

double now_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

Timeline::Timeline(std::string path) : path_(std::move(path)) {
  if (dist::info().rank == 0) {
    const std::filesystem::path p(path_);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    const bool existed = std::filesystem::exists(p, ec);
    DPT_CHECK(std::ofstream(p, std::ios::app).good())
        << "cannot write the timeline file '" << path_ << "' (" << std::strerror(errno) << ")";
    if (!existed) std::filesystem::remove(p, ec);
  }
  if (dist::info().world_size > 1) dist::world()->barrier()->wait();
  origin_ns_ = now_ns();
}

int Timeline::track(const std::string& name) {
  auto it = std::find(tracks_.begin(), tracks_.end(), name);
  if (it == tracks_.end()) it = tracks_.insert(it, name);
  return static_cast<int>(it - tracks_.begin());
}

void Timeline::add(int track, const std::string& name, double begin_ns, double end_ns, io::JsonOut args) {
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"pid", dist::info().rank},
                     {"tid", track},
                     {"ts", micros(begin_ns - origin_ns_)},
                     {"dur", micros(std::max(0.0, end_ns - begin_ns))},
                     {"args", std::move(args)}});
}

void Timeline::counter(const std::string& name, double at_ns, io::JsonOut values) {
  events_.push_back({{"ph", "C"},
                     {"name", name},
                     {"pid", dist::info().rank},
                     {"ts", micros(at_ns - origin_ns_)},
                     {"args", std::move(values)}});
}

void Timeline::write() const {
  io::JsonOut mine = row_names(dist::info().rank, tracks_);
  mine.insert(mine.end(), events_.begin(), events_.end());
  const std::vector<std::string> all = dist::gather_text(io::json_text(mine), *dist::world());
  if (dist::info().rank != 0) return;
  io::JsonOut events = io::JsonOut::array();
  for (const std::string& part : all) {
    io::JsonOut rank_events = io::JsonOut::parse(part);  // written just above, by this program
    events.insert(events.end(), rank_events.begin(), rank_events.end());
  }
  const io::JsonOut trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  io::write_file_atomic(path_, {io::json_text(trace) + "\n"});
}

BackwardRecorder::BackwardRecorder(Timeline& timeline, int track)
    : timeline_(timeline), track_(track), previous_(autograd::set_node_observer(this)) {}

BackwardRecorder::~BackwardRecorder() { autograd::set_node_observer(previous_); }

void BackwardRecorder::node_started(const autograd::Node&, const Tensor&) { started_ns_.push_back(now_ns()); }

void BackwardRecorder::node_finished(const autograd::Node& node, const Tensor& grad) {
  double end = now_ns();
  if (started_ns_.empty()) return;
  double begin = started_ns_.back();
  started_ns_.pop_back();
  io::JsonOut args = node.name == "accumulate_grad"
                         ? io::JsonOut{{"numel", grad.numel()}}
                         : io::JsonOut{{"seq", node.sequence_nr}, {"grad", shape_str(grad.shape())}};
  timeline_.add(track_, node.name, begin, end, std::move(args));
}

}  // namespace dpt::profile
