#include "live/hooks/module_backward.h"

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "live/capture/is_tensor.h"
#include "live/crossing/python_crossing.h"
#include "live/hooks/backward_recorder.h"
#include "live/hooks/node_ptr.h"
#include "live/hooks/submit.h"
#include "live/session/session.h"

namespace msprobe {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

struct ModuleBackwardStart {
  uint64_t sequence_nr = 0;
  std::vector<Edge> inputs;  // per positional argument; invalid: it takes no gradient
};

namespace {

// AccumulateGrad nodes (parameters, leaves) carry the largest sequence number: never inside.
constexpr uint64_t kNoSequence = UINT64_MAX;

bool same_edge(const Edge& a, const Edge& b) {
  return a.function && a.function.get() == b.function.get() && a.input_nr == b.input_nr;
}

// A dataclass's fields that hold a tensor or a tuple of tensors, in dir()'s (sorted) order, each
// tuple's tensors in place of it: what msprobe 1.1.1 hooks of an output that is neither a tensor
// nor a tuple (module_processer.py, filter_tensor_and_tuple). Borrowed: `output` holds them.
void tensor_fields(pybind11::handle output, std::vector<pybind11::handle>& items) {
  const pybind11::object fields = PythonCrossing::owned(
      PyObject_GetAttrString(pybind11::type::handle_of(output).ptr(), "__dataclass_fields__"));
  if (!fields || !PyDict_Check(fields.ptr())) {
    PythonCrossing::drop_error();
    return;
  }
  std::vector<std::pair<std::string, pybind11::handle>> named;
  for (const auto& field : pybind11::reinterpret_borrow<pybind11::dict>(fields)) {
    const pybind11::handle key = field.first;
    const char* name = PyUnicode_Check(key.ptr()) ? PyUnicode_AsUTF8(key.ptr()) : nullptr;
    // Borrowed after this: the output keeps it.
    const pybind11::object v =
        PythonCrossing::owned(name ? PyObject_GetAttr(output.ptr(), key.ptr()) : nullptr);
    if (!v) {
      PythonCrossing::drop_error();
      continue;
    }
    named.emplace_back(name, v);
  }
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, v] : named) {
    if (is_tensor(v)) {
      items.push_back(v);
    } else if (PyTuple_Check(v.ptr()) && PyTuple_GET_SIZE(v.ptr()) > 0) {
      const pybind11::tuple t = pybind11::reinterpret_borrow<pybind11::tuple>(v);
      bool all = true;
      for (const pybind11::handle item : t) all = all && is_tensor(item);
      for (const pybind11::handle item : t) {
        if (all) items.push_back(item);
      }
    }
  }
}

// The top-level values of a module's output, as msprobe's backward hooks see them: a tuple or
// list's items, or the value itself; for a dataclass (Hugging Face's ModelOutput) its tensor
// fields. Anything else (a plain dict) has none: no backward record, as in msprobe.
std::vector<pybind11::handle> output_items(pybind11::handle output) {
  std::vector<pybind11::handle> items;
  if (PyTuple_Check(output.ptr()) || PyList_Check(output.ptr())) {
    // Tuples and lists are their own fast sequence.
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(output.ptr()); ++i) {
      items.push_back(PySequence_Fast_GET_ITEM(output.ptr(), i));
    }
  } else if (is_tensor(output)) {
    items.push_back(output);
  } else {
    tensor_fields(output, items);
  }
  return items;
}

// A module call's backward recorded into its session, as `<key>.<n>`.
class SessionBackward final : public ModuleBackwardReceiver {
 public:
  SessionBackward(std::weak_ptr<Session> session, std::string key, std::string base,
                  StackPtr stack)
      : session_(std::move(session)),
        key_(std::move(key)),
        base_(std::move(base)),
        stack_(std::move(stack)) {}

  // Numbered and opened as msprobe's backward pre-hook does on torch 2.x.
  void pass_begins() override {
    if (!kBackwardScopes) return;
    std::shared_ptr<Session> s = session_.lock();
    if (!s || !s->hooks().gate.backward()) return;
    Opened o;
    o.epoch = s->hooks().numbering.epoch();
    o.name = key_ + "." + std::to_string(s->hooks().numbering.next_index(key_));
    o.parent = s->hooks().backward_scope.open(o.name);
    call_ = std::move(o);
  }

  std::function<void()> pass_ends(variable_list into, variable_list out_of) override {
    return [this, into = std::move(into), out_of = std::move(out_of),
            opened = std::exchange(call_, std::nullopt)]() mutable {
      record(std::move(into), std::move(out_of), std::move(opened));
    };
  }

 private:
  struct Opened {
    std::string name;
    uint64_t epoch = 0;
    std::optional<std::string> parent;
  };

  void record(variable_list in, variable_list out, std::optional<Opened> opened_call) {
    std::shared_ptr<Session> s = session_.lock();
    if (!s) return;
    if (kBackwardScopes) {
      if (!opened_call) return;  // not collecting when it opened
      s->hooks().backward_scope.close();
    }
    if (!s->hooks().gate.backward()) return;
    Opened o;
    if (opened_call) {
      o = std::move(*opened_call);
    } else {
      o.epoch = s->hooks().numbering.epoch();
      o.name = key_ + "." + std::to_string(s->hooks().numbering.next_index(key_));
    }
    const Selected sel = s->hooks().selection.module_backward(o.name, base_);
    if (!sel.backward) return;
    StoredCall c = backward_call(o.name, sel, stack_, std::nullopt);
    c.epoch = o.epoch;
    c.parent = std::move(o.parent);
    record_backward(*s, std::move(c), in, out);
  }

  std::weak_ptr<Session> session_;
  std::string key_, base_;
  StackPtr stack_;
  std::optional<Opened> call_;  // this pass's, under the call's lock
};

// One module call's backward while it runs. Shared by the hooks on its nodes.
struct Pending {
  std::shared_ptr<ModuleBackwardReceiver> receiver;
  std::mutex mu;
  variable_list grads_in;   // per output item: what flows into the module
  variable_list grads_out;  // per positional argument: what flows out to it
  size_t waiting = 0;       // counted hooks still to run before the pass ends
  size_t counted = 0;
  bool begun = false;  // this pass's first output hook ran

  // Under `mu`, at each output hook.
  void begin() {
    if (std::exchange(begun, true)) return;
    receiver->pass_begins();
  }

  // Called by a counted hook, under `mu`: what to run once `mu` is let go, when this was the
  // last one.
  std::function<void()> done() {
    if (--waiting != 0) return nullptr;
    waiting = counted;  // retain_graph: the next pass is handed over again
    begun = false;
    variable_list in = std::move(grads_in), out = std::move(grads_out);
    grads_in.assign(in.size(), at::Tensor());
    grads_out.assign(out.size(), at::Tensor());
    return receiver->pass_ends(std::move(in), std::move(out));
  }
};

void add_to(at::Tensor& sum, const at::Tensor& g) {
  if (!g.defined()) return;
  if (!sum.defined()) {
    sum = g;
    return;
  }
  at::NoGradGuard no_grad;
  sum = sum + g;
}

// On an output's grad_fn: the gradients flowing into the module. `items` pairs the node's input
// (the output's output_nr) with the output item; `through` with an argument that the module
// handed back as this output.
class OutputHook : public torch::autograd::FunctionPreHook {
 public:
  struct Use {
    uint32_t input_nr;
    size_t item;
  };
  OutputHook(std::shared_ptr<Pending> p, std::vector<Use> items, std::vector<Use> through,
             bool counted)
      : p_(std::move(p)),
        items_(std::move(items)),
        through_(std::move(through)),
        counted_(counted) {}

  variable_list operator()(const variable_list& grads) override {
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(p_->mu);
      p_->begin();
      for (const Use& u : items_) {
        if (u.input_nr < grads.size()) p_->grads_in[u.item] = grads[u.input_nr];
      }
      for (const Use& u : through_) {
        if (u.input_nr < grads.size()) add_to(p_->grads_out[u.item], grads[u.input_nr]);
      }
      if (counted_) ready = p_->done();
    }
    if (ready) ready();
    return grads;
  }

 private:
  std::shared_ptr<Pending> p_;
  std::vector<Use> items_, through_;
  bool counted_;
};

// On a node of the module that sends gradient to an input: `uses` pairs the node's output (the
// index of its next edge) with the positional argument.
class InputHook : public torch::autograd::FunctionPostHook {
 public:
  struct Use {
    size_t output;
    size_t arg;
  };
  InputHook(std::shared_ptr<Pending> p, std::vector<Use> uses)
      : p_(std::move(p)), uses_(std::move(uses)) {}

  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(p_->mu);
      for (const Use& u : uses_) {
        if (u.output < outputs.size()) add_to(p_->grads_out[u.arg], outputs[u.output]);
      }
      ready = p_->done();
    }
    if (ready) ready();
    return outputs;
  }

 private:
  std::shared_ptr<Pending> p_;
  std::vector<Use> uses_;
};

}  // namespace

std::shared_ptr<ModuleBackwardStart> module_backward_start(pybind11::handle args) {
  if (!torch::autograd::GradMode::is_enabled()) return nullptr;
  auto start = std::make_shared<ModuleBackwardStart>();
  start->sequence_nr = at::sequence_number::peek();
  if (PyTuple_Check(args.ptr())) {
    for (const pybind11::handle a : pybind11::reinterpret_borrow<pybind11::tuple>(args)) {
      Edge edge;
      if (is_tensor(a)) {
        const at::Tensor& t = tensor_of(a);
        if (t.requires_grad()) edge = torch::autograd::impl::gradient_edge(t);
      }
      start->inputs.push_back(std::move(edge));
    }
  }
  return start;
}

namespace {

// The autograd nodes a module's forward made (sequence numbers from its start to now), and the
// edges of its inputs.
struct ModuleSpan {
  const ModuleBackwardStart& start;
  uint64_t end;
  bool inside(const Node* n) const {
    const uint64_t seq = n->sequence_nr();
    return seq != kNoSequence && seq >= start.sequence_nr && seq < end;
  }
  std::optional<size_t> arg_of(const Edge& e) const {  // which input `e` is, if any
    for (size_t j = 0; j < start.inputs.size(); ++j) {
      if (same_edge(e, start.inputs[j])) return j;
    }
    return std::nullopt;
  }
};

// The outputs' nodes, each with the output items it carries, and those it hands back as they are
// (an output that is an input).
struct OutputNodes {
  std::vector<NodePtr> nodes;
  std::vector<std::vector<OutputHook::Use>> items, through;
};

OutputNodes output_nodes(const ModuleSpan& span, const std::vector<pybind11::handle>& items) {
  OutputNodes out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!is_tensor(items[k])) continue;
    const at::Tensor& t = tensor_of(items[k]);
    if (!t.requires_grad() || !t.grad_fn()) continue;
    const Edge e = torch::autograd::impl::gradient_edge(t);
    size_t n = 0;
    while (n < out.nodes.size() && out.nodes[n].get() != e.function.get()) ++n;
    if (n == out.nodes.size()) {
      out.nodes.push_back(e.function);
      out.items.emplace_back();
      out.through.emplace_back();
    }
    out.items[n].push_back({e.input_nr, k});
    if (auto j = span.arg_of(e)) out.through[n].push_back({e.input_nr, *j});
  }
  return out;
}

// The module's own nodes that feed its inputs' gradients, walked from its outputs back to its
// inputs' edges.
std::vector<std::pair<NodePtr, std::vector<InputHook::Use>>> input_feeders(
    const ModuleSpan& span, const std::vector<NodePtr>& out_nodes) {
  std::vector<std::pair<NodePtr, std::vector<InputHook::Use>>> feeders;
  // A node of the span by its sequence number, one bit each: the span's nodes were made on this
  // thread during the forward, one number each. A hashed set of them cost an allocation a node,
  // a module call at a time (issue 55's monitor, all_xy: a fifth of its allocations).
  std::vector<bool> seen(span.end - span.start.sequence_nr);
  const auto first_time = [&](const Node* n) {
    auto bit = seen[n->sequence_nr() - span.start.sequence_nr];
    if (bit) return false;
    bit = true;
    return true;
  };
  std::vector<Node*> todo;
  for (const auto& n : out_nodes) {
    if (span.inside(n.get()) && first_time(n.get())) todo.push_back(n.get());
  }
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    std::vector<InputHook::Use> uses;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      const Edge& e = n->next_edge(i);
      if (!e.is_valid()) continue;
      if (auto j = span.arg_of(e)) {
        uses.push_back({i, *j});
      } else if (span.inside(e.function.get()) && first_time(e.function.get())) {
        todo.push_back(e.function.get());
      }
    }
    if (!uses.empty()) feeders.emplace_back(node_ptr(n), std::move(uses));
  }
  return feeders;
}

}  // namespace

void attach_backward_receiver(const ModuleBackwardStart& start, pybind11::handle output,
                              std::shared_ptr<ModuleBackwardReceiver> receiver) {
  PythonCrossing::assert_gil();
  const ModuleSpan span{start, at::sequence_number::peek()};
  const std::vector<pybind11::handle> items = output_items(output);
  OutputNodes out = output_nodes(span, items);
  if (out.nodes.empty()) return;  // nothing of it takes a gradient: no backward, as in PyTorch
  auto feeders = input_feeders(span, out.nodes);

  auto p = std::make_shared<Pending>();
  p->receiver = std::move(receiver);
  p->grads_in.resize(items.size());
  p->grads_out.resize(start.inputs.size());
  // Without an input that takes a gradient, the record is made when the outputs' nodes have run
  // (PyTorch's hook fires with None for every input then).
  const bool through_inputs = !feeders.empty();
  for (size_t n = 0; n < out.nodes.size(); ++n) {
    const bool counted = through_inputs ? !out.through[n].empty() : true;
    if (counted) ++p->counted;
    // Before the hooks of the modules inside this one that share the node (a Sequential's last
    // layer): PyTorch's hook node of the enclosing module runs first, being downstream.
    auto& hooks = out.nodes[n]->pre_hooks();
    auto inner = std::find_if(hooks.begin(), hooks.end(), [](const auto& h) {
      return dynamic_cast<const OutputHook*>(h.get()) != nullptr;
    });
    hooks.insert(inner, std::make_unique<OutputHook>(p, std::move(out.items[n]),
                                                     std::move(out.through[n]), counted));
  }
  for (auto& [node, uses] : feeders) {
    ++p->counted;
    node->add_post_hook(std::make_unique<InputHook>(p, std::move(uses)));
  }
  p->waiting = p->counted;
}

void attach_module_backward(const std::shared_ptr<Session>& session,
                            const std::string& backward_key, const std::string& base,
                            const ModuleBackwardStart& start, pybind11::handle output,
                            StackPtr stack) {
  PythonCrossing::assert_gil();
  attach_backward_receiver(
      start, output,
      std::make_shared<SessionBackward>(session, backward_key, base, std::move(stack)));
}

}  // namespace msprobe
