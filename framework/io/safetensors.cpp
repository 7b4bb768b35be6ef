// Reading checks in the order a damaged file is best explained: the length prefix, the
// JSON, each entry on its own (dtype, shape, offsets within the data), then how the entries
// tile the data together. Writing builds the header with nlohmann::json and streams the
// tensors' bytes behind it without copying them into one buffer.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "io/atomic_file.h"
#include "io/json.h"

namespace dpt::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; so is this reader");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

const char* dtype_code(DType t) {
  constexpr const char* kCodes[] = {"F32", "BF16", "F16", "I64"};  // by DType
  return kCodes[static_cast<int>(t)];
}

SafetensorsEntry parse_entry(const std::string& key, const JsonIn& value, uint64_t data_size,
                             const std::string& name) {
  const std::string where = name + ": tensor '" + key + "'";
  SafetensorsEntry e;
  e.name = key;
  for (const auto& [k, v] : json_object(value, where)) {
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      DPT_FAIL() << where << ": unexpected key '" << k << "' (expected dtype, shape, data_offsets)";
  }
  e.dtype = json_string(json_at(value, "dtype", where), where + " dtype");
  e.element_size = dtype_bytes(e.dtype);
  DPT_CHECK(e.element_size > 0)
      << where << ": unknown dtype '" << e.dtype
      << "' (expected one of BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, "
         "U64, F8_E5M2, F8_E4M3)";
  uint64_t numel = 1, bytes = 0;
  bool overflow = false;
  for (const JsonIn& d : json_array(json_at(value, "shape", where), where + " shape")) {
    int64_t dim = json_int(d, where + " shape");
    DPT_CHECK(dim >= 0) << where << ": negative dimension " << dim << " in its shape";
    e.shape.push_back(dim);
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel);
  }
  overflow |= __builtin_mul_overflow(numel, e.element_size, &bytes);
  DPT_CHECK(!overflow) << where << ": shape " << shape_str(e.shape) << " is too large to exist";
  const auto& offsets = json_array(json_at(value, "data_offsets", where), where + " data_offsets");
  DPT_CHECK(offsets.size() == 2) << where << ": data_offsets must be [begin, end], got " << offsets.size()
                                 << " numbers";
  int64_t begin = json_int(offsets[0], where + " data_offsets");
  int64_t end = json_int(offsets[1], where + " data_offsets");
  DPT_CHECK(begin >= 0 && end >= begin) << where << ": data_offsets [" << begin << ", " << end
                                        << "] are not an ordered pair of non-negative offsets";
  e.begin = static_cast<uint64_t>(begin);
  e.end = static_cast<uint64_t>(end);
  DPT_CHECK(e.end - e.begin == bytes)
      << where << ": shape " << shape_str(e.shape) << " of " << e.dtype << " needs " << bytes
      << " bytes, but data_offsets [" << begin << ", " << end << "] hold " << e.end - e.begin;
  DPT_CHECK(e.end <= data_size) << where << ": data_offsets [" << begin << ", " << end << "] reach past the "
                                << data_size << " bytes of data in the file (truncated?)";
  return e;
}

// The entries, in the order of their data, must tile [0, data_size) exactly, as the format
// requires.
void check_tiling(const std::vector<SafetensorsEntry>& tensors, uint64_t data_size, const std::string& name) {
  uint64_t cursor = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : tensors) {
    DPT_CHECK(e.begin >= cursor) << name << ": tensors '" << previous->name << "' and '" << e.name
                                 << "' overlap (bytes " << e.begin << ".." << cursor << " of the data)";
    DPT_CHECK(e.begin == cursor) << name << ": bytes " << cursor << ".." << e.begin
                                 << " of the data belong to no tensor (before '" << e.name << "')";
    cursor = e.end;
    previous = &e;
  }
  DPT_CHECK(cursor == data_size) << name << ": " << data_size - cursor
                                 << " bytes after the last tensor belong to "
                                 << "no tensor (the data is " << data_size << " bytes)";
}

// The dtype SafetensorsFile::tensor makes of entry `e`, or Error.
DType readable_dtype(const std::string& path, const SafetensorsEntry& e) {
  if (e.dtype == "I64") return DType::i64;
  DPT_CHECK(e.dtype == "F32") << path << ": tensor '" << e.name << "' is " << e.dtype
                              << ", dpt reads F32 (and I64) tensors";
  return DType::f32;
}

}  // namespace

const SafetensorsEntry* SafetensorsView::find(const std::string& name) const {
  for (const auto& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsView parse_safetensors(const uint8_t* bytes, size_t size, const std::string& name) {
  DPT_CHECK(size >= 8)
      << name << ": " << size
      << " bytes is too short for a safetensors file (it starts with an 8-byte header length)";
  uint64_t header_size = 0;  // little-endian, as this machine (checked above)
  std::memcpy(&header_size, bytes, 8);
  DPT_CHECK(header_size <= kMaxHeaderBytes)
      << name << ": header length " << header_size << " is over the format's limit of " << kMaxHeaderBytes
      << " bytes (not a safetensors file?)";
  DPT_CHECK(header_size <= size - 8) << name << ": header length " << header_size
                                     << " reaches past the end of the " << size << "-byte file (truncated?)";
  SafetensorsView view;
  view.data_start = 8 + header_size;
  view.data_size = size - view.data_start;
  const std::string_view header(reinterpret_cast<const char*>(bytes) + 8, header_size);
  const JsonIn root = json_parse(header, name + " (header)");
  const std::string where = name + ": header";
  for (const auto& [key, value] : json_object(root, where)) {
    if (key == "__metadata__") {
      for (const auto& [k, v] : json_object(value, where + " __metadata__"))
        view.metadata.emplace_back(k, json_string(v, where + " __metadata__ '" + k + "'"));
      continue;
    }
    view.tensors.push_back(parse_entry(key, value, view.data_size, name));
  }
  // The JSON object's order is not kept (nor meaningful); the data's is.
  std::stable_sort(view.tensors.begin(), view.tensors.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
                   });
  check_tiling(view.tensors, view.data_size, name);
  return view;
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e) const {
  Tensor t = Tensor::empty(e.shape, readable_dtype(path, e));
  if (e.end > e.begin) std::memcpy(t.raw_data(), bytes.data() + view.data_start + e.begin, e.end - e.begin);
  return t;
}

SafetensorsFile safetensors_read(const std::string& path, const FileReader& read) {
  SafetensorsFile file;
  file.path = path;
  file.bytes = read(path);
  file.view = parse_safetensors(reinterpret_cast<const uint8_t*>(file.bytes.data()), file.bytes.size(), path);
  return file;
}

void safetensors_check_into(const SafetensorsFile& file, const nn::NamedTensors& into,
                            const std::string& what, const std::function<bool(const std::string&)>& ignore) {
  std::set<std::string> wanted;
  for (const auto& [name, target] : into) {
    wanted.insert(name);
    const SafetensorsEntry* e = file.view.find(name);
    DPT_CHECK(e) << file.path << ": no tensor '" << name << "', which " << what
                 << " has (a checkpoint of another model or configuration?)";
    DPT_CHECK(e->dtype == dtype_code(target.dtype()))
        << file.path << ": tensor '" << name << "' is " << e->dtype << ", " << what << " expects "
        << dtype_code(target.dtype());
    DPT_CHECK(e->shape == target.shape())
        << file.path << ": tensor '" << name << "' has shape " << shape_str(e->shape) << ", " << what
        << " expects " << shape_str(target.shape());
    readable_dtype(file.path, *e);
  }
  for (const auto& e : file.view.tensors)
    DPT_CHECK(wanted.count(e.name) || (ignore && ignore(e.name)))
        << file.path << ": tensor '" << e.name << "' is not part of " << what
        << " (a checkpoint of another model or configuration?)";
}

void safetensors_load_into(const SafetensorsFile& file, const nn::NamedTensors& into, const std::string& what,
                           const std::function<bool(const std::string&)>& ignore) {
  safetensors_check_into(file, into, what, ignore);
  for (const auto& [name, target] : into) target.copy_from(file.tensor(*file.view.find(name)));
}

void safetensors_write(const std::string& path, const nn::NamedTensors& tensors, const Metadata& metadata) {
  JsonOut header = JsonOut::object();
  if (!metadata.empty()) {
    JsonOut& meta = header["__metadata__"] = JsonOut::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  std::vector<Tensor> host;  // contiguous CPU copies where needed, alive until written
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DPT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::i64)
        << path << ": tensor '" << name << "' is " << dtype_name(t.dtype())
        << ", only f32 and i64 are written";
    DPT_CHECK(name != "__metadata__" && !header.contains(name))
        << path << ": tensor name '" << name << "' repeats";
    Tensor h = t.to(Device::cpu()).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(h.numel()) * dtype_size(h.dtype());
    header[name] = {
        {"dtype", dtype_code(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(std::move(h));
  }
  std::string text = json_text(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + header is a multiple of 8: aligned data
  const uint64_t length = text.size();
  std::vector<std::string_view> pieces{std::string_view(reinterpret_cast<const char*>(&length), 8), text};
  for (const Tensor& h : host)
    pieces.emplace_back(static_cast<const char*>(h.raw_data()),
                        static_cast<size_t>(h.numel()) * dtype_size(h.dtype()));
  write_file_atomic(path, pieces);
}

}  // namespace dpt::io
