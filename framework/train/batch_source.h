// A loop's batches on the device that uses them: the loader's own on the CPU; on a device
// whose kernels stage batches (CUDA: backend/cuda/batch_upload.h) copied there ahead of
// use, so that batch i+1's copy overlaps step i. The loop sees the same calls either way.
#pragma once

#include <memory>

#include "backend/kernels.h"
#include "core/device.h"
#include "datasets/loader.h"

namespace dpt::train {

class BatchSource {
 public:
  // Keeps a reference to `loader`, which must outlive the source. Batches come out on
  // `device` (a CUDA device needs the CUDA backend).
  BatchSource(data::Loader& loader, Device device);
  BatchSource(const BatchSource&) = delete;
  BatchSource& operator=(const BatchSource&) = delete;

  data::Loader& loader() { return loader_; }
  Device device() const { return device_; }
  // After loader().start_epoch(): forgets a batch copied ahead that the last epoch did not use.
  void restart();
  // Fills `batch` with the epoch's next batch, on device(), and returns true; false at the
  // epoch's end. Rethrows what the loader throws.
  bool next(data::Batch& batch);

 private:
  // Starts copying the loader's next batch; false at the epoch's end.
  bool upload_next();

  data::Loader& loader_;
  Device device_;
  std::unique_ptr<BatchUploader> uploader_;  // null where batches need no staging (the CPU)
};

}  // namespace dpt::train
