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
  // Loads `dataset` (which must outlive the source) as `options` say. Batches come out on
  // `device` (a CUDA device needs the CUDA backend).
  BatchSource(const data::Dataset& dataset, data::LoaderOptions options, Device device);
  BatchSource(const BatchSource&) = delete;
  BatchSource& operator=(const BatchSource&) = delete;

  const data::Loader& loader() const { return loader_; }
  Device device() const { return device_; }
  // The loader's start_epoch; forgets a batch copied ahead that the last epoch did not use.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch = 0, int64_t first_batch = 0);
  // Fills `batch` with the epoch's next batch, on device(), and returns true; false at the
  // epoch's end. Rethrows what the loader throws.
  bool next(data::Batch& batch);

 private:
  // Starts copying the loader's next batch; false at the epoch's end.
  bool upload_next();

  data::Loader loader_;
  Device device_;
  std::unique_ptr<BatchUploader> uploader_;  // null where batches need no staging (the CPU)
};

}  // namespace dpt::train
