// Reader for the IDX format of MNIST and Fashion-MNIST, raw or gzip-compressed (told
// apart by the gzip magic bytes, not the file name). The header is checked against the
// file before anything is allocated, so a corrupt header is an error, never a huge buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::data {

// Images as stored in an idx3-ubyte file: `count` images of rows x cols u8 pixels,
// row-major, image after image.
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols
};

// Reads an idx3-ubyte file (magic 0x00000803: u8, 3 dimensions).
// Requires: every dimension > 0, and the data exactly as long as the header says.
// Throws dpt::Error naming the file and the offending field or byte offset otherwise.
IdxImages idx_read_images(const std::string& path);

// Reads an idx1-ubyte file (magic 0x00000801: u8, 1 dimension).
// Ensures: every label is in [0, classes); throws dpt::Error naming the file, the label's
// index and byte offset otherwise.
std::vector<int64_t> idx_read_labels(const std::string& path, int64_t classes);

}  // namespace dpt::data
