// The backward engine: a dependency count over the recorded graph, then nodes in
// readiness order, newest first, so gradients reach the parameters in roughly the reverse
// of the order the forward pass used them (which DDP's buckets rely on for overlap).
// Gradients are written, then summed where two reach one node; a leaf's .grad is added to
// in place (`+=`), so a .grad that is a view into a DDP bucket stays one.
#include <exception>
#include <queue>
#include <unordered_map>

#include "autograd/node.h"
#include "backend/kernels.h"

namespace dpt::autograd {
namespace {

thread_local bool t_grad_enabled = true;
thread_local uint64_t t_next_sequence_nr = 0;  // only the order within one graph matters
thread_local bool t_in_backward = false;
thread_local std::vector<std::function<void(bool failed)>> t_final_callbacks;
thread_local NodeObserver* t_node_observer = nullptr;

void add_inplace(const Tensor& dst, const Tensor& src) {
  DPT_CHECK(dst.shape() == src.shape()) << "gradient of shape " << shape_str(src.shape())
                                        << " added to one of shape " << shape_str(dst.shape());
  DPT_CHECK(dst.device() == src.device())
      << "gradient on " << src.device().str() << " added to one on " << dst.device().str();
  DPT_CHECK(dst.is_dense()) << "gradient accumulation into a non-dense tensor";
  // Two gradients may differ in layout (an NCHW one from a test or a loss, a
  // channels-last one from a conv): src is brought to dst's, then the buffers add.
  const Kernels& k = kernels_for(dst.device());
  Tensor s = src;
  if (src.strides() != dst.strides()) {
    s = Tensor::empty_strided(dst.shape(), dst.strides(), src.dtype(), src.device());
    k.copy(src, s);
  }
  k.add_inplace(dst, s);
}

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  // `a` may alias a tensor the forward pass still holds (ops pass gradients through), so
  // the sum goes into a new tensor, in a's layout (channels-last gradients stay so).
  Tensor sum = a.clone_preserving_strides();
  add_inplace(sum, b);
  return sum;
}

void accumulate_into_leaf(const Tensor& leaf, const Tensor& grad) {
  TensorImpl* impl = leaf.impl();
  if (impl->grad.defined())
    add_inplace(impl->grad, grad);
  else if (grad.device().is_cuda())
    impl->grad = grad.clone_preserving_strides();  // private: `grad` may alias another gradient or activation
  else
    impl->grad = grad.clone();
  for (const PostAccumulateHook& hook : impl->post_accumulate_hooks) hook(leaf);
}

std::shared_ptr<Node> accumulator_for(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (impl->grad_accumulator) return impl->grad_accumulator;
  auto node = std::make_shared<Node>();
  node->name = "accumulate_grad";
  // Highest priority: a ready gradient is accumulated (and its hooks fired) at once.
  node->sequence_nr = UINT64_MAX;
  node->reusable = true;
  std::weak_ptr<TensorImpl> weak = leaf.impl_ptr();
  node->backward = [weak](const Tensor& grad) -> std::vector<Tensor> {
    if (auto impl = weak.lock()) accumulate_into_leaf(Tensor(impl), grad);
    return {};
  };
  impl->grad_accumulator = node;
  return node;
}

std::shared_ptr<Node> edge_for(const Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return nullptr;
  if (input.grad_fn()) return input.grad_fn();
  return accumulator_for(input);
}

void run_graph(const Tensor& root, const Tensor& grad_output) {
  DPT_CHECK(root.requires_grad()) << "backward(): the tensor does not require grad (no parameter led to it)";
  Tensor seed = grad_output;
  if (!seed.defined()) {
    DPT_CHECK(root.numel() == 1) << "backward(): implicit gradient needs a scalar, got shape "
                                 << shape_str(root.shape());
    seed = Tensor::full(root.shape(), 1.0f).to(root.device());
  }
  DPT_CHECK(seed.shape() == root.shape()) << "backward(): gradient shape " << shape_str(seed.shape())
                                          << " does not match " << shape_str(root.shape());
  std::shared_ptr<Node> start = edge_for(root);

  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{start.get()};
  dependencies[start.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& next : node->next) {
      if (!next) continue;
      if (dependencies[next.get()]++ == 0) stack.push_back(next.get());
    }
  }

  auto newer_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(newer_first)> ready(
      newer_first);
  std::unordered_map<Node*, Tensor> pending;  // gradient summed so far, per node
  pending[start.get()] = seed;
  ready.push(start);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Tensor grad;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      grad = std::move(it->second);
      pending.erase(it);
    }
    std::vector<Tensor> input_grads;
    if (grad.defined()) {  // a node no gradient reached only passes the count on
      DPT_CHECK(node->backward) << "backward through '" << node->name
                                << "' a second time: the graph was freed by the first backward";
      DPT_CHECK(node->reusable || (grad.dtype() == node->dtype && grad.device() == node->device))
          << node->name << " backward: expected an " << dtype_name(node->dtype) << " gradient on "
          << node->device.str() << ", got " << dtype_name(grad.dtype()) << " on " << grad.device().str();
      NodeObserver* observer = t_node_observer;
      if (observer) observer->node_started(*node, grad);
      input_grads = node->backward(grad);
      if (observer) observer->node_finished(*node, grad);
      if (!node->reusable) node->backward = nullptr;  // free saved tensors now
      DPT_CHECK(input_grads.size() == node->next.size())
          << "op '" << node->name << "' returned " << input_grads.size() << " gradients for "
          << node->next.size() << " inputs";
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& next = node->next[i];
      if (!next) continue;
      if (grad.defined() && input_grads[i].defined()) {
        Tensor& slot = pending[next.get()];
        slot = slot.defined() ? add_gradients(slot, input_grads[i]) : input_grads[i];
      }
      if (--dependencies[next.get()] == 0) ready.push(next);
    }
  }
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }

NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }

bool needs_recording(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!needs_recording(inputs)) return;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence_nr = ++t_next_sequence_nr;
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(edge_for(t));
  node->backward = std::move(backward);
  node->dtype = output.dtype();
  node->device = output.device();
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
}

void add_post_accumulate_hook(const Tensor& leaf, PostAccumulateHook hook) {
  DPT_CHECK(leaf.requires_grad() && !leaf.grad_fn())
      << "post-accumulate hooks go on leaves that require grad";
  leaf.impl()->post_accumulate_hooks.push_back(std::move(hook));
}

NodeObserver* set_node_observer(NodeObserver* observer) {
  NodeObserver* previous = t_node_observer;
  t_node_observer = observer;
  return previous;
}

void queue_callback(std::function<void(bool failed)> callback) {
  DPT_CHECK(t_in_backward) << "queue_callback: no backward pass is running on this thread";
  t_final_callbacks.push_back(std::move(callback));
}

void backward(const Tensor& root, const Tensor& grad_output) {
  DPT_CHECK(!t_in_backward) << "backward(): called from inside a backward pass";
  t_in_backward = true;
  t_final_callbacks.clear();
  std::exception_ptr error;
  try {
    run_graph(root, grad_output);
  } catch (...) {
    error = std::current_exception();
  }
  t_in_backward = false;
  // Swapped out first: a callback may start another backward pass. After an error every
  // callback still runs (DDP must finish the all-reduces it started), told that it failed.
  std::vector<std::function<void(bool)>> callbacks;
  callbacks.swap(t_final_callbacks);
  for (auto& callback : callbacks) {
    try {
      callback(error != nullptr);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dpt::autograd

namespace dpt {
void Tensor::backward(const Tensor& grad_output) const { autograd::backward(*this, grad_output); }
}  // namespace dpt
