// What every oneDNN-backed CPU kernel shares: the CPU device context (engine, stream and a
// cache of primitives keyed by op, shapes and parameters, so a primitive is created once
// per shape), the bridge between our plain NCHW tensors and the blocked layouts oneDNN's
// fast kernels choose, and the fused ReLU post-op.
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/tensor.h"

namespace dpt::cpu::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Tag = dnnl::memory::format_tag;

// The CPU device's context (there is one device, cpu:0): its engine, a stream per calling
// thread (streams are not shared), and the primitive cache. Scratchpads stay in oneDNN's
// default "library" mode: each primitive holds a per-thread global scratchpad, so nothing is
// allocated per call (the user-managed mode measured the same and needs more code).
const dnnl::engine& engine();
dnnl::stream& stream();

// Returns the object cached under `key`, creating it with make() on first use. T must be
// the same type for every use of a key (keys start with the op name to ensure it).
std::shared_ptr<void> cached_object(const std::string& key,
                                    const std::function<std::shared_ptr<void>()>& make);
template <class T, class Make>
std::shared_ptr<T> cached(const std::string& key, Make make) {
  return std::static_pointer_cast<T>(cached_object(key, [&]() -> std::shared_ptr<void> { return make(); }));
}

// "conv_fwd:t2:128,32,14,14,..." — the op name, the thread count, then every number the
// primitive depends on.
std::string cache_key(const char* op, std::initializer_list<int64_t> values);

memory::dims dims_of(const Shape& shape);
// Descriptor of f32 data with these dims in the plain layout `tag` (nchw, oihw, x, ...).
memory::desc plain_desc(const memory::dims& dims, Tag tag);

// The two activation layouts the kernels take as they are: row-major NCHW and
// channels-last NHWC (oneDNN's nhwc: plain strides, so other ops read it as a strided
// tensor). oneDNN's JIT kernels run on nhwc directly (within ~10% of nChw16c), so
// channels-last activations need no reorder at any conv, BN or pool boundary.
enum class Layout { nchw, nhwc };
// nhwc when t is channels-last (a tensor that is both, C == 1 or H == W == 1, counts as
// nhwc: the bytes are the same), else nchw. Requires: t channels-last or contiguous.
Layout layout_of(const Tensor& t);
// A new [N, C, H, W] f32 CPU tensor in `layout`, uninitialised.
Tensor empty_in(const Shape& shape, Layout layout);
// Descriptor of f32 [N, C, H, W] data stored in `layout`.
memory::desc layout_desc(const memory::dims& dims, Layout layout);
// False when the environment sets DPT_CHANNELS_LAST=0: convolutions then produce NCHW
// (the old behaviour, blocked layouts with reorders), for comparisons.
bool channels_last_enabled();
// Overrides the environment for the rest of the process (tests compare both modes).
void set_channels_last_enabled(bool enabled);

// Attributes that apply ReLU to a primitive's output when `relu` (conv and matmul fuse it).
dnnl::primitive_attr relu_attr(bool relu);

// Temporary buffers for layout copies, grown on demand and reused, one set per thread:
// the steady state allocates nothing. A slot is valid until the next call with the same
// slot on this thread, so a kernel uses distinct slots for buffers alive at once.
enum class Scratch { src, weights, dst, diff_dst, diff_src, diff_weights, extra, count };
void* scratch(Scratch slot, size_t bytes);

// A primitive argument seen from both sides: the layout our tensor has (plain) and the
// layout the primitive chose (often blocked, e.g. nChw16c, where oneDNN's JIT kernels are
// about twice as fast as on nchw). The reorders between them are created once, with the
// primitive, and are empty when the layouts agree.
struct Bridge {
  memory::desc plain;
  memory::desc chosen;
  // Set when the layouts differ: plain to chosen for an input, chosen to plain for an output.
  dnnl::reorder reorder;

  bool same() const { return plain == chosen; }
};

enum class Direction { in, out };
Bridge bridge_make(const memory::desc& plain, const memory::desc& chosen, Direction direction);

// Input: memory in the chosen layout holding the plain data at `data` (a reorder into
// scratch `slot` when the layouts differ; `data` itself otherwise).
memory bridge_in(const Bridge& b, const void* data, Scratch slot);
// Output: memory in the chosen layout for the primitive to write; bridge_out then
// leaves the result, plain, at `data`.
memory bridge_out_memory(const Bridge& b, void* data, Scratch slot);
void bridge_out(const Bridge& b, const memory& written, void* data);

// Runs a primitive on this thread's stream and waits for it.
void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args);

}  // namespace dpt::cpu::onednn
