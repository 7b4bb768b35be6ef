#include "profile/timeline.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "distributed/dist.h"
#include "io/json.h"

namespace dpt::profile {
namespace {

// Every rank's `text`, in rank order, on every rank: lengths first, then the bytes packed
// eight to an i64 element (the group's collectives move f32 and i64 tensors).
std::vector<std::string> gather_text(const std::string& text) {
  dist::ProcessGroup& group = *dist::world();
  const int n = group.size();
  Tensor lengths = Tensor::empty({n}, DType::i64);
  group
      .all_gather(lengths, Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}))
      ->wait();
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  const int64_t words = (longest + 7) / 8;
  Tensor mine = Tensor::zeros({words}, DType::i64);
  std::memcpy(mine.raw_data(), text.data(), text.size());
  Tensor all = Tensor::empty({words * n}, DType::i64);
  group.all_gather(all, mine)->wait();
  std::vector<std::string> out;
  const char* bytes = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < n; ++r) out.emplace_back(bytes + r * words * 8, lengths.data<int64_t>()[r]);
  return out;
}

std::string micros(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ns / 1e3);
  return buf;
}

// The metadata events that name rank `rank`'s process row and its thread rows.
std::string row_names(int rank, const std::vector<std::string>& tracks) {
  std::string pid = std::to_string(rank);
  std::string out = "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + pid +
                    ", \"args\": {\"name\": \"rank " + pid + "\"}},\n" +
                    "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + pid +
                    ", \"args\": {\"sort_index\": " + pid + "}},\n";
  for (size_t t = 0; t < tracks.size(); ++t) {
    std::string tid = std::to_string(t);
    out += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + tid +
           ", \"args\": {\"name\": " + io::json_quote(tracks[t]) + "}},\n" +
           "{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid + ", \"tid\": " + tid +
           ", \"args\": {\"sort_index\": " + tid + "}},\n";
  }
  return out;
}

}  // namespace

double now_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

Timeline::Timeline() {
  if (dist::info().world_size > 1) dist::world()->barrier()->wait();
  origin_ns_ = now_ns();
}

int Timeline::track(const std::string& name) {
  for (size_t t = 0; t < tracks_.size(); ++t)
    if (tracks_[t] == name) return static_cast<int>(t);
  tracks_.push_back(name);
  return static_cast<int>(tracks_.size() - 1);
}

void Timeline::add(int track, const std::string& name, double begin_ns, double end_ns,
                   const std::string& args) {
  events_ += "{\"ph\": \"X\", \"name\": " + io::json_quote(name) +
             ", \"pid\": " + std::to_string(dist::info().rank) + ", \"tid\": " + std::to_string(track) +
             ", \"ts\": " + micros(begin_ns - origin_ns_) +
             ", \"dur\": " + micros(std::max(0.0, end_ns - begin_ns)) + ", \"args\": {" + args + "}},\n";
  ++spans_;
}

void Timeline::write(const std::string& path) const {
  std::string mine = row_names(dist::info().rank, tracks_) + events_;
  std::vector<std::string> all =
      dist::info().world_size > 1 ? gather_text(mine) : std::vector<std::string>{mine};
  if (dist::info().rank != 0) return;
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (const std::string& part : all) text += part;
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, ",\n") == 0) text.resize(text.size() - 2);
  text += "\n]}\n";
  io::write_file(path, text);
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
  std::string args = node.name == "accumulate_grad"
                         ? "\"numel\": " + std::to_string(grad.numel())
                         : "\"seq\": " + std::to_string(node.sequence_nr) +
                               ", \"grad\": " + io::json_quote(shape_str(grad.shape()));
  timeline_.add(track_, node.name, begin, end, args);
}

void check_writable(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  bool existed = std::filesystem::exists(p, ec);
  std::ofstream out(p, std::ios::app);
  DPT_CHECK(out.good()) << "cannot write the timeline file '" << path << "' (" << std::strerror(errno) << ")";
  out.close();
  if (!existed) std::filesystem::remove(p, ec);
}

}  // namespace dpt::profile
