// IDX reading: a sequential byte reader that hides gzip, a header check, and a payload
// read whose size was proven by the header and the file before any allocation.
#include "datasets/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace dpt::data {
namespace {

constexpr uint32_t kMagicImages = 0x00000803;  // u8 data, 3 dimensions
constexpr uint32_t kMagicLabels = 0x00000801;  // u8 data, 1 dimension
// deflate cannot expand data by more than about 1032:1, so this bounds what a gzip
// file can really hold whatever its header claims.
constexpr int64_t kMaxDeflateRatio = 1032;

// Reads a file front to back, transparently gunzipping it when it starts with 1f 8b.
class ByteReader {
 public:
  explicit ByteReader(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    DPT_CHECK(file_ != nullptr) << path << ": cannot open: " << std::strerror(errno);
    unsigned char magic[2] = {0, 0};
    size_t got = std::fread(magic, 1, 2, file_);
    std::fseek(file_, 0, SEEK_END);
    file_size_ = std::ftell(file_);
    std::fseek(file_, 0, SEEK_SET);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      std::fclose(file_);
      file_ = nullptr;
      gz_ = gzopen(path.c_str(), "rb");
      DPT_CHECK(gz_ != nullptr) << path << ": cannot open as gzip: " << std::strerror(errno);
      gzbuffer(gz_, 1 << 17);
    }
  }
  ~ByteReader() {
    if (file_) std::fclose(file_);
    if (gz_) gzclose(gz_);
  }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  bool gzip() const { return gzip_; }
  int64_t file_size() const { return file_size_; }  // on disk, compressed or not
  int64_t position() const { return position_; }    // in the (uncompressed) data

  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    size_t total = 0;
    while (total < n) {
      size_t got = 0;
      if (gzip_) {
        unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
        int r = gzread(gz_, dst + total, chunk);
        int errnum = Z_OK;
        std::string message = gzerror(gz_, &errnum);
        // zlib reports a cut-off stream as Z_BUF_ERROR with a short read, not as -1.
        if (r < 0 || errnum != Z_OK) {
          if (message.rfind(path_ + ": ", 0) == 0)
            message.erase(0, path_.size() + 2);  // zlib prefixes the path
          DPT_FAIL() << path_ << ": corrupt gzip data (reading from uncompressed offset " << position_ + total
                     << "): " << message;
        }
        got = static_cast<size_t>(r);
      } else {
        got = std::fread(dst + total, 1, n - total, file_);
        DPT_CHECK(!std::ferror(file_))
            << path_ << ": read error at offset " << position_ + total << ": " << std::strerror(errno);
      }
      if (got == 0) break;
      total += got;
    }
    position_ += static_cast<int64_t>(total);
    return total;
  }

  // Reads and discards the rest of the data; returns how many bytes there were.
  int64_t drain() {
    uint8_t buffer[1 << 14];
    int64_t total = 0;
    while (size_t got = read(buffer, sizeof buffer)) total += static_cast<int64_t>(got);
    return total;
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
  bool gzip_ = false;
  int64_t file_size_ = 0;
  int64_t position_ = 0;
};

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

// "(uncompressed)" after a byte count, where it is not the size on disk.
const char* size_note(const ByteReader& reader) { return reader.gzip() ? " (uncompressed)" : ""; }

// Reads the magic and the dimension sizes; checks the magic and that no size is 0.
std::vector<int64_t> read_header(ByteReader& reader, const std::string& path, uint32_t magic,
                                 const char* format, const std::vector<const char*>& dim_names) {
  const size_t header_bytes = 4 + 4 * dim_names.size();
  uint8_t header[16];
  size_t got = reader.read(header, header_bytes);
  DPT_CHECK(got >= 4) << path << ": truncated header: expected " << header_bytes
                      << " bytes (magic and dimension sizes) but the file has " << got << " bytes"
                      << size_note(reader);
  uint32_t found = read_be32(header);
  DPT_CHECK(found == magic) << path << ": offset 0: bad magic " << hex32(found) << ", expected "
                            << hex32(magic) << " (" << format << ")";
  DPT_CHECK(got == header_bytes) << path << ": truncated header: expected " << header_bytes
                                 << " bytes (magic and dimension sizes) but the file has " << got << " bytes"
                                 << size_note(reader);
  std::vector<int64_t> dims;
  for (size_t d = 0; d < dim_names.size(); ++d) {
    int64_t size = read_be32(header + 4 + 4 * d);
    DPT_CHECK(size > 0) << path << ": offset " << 4 + 4 * d << ": dimension " << d << " (" << dim_names[d]
                        << ") is 0, expected > 0";
    dims.push_back(size);
  }
  return dims;
}

// Reads exactly `payload` bytes after a `header`-byte header and checks nothing follows.
// `what` describes the header's claim for messages ("60000 images of 28x28").
std::vector<uint8_t> read_payload(ByteReader& reader, const std::string& path, int64_t header,
                                  int64_t payload, const std::string& what) {
  auto fail_size = [&](const char* problem, int64_t have) {
    DPT_FAIL() << path << ": " << problem << ": header says " << what << " (" << header + payload
               << " bytes) but the file has " << have << " bytes" << size_note(reader);
  };
  std::vector<uint8_t> data;
  if (!reader.gzip()) {
    // The size on disk is known: check it before allocating anything.
    if (reader.file_size() < header + payload) fail_size("truncated", reader.file_size());
    if (reader.file_size() > header + payload) fail_size("trailing bytes", reader.file_size());
    data.resize(static_cast<size_t>(payload));
    size_t got = reader.read(data.data(), data.size());
    if (static_cast<int64_t>(got) < payload) fail_size("truncated", header + static_cast<int64_t>(got));
    return data;
  }
  // The uncompressed size is only known by reading: grow with the data actually there,
  // never beyond what the compressed file could expand to.
  data.reserve(static_cast<size_t>(std::min(payload, kMaxDeflateRatio * reader.file_size() + 64)));
  constexpr int64_t kChunk = 1 << 20;
  while (static_cast<int64_t>(data.size()) < payload) {
    size_t old = data.size();
    size_t want = static_cast<size_t>(std::min(payload - static_cast<int64_t>(old), kChunk));
    data.resize(old + want);
    size_t got = reader.read(data.data() + old, want);
    data.resize(old + got);
    if (got < want) fail_size("truncated", header + static_cast<int64_t>(data.size()));
  }
  int64_t extra = reader.drain();
  if (extra > 0) fail_size("trailing bytes", header + payload + extra);
  return data;
}

}  // namespace

IdxImages idx_read_images(const std::string& path) {
  ByteReader reader(path);
  std::vector<int64_t> dims =
      read_header(reader, path, kMagicImages, "idx3-ubyte images: unsigned bytes, 3 dimensions",
                  {"images", "rows", "cols"});
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  std::ostringstream what;
  what << images.count << " images of " << images.rows << "x" << images.cols;
  // Each size is < 2^32, so no product of two is negative, but rows * cols can pass 2^63.
  int64_t per_image = 0, payload = 0;
  DPT_CHECK(!__builtin_mul_overflow(images.rows, images.cols, &per_image) &&
            !__builtin_mul_overflow(images.count, per_image, &payload) && payload <= INT64_MAX - 16)
      << path << ": header says " << what.str() << ", which does not fit in 64-bit sizes";
  images.pixels = read_payload(reader, path, 16, payload, what.str());
  return images;
}

std::vector<int64_t> idx_read_labels(const std::string& path, int64_t classes) {
  ByteReader reader(path);
  std::vector<int64_t> dims =
      read_header(reader, path, kMagicLabels, "idx1-ubyte labels: unsigned bytes, 1 dimension", {"labels"});
  std::ostringstream what;
  what << dims[0] << " labels";
  std::vector<uint8_t> bytes = read_payload(reader, path, 8, dims[0], what.str());
  std::vector<int64_t> labels(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    DPT_CHECK(bytes[i] < classes) << path << ": offset " << 8 + i << ": label " << int{bytes[i]}
                                  << " of item " << i << " is out of range, expected 0.." << classes - 1;
    labels[i] = bytes[i];
  }
  return labels;
}

}  // namespace dpt::data
