// The oneDNN CPU context, layout bridges and per-thread scratch buffers (see onednn.h).
#include "backend/cpu/onednn.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/threading.h"

namespace dpt::cpu::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& stream() {
  thread_local dnnl::stream stream(engine());
  return stream;
}

std::shared_ptr<void> cached_object(const std::string& key,
                                    const std::function<std::shared_ptr<void>()>& make) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<void>> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<void> made;
  try {
    made = make();  // outside the lock: primitive creation JITs code
  } catch (const dnnl::error& e) {
    throw Error("oneDNN has no primitive for " + key + " (" + e.what() + ")");
  }
  std::lock_guard<std::mutex> lock(mutex);
  // Variable shapes (a short last batch, a sweep over sizes) must not grow it forever.
  if (cache.size() >= 1024) cache.clear();
  return cache.emplace(key, made).first->second;
}

std::string cache_key(const char* op, std::initializer_list<int64_t> values) {
  std::string key(op);
  // oneDNN splits the work when a primitive is created: a new thread count needs new ones.
  key += ":t" + std::to_string(threads_get()) + ':';
  for (int64_t v : values) {
    key += std::to_string(v);
    key += ',';
  }
  return key;
}

memory::dims dims_of(const Shape& shape) { return memory::dims(shape.begin(), shape.end()); }

memory::desc plain_desc(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}

Layout layout_of(const Tensor& t) {
  if (t.is_channels_last()) return Layout::nhwc;
  DPT_CHECK(t.is_contiguous()) << "oneDNN kernels take NCHW-contiguous or channels-last tensors, got strides "
                               << shape_str(t.strides()) << " for " << shape_str(t.shape());
  return Layout::nchw;
}

Tensor empty_in(const Shape& shape, Layout layout) {
  return layout == Layout::nhwc ? Tensor::empty_channels_last(shape) : Tensor::empty(shape);
}

memory::desc layout_desc(const memory::dims& dims, Layout layout) {
  return plain_desc(dims, layout == Layout::nhwc ? Tag::nhwc : Tag::nchw);
}

namespace {

std::atomic<bool>& channels_last_flag() {
  static std::atomic<bool> enabled = [] {
    const char* v = std::getenv("DPT_CHANNELS_LAST");
    return !(v && std::string(v) == "0");
  }();
  return enabled;
}

}  // namespace

bool channels_last_enabled() { return channels_last_flag().load(std::memory_order_relaxed); }

void set_channels_last_enabled(bool enabled) { channels_last_flag().store(enabled); }

dnnl::primitive_attr relu_attr(bool relu) {
  dnnl::primitive_attr attr;
  if (!relu) return attr;
  dnnl::post_ops ops;
  ops.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(ops);
  return attr;
}

void* scratch(Scratch slot, size_t bytes) {
  struct Buffer {  // one growable 64-byte aligned buffer
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  thread_local std::array<Buffer, static_cast<size_t>(Scratch::count)> buffers;
  Buffer& b = buffers[static_cast<size_t>(slot)];
  if (bytes > b.bytes) {
    b.data.reset();
    b.bytes = (bytes + 4095) / 4096 * 4096;
    b.data.reset(std::aligned_alloc(64, b.bytes));
    if (!b.data) {
      b.bytes = 0;
      throw Error("out of host memory allocating a " + std::to_string(bytes) + "-byte oneDNN layout buffer");
    }
  }
  return b.data.get();
}

Bridge bridge_make(const memory::desc& plain, const memory::desc& chosen, Direction direction) {
  Bridge b{plain, chosen, {}};
  if (b.same()) return b;
  const bool in = direction == Direction::in;
  b.reorder = dnnl::reorder(
      dnnl::reorder::primitive_desc(engine(), in ? plain : chosen, engine(), in ? chosen : plain));
  return b;
}

memory bridge_in(const Bridge& b, const void* data, Scratch slot) {
  // oneDNN takes handles as void*; inputs are only read.
  memory user(b.plain, engine(), const_cast<void*>(data));
  if (b.same()) return user;
  memory chosen(b.chosen, engine(), scratch(slot, b.chosen.get_size()));
  execute(b.reorder, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, chosen}});
  return chosen;
}

memory bridge_out_memory(const Bridge& b, void* data, Scratch slot) {
  if (b.same()) return memory(b.plain, engine(), data);
  return memory(b.chosen, engine(), scratch(slot, b.chosen.get_size()));
}

void bridge_out(const Bridge& b, const memory& written, void* data) {
  if (b.same()) return;
  memory user(b.plain, engine(), data);
  execute(b.reorder, {{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, user}});
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  dnnl::stream& s = stream();
  try {
    p.execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN primitive failed: ") + e.what());
  }
}

}  // namespace dpt::cpu::onednn
