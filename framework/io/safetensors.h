// The safetensors format (Hugging Face), so PyTorch, JAX and numpy read dpt's weights and
// dpt reads theirs: an 8-byte little-endian header length N, N bytes of JSON
//   {"conv.weight": {"dtype": "F32", "shape": [32, 1, 3, 3], "data_offsets": [0, 1152]},
//    ..., "__metadata__": {"key": "value"}}
// then the tensors' bytes, row-major and little-endian; offsets count from the end of the
// header and must cover the data exactly, without holes or overlaps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/atomic_file.h"
#include "nn/module.h"

namespace dpt::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32", "I64", "BF16", ...
  uint64_t element_size = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

// What a buffer holds, pointing into it by offsets (the buffer must outlive the use of them).
struct SafetensorsView {
  std::vector<SafetensorsEntry> tensors;  // in the order of their data (as written, for dpt's files)
  Metadata metadata;                      // "__metadata__", string to string, by key
  uint64_t data_start = 0;                // offset of the data section in the buffer
  uint64_t data_size = 0;
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr if absent
};

// Parses and validates a whole safetensors file held in memory. `name` (a path, usually)
// starts every message. Throws dpt::Error for: a buffer shorter than 8 bytes, a header
// length past the end of the buffer (truncated) or over 100 MB, malformed JSON, an entry
// without dtype/shape/data_offsets or with other keys, an unknown dtype, a negative or
// overflowing shape, offsets that disagree with the shape's byte size, reach past the data
// (truncated), overlap, or leave bytes unused, and non-string metadata. Never reads
// outside [bytes, bytes + size) and allocates only in proportion to the header's length.
SafetensorsView parse_safetensors(const uint8_t* bytes, size_t size, const std::string& name);

// A file read into memory and parsed.
struct SafetensorsFile {
  std::string path;
  std::string bytes;
  SafetensorsView view;
  // A CPU tensor holding a copy of entry `e` (dtype F32 -> f32, I64 -> i64; else Error).
  Tensor tensor(const SafetensorsEntry& e) const;
};

// The file's bytes come from `read` (io::read_file: from disk).
SafetensorsFile safetensors_read(const std::string& path, const FileReader& read = read_file);

// Checks that safetensors_load_into(file, into, what, ignore) would succeed, changing
// nothing: every name in `into` is in the file with the same shape and a matching dtype (F32
// for f32 tensors), and every name in the file that `into` lacks has `ignore(name)` true.
// Otherwise throws Error naming the file, the tensor and what was expected; `what` says
// what `into` is ("the model", "optimizer state").
void safetensors_check_into(const SafetensorsFile& file, const nn::NamedTensors& into,
                            const std::string& what,
                            const std::function<bool(const std::string&)>& ignore = nullptr);

// safetensors_check_into, then copies the file's tensors into `into` by name: a file that
// fails a check leaves `into` untouched.
void safetensors_load_into(const SafetensorsFile& file, const nn::NamedTensors& into, const std::string& what,
                           const std::function<bool(const std::string&)>& ignore = nullptr);

// Writes `tensors` (f32 or i64, any device and layout) atomically (write_file_atomic), in
// the given order, data aligned to 8 bytes, with `metadata` as "__metadata__".
void safetensors_write(const std::string& path, const nn::NamedTensors& tensors,
                       const Metadata& metadata = {});

}  // namespace dpt::io
