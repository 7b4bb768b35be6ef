#include "train/batch_source.h"

namespace dpt::train {

BatchSource::BatchSource(data::Loader& loader, Device device) : loader_(loader), device_(device) {
  const Kernels& k = kernels_for(device);
  if (k.batch_uploader_make) uploader_ = k.batch_uploader_make(device.index);
}

void BatchSource::restart() {
  if (uploader_) uploader_->drop();
}

bool BatchSource::upload_next() {
  data::Batch host;
  if (!loader_.next(host)) return false;
  uploader_->start({host.images, host.labels});
  return true;
}

bool BatchSource::next(data::Batch& batch) {
  if (!uploader_) return loader_.next(batch);
  if (!uploader_->pending() && !upload_next()) return false;
  std::vector<Tensor> tensors = uploader_->take();
  batch = {tensors[0], tensors[1]};
  upload_next();
  return true;
}

}  // namespace dpt::train
