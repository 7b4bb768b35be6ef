#include "parallel/buffer_broadcast.h"

#include <algorithm>

namespace dpt::dist {

BufferBroadcast::BufferBroadcast(const nn::NamedTensors& buffers, GroupPtr group) : group_(std::move(group)) {
  // One flat buffer per dtype, in the order the dtypes first appear.
  std::vector<DType> dtypes;
  for (const auto& [name, t] : buffers)
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) dtypes.push_back(t.dtype());
  for (DType dtype : dtypes) {
    Flat f;
    int64_t numel = 0;
    for (const auto& [name, t] : buffers)
      if (t.dtype() == dtype) numel += t.numel();
    if (numel == 0) continue;
    const Device device = buffers.front().second.device();
    f.flat = group_->collective_buffer(numel, dtype, device);
    int64_t offset = 0;
    for (const auto& [name, t] : buffers) {
      if (t.dtype() != dtype || t.numel() == 0) continue;
      DPT_CHECK(t.device() == device) << "DDP: buffer '" << name << "' is on " << t.device().str()
                                      << ", the model's first buffer on " << device.str();
      f.buffers.push_back(t);
      f.views.push_back(f.flat.as_strided(t.shape(), shape_contiguous_strides(t.shape()), offset));
      offset += t.numel();
    }
    flats_.push_back(std::move(f));
  }
}

void BufferBroadcast::start() {
  finish();
  const bool root = group_->rank() == 0;  // the others' flat buffers only receive
  for (Flat& f : flats_) {
    if (root)
      for (size_t i = 0; i < f.buffers.size(); ++i) f.views[i].copy_from(f.buffers[i]);
    pending_.push_back(group_->broadcast(f.flat, 0));
  }
}

void BufferBroadcast::finish() {
  if (pending_.empty()) return;
  std::vector<WorkPtr> works = std::move(pending_);
  pending_.clear();
  for (WorkPtr& w : works) w->wait();
  if (group_->rank() == 0) return;  // its buffers are the values broadcast
  for (Flat& f : flats_)
    for (size_t i = 0; i < f.buffers.size(); ++i) f.buffers[i].copy_from(f.views[i]);
}

}  // namespace dpt::dist
