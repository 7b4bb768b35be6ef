// The fuzz targets of targets.h. Readers take paths, so each input is written to an
// in-memory file (memfd) and read back through /proc/self/fd: no disk traffic between runs.
#include "targets.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "datasets/cifar10.h"
#include "datasets/idx.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace dpt::fuzz {
namespace {

// An in-memory file that holds one input at a time.
class MemoryFile {
 public:
  explicit MemoryFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  // Replaces the content; returns the path to open.
  const std::string& hold(const void* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)) {
      std::perror("writing the memfd");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

template <class F>
Outcome outcome_of(F&& f) {
  try {
    f();
    return {true, ""};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

}  // namespace

Outcome idx(const uint8_t* data, size_t size) {
  static MemoryFile file("dpt_fuzz_idx");
  const std::string& path = file.hold(data, size);
  Outcome images = outcome_of([&] { data::idx_read_images(path); });
  Outcome labels = outcome_of([&] { data::idx_read_labels(path, 10); });
  return images.accepted ? images : labels;
}

Outcome cifar10(const uint8_t* data, size_t size) {
  static MemoryFile file("dpt_fuzz_cifar10");
  const std::string& path = file.hold(data, size);
  return outcome_of([&] { data::read_cifar10_file(path); });
}

Outcome config(const uint8_t* data, size_t size) {
  static MemoryFile file("dpt_fuzz_config"), again("dpt_fuzz_config_again");
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t end = bytes.find('\0');
  std::vector<std::string> overrides;
  for (size_t begin = end; begin != std::string::npos && begin < bytes.size();) {
    const size_t next = bytes.find('\0', begin + 1);
    overrides.push_back(
        bytes.substr(begin + 1, next == std::string::npos ? std::string::npos : next - begin - 1));
    begin = next;
  }
  const std::string text = bytes.substr(0, end);
  io::Config loaded;
  Outcome outcome =
      outcome_of([&] { loaded = io::load_config(file.hold(text.data(), text.size()), overrides); });
  if (!outcome.accepted) return outcome;
  const std::string yaml = io::config_to_yaml(loaded);
  std::string yaml_again;
  Outcome reloaded = outcome_of(
      [&] { yaml_again = io::config_to_yaml(io::load_config(again.hold(yaml.data(), yaml.size()))); });
  if (!reloaded.accepted || yaml_again != yaml) {
    std::fprintf(
        stderr,
        "config_to_yaml does not round-trip:\n--- input\n%s\n--- resolved\n%s\n--- reloaded (%s)\n%s\n",
        text.c_str(), yaml.c_str(), reloaded.error.c_str(), yaml_again.c_str());
    std::abort();
  }
  return outcome;
}

Outcome safetensors(const uint8_t* data, size_t size) {
  io::SafetensorsFile file;
  Outcome outcome = outcome_of([&] { file.view = io::parse_safetensors(data, size, "fuzz input"); });
  if (!outcome.accepted) return outcome;
  file.path = "fuzz input";
  file.bytes.assign(reinterpret_cast<const char*>(data), size);
  const io::SafetensorsView& view = file.view;
  auto broken = [&](const io::SafetensorsEntry& e, const char* promise) {
    std::fprintf(stderr, "parse_safetensors accepted tensor '%s' [%llu, %llu) of a %zu-byte file: %s\n",
                 e.name.c_str(), static_cast<unsigned long long>(e.begin),
                 static_cast<unsigned long long>(e.end), size, promise);
    std::abort();
  };
  if (view.data_start + view.data_size != size) broken({}, "the data section is not the rest of the file");
  for (const io::SafetensorsEntry& e : view.tensors) {
    uint64_t bytes = e.element_size;
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) broken(e, "bad shape");
    }
    if (e.begin > e.end || e.end > view.data_size) broken(e, "bytes outside the data section");
    if (e.end - e.begin != bytes) broken(e, "byte count differs from shape x dtype size");
    if (e.dtype != "F32" && e.dtype != "I64") continue;
    Tensor t = file.tensor(e);
    if (bytes > 0 && std::memcmp(t.raw_data(), data + view.data_start + e.begin, bytes) != 0)
      broken(e, "the copied tensor differs from the file's bytes");
  }
  return outcome;
}

Outcome checkpoint(const uint8_t* data, size_t size) {
  io::CheckpointRecord record;
  Outcome outcome = outcome_of([&] {
    record =
        io::checkpoint_parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  });
  if (!outcome.accepted) return outcome;
  for (const std::string* file : {&record.model_file, &record.optimizer_file}) {
    if (file->empty() || *file == "." || *file == ".." || file->find('/') != std::string::npos ||
        file->find('\0') != std::string::npos) {
      std::fprintf(stderr, "checkpoint_parse_json accepted the tensor file name '%s'\n", file->c_str());
      std::abort();
    }
  }
  return outcome;
}

Target target_named(const std::string& name) {
  if (name == "checkpoint") return checkpoint;
  if (name == "safetensors") return safetensors;
  if (name == "idx") return idx;
  if (name == "cifar10") return cifar10;
  if (name == "config") return config;
  return nullptr;
}

}  // namespace dpt::fuzz
