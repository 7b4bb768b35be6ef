// Reader for the CIFAR-10 binary format: data_batch_1.bin .. data_batch_5.bin (training)
// and test_batch.bin (test), each record one label byte then a 32x32 RGB image as CHW
// bytes. Every file's size is checked against the format before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace dpt::data {

constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;  // label, then R, G and B planes
constexpr int64_t kCifar10BatchRecords = 10000;           // records in each of the six files

// mean 0.4914, 0.4822, 0.4465; std 0.2470, 0.2435, 0.2616 (R, G, B).
Normalization normalization_cifar10();

// The records of one file: images CHW u8, record after record, and their labels.
struct Cifar10Records {
  std::vector<uint8_t> images;  // labels.size() * 3072
  std::vector<int64_t> labels;  // each in 0..9
};

// Reads one CIFAR-10 binary file. Requires: its size is a positive multiple of 3073, and
// exactly `expected_records` records unless that is 0 (any count).
// Ensures: every label is in 0..9. Throws dpt::Error naming the file and the size, or the
// record index and byte offset of a bad label, otherwise.
Cifar10Records read_cifar10_file(const std::string& path, int64_t expected_records = 0);

// The training set (the five data_batch files, 50000 images, in file order) or the test
// set (test_batch.bin, 10000) from `dir`: 3 x 32 x 32, 10 classes, CIFAR-10 normalisation.
// Each file must hold exactly 10000 records. A missing directory or file is one error
// line listing what was looked for and how to get the data.
Dataset load_cifar10(const std::string& dir, bool train);

}  // namespace dpt::data
