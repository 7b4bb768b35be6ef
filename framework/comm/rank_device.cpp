#include "comm/rank_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/storage.h"
#include "comm/dist.h"


namespace dpt::dist {
namespace {

constexpr size_t kListedRanks = 8;  // a note names this many ranks' devices, then counts the rest

std::string uuid_str(const std::array<unsigned char, 16>& b) {
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

// "rank 0 -> cuda:0, rank 1 -> cuda:1"
std::string rank_list(const std::vector<RankView>& views) {
  std::ostringstream s;
  for (size_t r = 0; r < views.size() && r < kListedRanks; ++r)
    s << (r ? ", " : "") << "rank " << r << " -> cuda:" << views[r].device_index;
  if (views.size() > kListedRanks) s << ", ... (" << views.size() << " ranks)";
  return s.str();
}

// "ranks 0 and 2 would both use cuda:0 (GPU-...)", or "" when every rank has a GPU of its own.
std::string shared_gpu(const std::vector<RankView>& views) {
  for (size_t a = 0; a < views.size(); ++a)
    for (size_t b = a + 1; b < views.size(); ++b)
      if (views[a].uuid == views[b].uuid) {
        std::ostringstream s;
        s << "ranks " << a << " and " << b << " would both use one GPU (cuda:" << views[a].device_index
          << " of rank " << a << ", cuda:" << views[b].device_index << " of rank " << b << ", "
          << uuid_str(views[a].uuid) << ")";
        return s.str();
      }
  return "";
}

}  // namespace

DeviceChoice device_choose(DeviceSetting setting, bool deterministic, const std::vector<RankView>& views,
                           int rank, const std::string& reason) {
  DPT_CHECK(rank >= 0 && static_cast<size_t>(rank) < views.size())
      << "device_choose: rank " << rank << " of " << views.size() << " views";
  if (setting == DeviceSetting::cpu) return {Device::cpu(), "device: cpu"};
  // The first rank (in world order) without a device, or -1.
  auto no_device = [](const RankView& v) { return v.device_count <= 0; };
  const auto none = std::find_if(views.begin(), views.end(), no_device);
  const int missing = none == views.end() ? -1 : static_cast<int>(none - views.begin());
  const std::string shared = views.size() > 1 ? shared_gpu(views) : "";
  const std::string why_missing = missing == rank
                                      ? "no CUDA device: " + reason
                                      : "rank " + std::to_string(missing) + " sees no CUDA device";
  if (setting == DeviceSetting::cuda) {
    DPT_CHECK(missing < 0) << "device: cuda, but " << why_missing << " (set device: cpu or auto)";
    DPT_CHECK(shared.empty())
        << "device: cuda, but " << shared
        << ": NCCL needs a GPU for each rank; start at most as many ranks per machine as "
           "it has GPUs, or set device: cpu";
    std::string note = "device: cuda: " + rank_list(views);
    if (deterministic) note += " (deterministic: true makes CPU runs bit-for-bit repeatable, not CUDA runs)";
    return {Device::cuda(static_cast<int>(views[rank].device_index)), note};
  }
  if (deterministic)
    return {Device::cpu(),
            "device: auto -> cpu (deterministic: true is a CPU guarantee; device: cuda trains on the "
            "GPU anyway)"};
  if (missing >= 0) return {Device::cpu(), "device: auto -> cpu (" + why_missing + ")"};
  if (!shared.empty())
    return {Device::cpu(), "device: auto -> cpu (" + shared + ", and NCCL needs a GPU for each rank)"};
  return {Device::cuda(static_cast<int>(views[rank].device_index)),
          "device: auto -> cuda: " + rank_list(views)};
}

DeviceChoice rank_device_select(DeviceSetting setting, bool deterministic) {
  const InitInfo& me = info();
  if (setting == DeviceSetting::cpu) return {Device::cpu(), "device: cpu"};
  RankView view;
  view.device_count = device_count(DeviceType::cuda);
  const std::string reason = device_unavailable_reason(DeviceType::cuda);
  DPT_CHECK(setting != DeviceSetting::cuda || view.device_count > 0)
      << "device: cuda, but no CUDA device: " << reason << " (set device: cpu or auto)";
  if (view.device_count > 0) {
    view.device_index = me.local_rank % view.device_count;
    view.uuid = device_backend(DeviceType::cuda).uuid(static_cast<int>(view.device_index));
  }
  std::vector<RankView> views(me.world_size);
  if (me.world_size == 1) {
    views[0] = view;
  } else {
    static_assert(sizeof(RankView) == 4 * sizeof(int64_t), "a view travels as 4 i64");
    Tensor mine = Tensor::empty({4}, DType::i64);
    std::memcpy(mine.raw_data(), &view, sizeof view);
    Tensor all = Tensor::empty({4 * static_cast<int64_t>(me.world_size)}, DType::i64);
    world()->all_gather(all, mine)->wait();
    std::memcpy(views.data(), all.raw_data(), sizeof(RankView) * views.size());
  }
  DeviceChoice choice = device_choose(setting, deterministic, views, me.rank, reason);
  if (choice.device.is_cuda()) {
    DeviceBackend& backend = device_backend(DeviceType::cuda);
    backend.set_current(choice.device.index);
    choice.note += " (" + backend.name(choice.device.index) + ")";
  }
  return choice;
}

}  // namespace dpt::dist
