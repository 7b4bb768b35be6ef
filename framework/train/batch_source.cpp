#include "train/batch_source.h"

namespace dpt::train {

BatchSource::BatchSource(const data::Dataset& dataset, data::LoaderOptions options, Device device)
    : loader_(dataset, std::move(options)), device_(device) {
  const Kernels& k = kernels_for(device);
  if (k.batch_uploader_make) uploader_ = k.batch_uploader_make(device.index);
}

void BatchSource::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch) {
  loader_.start_epoch(std::move(indices), epoch, first_batch);
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
