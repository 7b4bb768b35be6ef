#include "train/batch_source.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/batch_upload.h"
#endif

namespace dpt::train {

#ifdef DPT_WITH_CUDA
struct BatchSource::DeviceCopies {
  explicit DeviceCopies(int device) : uploader(device) {}
  // Starts copying the loader's next batch; false at the epoch's end.
  bool upload_next(data::Loader& loader) {
    data::Batch host;
    if (!loader.next(host)) return false;
    uploader.start({host.images, host.labels});
    return true;
  }
  cuda::BatchUploader uploader;
};
#else
struct BatchSource::DeviceCopies {};  // never made: without the CUDA backend every device is the CPU
#endif

BatchSource::BatchSource(data::Loader& loader, Device device) : loader_(loader), device_(device) {
#ifdef DPT_WITH_CUDA
  if (device.is_cuda()) copies_ = std::make_unique<DeviceCopies>(device.index);
#endif
}

BatchSource::~BatchSource() = default;

void BatchSource::restart() {
#ifdef DPT_WITH_CUDA
  if (copies_) copies_->uploader.drop();
#endif
}

bool BatchSource::next(data::Batch& batch) {
#ifdef DPT_WITH_CUDA
  if (copies_) {
    cuda::BatchUploader& uploader = copies_->uploader;
    if (!uploader.pending() && !copies_->upload_next(loader_)) return false;
    std::vector<Tensor> tensors = uploader.take();
    batch = {tensors[0], tensors[1]};
    copies_->upload_next(loader_);
    return true;
  }
#endif
  return loader_.next(batch);
}

}  // namespace dpt::train
