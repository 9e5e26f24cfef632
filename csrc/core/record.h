// The record model: one call (API or module, forward or backward) with its argument entries, as
// msprobe writes them in dump.json (docs/formats.md). The live hooks build these; the dump reader
// parses them; the detector and the writer consume them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace msprobe {

// A JSON scalar as msprobe writes it: statistics fields and the `value` of non-tensor arguments.
// Int and Float are kept apart because Python writes 3 and 3.0 differently. Strings and lists are
// rare (a tensor entry holds six scalars, all numbers), so they live behind a pointer. An Int
// never needs its `number` nor a Float its `integer`: they share their bytes, and a scalar stays
// 24 bytes (an entry holds eight; see Entry).
struct Scalar {
  enum class Kind : uint8_t { Absent, Null, Bool, Int, Float, String, Raw, List };
  Kind kind = Kind::Absent;
  bool boolean = false;
  union {
    int64_t integer = 0;  // Int
    double number;        // Float
  };

  Scalar() = default;
  Scalar(const Scalar& o) : kind(o.kind), boolean(o.boolean) {
    copy_number(o);
    if (o.extra_) extra_ = std::make_unique<Extra>(*o.extra_);
  }
  Scalar(Scalar&& o) noexcept : kind(o.kind), boolean(o.boolean), extra_(std::move(o.extra_)) {
    copy_number(o);
  }
  Scalar& operator=(const Scalar& o) {
    if (this != &o) *this = Scalar(o);
    return *this;
  }
  Scalar& operator=(Scalar&& o) noexcept {
    kind = o.kind;
    boolean = o.boolean;
    copy_number(o);
    extra_ = std::move(o.extra_);
    return *this;
  }

  static Scalar null() { return make(Kind::Null); }
  static Scalar of_bool(bool b) {
    Scalar s = make(Kind::Bool);
    s.boolean = b;
    return s;
  }
  static Scalar of_int(int64_t i) {
    Scalar s = make(Kind::Int);
    s.integer = i;
    return s;
  }
  static Scalar of_float(double d) {
    Scalar s = make(Kind::Float);
    s.number = d;
    return s;
  }
  static Scalar of_string(std::string t) {
    Scalar s = make(Kind::String);
    s.extra_ = std::make_unique<Extra>(Extra{std::move(t), {}});
    return s;
  }
  static Scalar of_list(std::vector<Scalar> items) {
    Scalar s = make(Kind::List);
    s.extra_ = std::make_unique<Extra>(Extra{{}, std::move(items)});
    return s;
  }
  static Scalar of_raw(std::string json) {
    Scalar s = make(Kind::Raw);
    s.extra_ = std::make_unique<Extra>(Extra{std::move(json), {}});
    return s;
  }

  bool present() const { return kind != Kind::Absent; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  double as_double() const { return kind == Kind::Int ? static_cast<double>(integer) : number; }
  bool non_finite() const { return kind == Kind::Float && !std::isfinite(number); }
  // String: the string; Raw: JSON text of a list or object value. Empty otherwise.
  const std::string& text() const { return extra_ ? extra_->text : empty().text; }
  // List: torch.Size and slice values we record ourselves. Empty otherwise.
  const std::vector<Scalar>& items() const { return extra_ ? extra_->items : empty().items; }

 private:
  struct Extra {
    std::string text;
    std::vector<Scalar> items;
  };
  static const Extra& empty() {
    static const Extra e;
    return e;
  }
  static Scalar make(Kind k) {
    Scalar s;
    s.kind = k;
    return s;
  }
  // The eight bytes as they are, whichever of the two they hold.
  void copy_number(const Scalar& o) { std::memcpy(&integer, &o.integer, sizeof integer); }
  std::unique_ptr<Extra> extra_;
};

// How many elements of a tensor are NaN, +inf and -inf. Counted for anomalous tensors only, where
// the live guard compares what a call's outputs hold with what its inputs held; never written to
// a file (msprobe's format has no field for them). -1: not counted.
struct NonFiniteCounts {
  int64_t nan = -1, posinf = -1, neginf = -1;
  bool known() const { return nan >= 0; }
};

// A tensor's Max_except_inf_nan and Min_except_inf_nan.
struct FiniteExtremes {
  Scalar max, min;
};

// One argument entry: a tensor's statistics, a scalar, null, a nested list, or a mapping (a dict,
// a dataclass such as Hugging Face's ModelOutput, a namedtuple: msprobe writes each as a JSON
// object of its fields).
// What the tool knows of an entry's bytes besides their statistics.
struct ByteMarks {
  // They are no value the program made: memory torch.empty and its kin left unwritten, or the
  // buffer a collective writes before it writes it. Written to files as they are; never an
  // anomaly.
  bool unwritten = false;
  // The tensor a view call took a view of (narrow, view, select, ...), larger than such a call
  // reads (live/capture/tensor_entry.h, EntryOptions::read_limit): its statistics are null unless
  // the view held NaN/inf, and it is never copied as a flagged call's evidence.
  bool view_base = false;
};

struct Entry {
  enum class Kind : uint8_t { Null, Object, List, Other, Map };
  // The small fields first, packed together: every call makes an entry per argument, and the
  // entries of a call of two arguments then fit in one block of malloc's per-thread cache (up to
  // 1032 bytes), which a larger entry misses, costing a slow allocation on every hooked call.
  Kind kind = Kind::Null;
  bool has_shape = false;
  // What is known of its bytes besides their statistics. Never written to a file.
  ByteMarks marks;
  // Statistics still on the device (batched sync): the slot they will come back in; -1 when the
  // fields below are final. Never written to a file.
  int32_t pending_stats = -1;

  // Object
  std::string type;  // "torch.Tensor", "int", "float", "torch.dtype", ...
  std::string dtype;
  Shape shape;
  Scalar max, min, mean, norm;
  // msprobe's Max_except_inf_nan / Min_except_inf_nan: the extremes over the finite elements (NaN
  // when there is none), present only where Max / Min itself is NaN or ±inf.
  FiniteExtremes finite;
  NonFiniteCounts nonfinite;  // anomalous tensors of the live guard
  Scalar requires_grad;
  Scalar value;  // non-tensor objects; a tensor's msprobe 26.x xor checksum
  std::string md5;
  std::string data_name;
  // torch.ProcessGroup: md5 of str(group_ranks) (the ranks are in `value`), as msprobe writes it.
  std::string group_id;

  // List and Map: the items; a Map's keys, one per item.
  std::vector<Entry> items;
  std::vector<std::string> keys;

  // Asked of every entry several times per hooked call: the length is compared first.
  bool is_tensor() const {
    constexpr char kTensor[] = "torch.Tensor";
    return kind == Kind::Object && type.size() == sizeof(kTensor) - 1 &&
           std::memcmp(type.data(), kTensor, sizeof(kTensor) - 1) == 0;
  }
  bool has_items() const { return kind == Kind::List || kind == Kind::Map; }

  static Entry null_entry() { return Entry{}; }
  static Entry list(std::vector<Entry> items) {
    Entry e;
    e.kind = Kind::List;
    e.items = std::move(items);
    return e;
  }
  static Entry map(std::vector<std::string> keys, std::vector<Entry> items) {
    Entry e;
    e.kind = Kind::Map;
    e.keys = std::move(keys);
    e.items = std::move(items);
    return e;
  }
  static Entry scalar(std::string type, Scalar value) {
    Entry e;
    e.kind = Kind::Object;
    e.type = std::move(type);
    e.value = std::move(value);
    return e;
  }
};

// A call record. Backward records hold their incoming gradients in `inputs` (msprobe's key
// `input`); `uses_input_key` remembers which key the record used so it is written back the same.
struct CallRecord {
  std::string name;
  std::vector<Entry> inputs;
  std::vector<std::pair<std::string, Entry>> kwargs;
  std::vector<Entry> outputs;
  bool uses_input_key = false;
  // data_mode can leave a side out; the writer then omits its keys, as msprobe does.
  bool has_inputs = true;
  bool has_outputs = true;
  // msprobe 26.x's module forward "parameters" ({name: entry}, after "output"), written when
  // has_parameters. A parameter_grads record ("<module>.parameters_grad.<k>") is nothing but
  // these members, each a list of the gradients of that parameter.
  std::vector<std::pair<std::string, Entry>> parameters;
  bool has_parameters = false;
  bool parameter_grads = false;
  // A debug.json record (26.x's level debug): the saved value's own entry, outputs[0]. Records
  // of one name are one: the later ones' non-null leaves laid over the first's (gradients as
  // they arrive).
  bool bare_value = false;
};

// Empties `rec`'s lists, keeping their storage for the reader that refills it. Called by the
// thread that has just handed the record on, while its entries are in that thread's cache: left
// to the parsing thread that refills it, freeing them was cache misses on another core's lines
// (7 % of check's parsing threads, bench/README.md).
void drop_entries(CallRecord& rec);

// Where a top-level argument entry sits in its record.
struct ArgPos {
  enum class Side : uint8_t { Input, Kwarg, Output };
  Side side;
  size_t index;                      // in inputs, kwargs or outputs
  const std::string* key = nullptr;  // kwargs: the keyword
  bool uses_input_key = false;       // the record's inputs are msprobe's `input` (backward)

  // How messages and reports name it: "input_args[0]", "input[1]" (backward), the keyword,
  // "output[0]".
  std::string label() const;
};

// msprobe's key of a record's positional inputs: "input" (backward records) or "input_args".
const char* inputs_key(bool uses_input_key);

// Calls `f(pos, entry)` for every top-level argument of `rec`: inputs, kwargs, outputs, in that
// order (const or not, as `rec` is).
template <typename Record, typename F>
void for_each_arg(Record& rec, F&& f) {
  const bool key = rec.uses_input_key;
  for (size_t i = 0; i < rec.inputs.size(); ++i)
    f(ArgPos{ArgPos::Side::Input, i, nullptr, key}, rec.inputs[i]);
  for (size_t i = 0; i < rec.kwargs.size(); ++i)
    f(ArgPos{ArgPos::Side::Kwarg, i, &rec.kwargs[i].first, key}, rec.kwargs[i].second);
  for (size_t i = 0; i < rec.outputs.size(); ++i)
    f(ArgPos{ArgPos::Side::Output, i, nullptr, key}, rec.outputs[i]);
}

// Calls `f(entry)` for every entry of `rec`, list items and parameters included (const or not, as
// `rec` is).
template <typename Record, typename F>
void for_each_entry(Record& rec, F&& f) {
  struct Walk {
    F& f;
    void operator()(decltype(rec.inputs.front())& e) {
      f(e);
      for (auto& item : e.items) (*this)(item);
    }
  } walk{f};
  for (auto& e : rec.inputs) walk(e);
  for (auto& kv : rec.kwargs) walk(kv.second);
  for (auto& e : rec.outputs) walk(e);
  for (auto& kv : rec.parameters) walk(kv.second);
}

// Module calls' names: "Module.<qualname>.<class>" + ".forward" or ".backward", then their counter.
bool is_module_name(const std::string& call_name);
std::string module_name_base(const std::string& qualname, const std::string& class_name);

// "Tensor.add_.0.backward" and "Module.fc1.Linear.backward.0" are backward calls.
bool is_backward_name(const std::string& call_name);

// The forward call whose backward `call_name` is, or "" when `call_name` is not a backward name.
std::string forward_name_of(const std::string& call_name);

// The backward call of forward call `call_name`, or "" when it is no forward name.
std::string backward_name_of(const std::string& call_name);

// A module call's qualified name: "Module.layer1.0.bn1.BatchNorm2d.forward.0" -> "layer1.0.bn1";
// "" for a name that is not a module call's.
std::string module_qualname(const std::string& call_name);

// msprobe 1.1.1's torch API name: the first two dot-separated parts, lower-cased.
std::string torch_api_name(const std::string& call_name);

// A call name in its parts, the one parser of them (Python's replay reads it through _C):
// "Tensor.__mul__.3.forward" -> {"Tensor", "__mul__", 3, false}; "Torch.linalg.norm.0.backward"
// -> {"Torch", "linalg.norm", 0, true}; "Module.fc1.Linear.forward.0" -> {"Module",
// "fc1.Linear", 0, false}. nullopt for a name of fewer than four parts or without a counter and
// a direction at its end.
struct CallName {
  std::string section;  // Tensor, Torch, Functional, _VF, Distributed, Module, ...
  std::string api;      // the API (or the module's qualified name and class)
  int64_t index = 0;    // the call's counter within its step
  bool backward = false;
  std::string family() const { return section + "." + api; }  // "Tensor.__mul__"
};
std::optional<CallName> parse_call_name(const std::string& call_name);

// A call's site for "said once" lines: the name without its counter, nor any index of a module's
// qualified name ("Module.layers.0.fc.Linear.forward.0" -> "Module.layers.fc.Linear.forward"), so
// the blocks of a repeated layer are one site.
std::string call_site_name(const std::string& call_name);

// The folder of a rank folder that holds its saved tensors (msprobe's name).
inline constexpr const char kTensorFolder[] = "dump_tensor_data";

// "[rank R] " before a line a rank says; "" outside torch.distributed (rank < 0).
std::string rank_label(int rank);

// A step's folder below the dump root: "step<S>/rank<R>", "step<S>/rank" outside
// torch.distributed (rank < 0). step_part() is its first part ("step<S>"), rank_folder() its last
// (grad_probe's folders nest the other way round: rank<R>/step<S>).
std::string rank_folder(int rank);
std::string step_part(int64_t step);
std::string step_folder(int64_t step, int rank);

// dump.json's members besides "data".
struct DumpHeader {
  std::string task;
  std::string level;
  std::optional<std::string> framework;  // msprobe 26.x's "pytorch"
  std::optional<std::string> dump_data_dir;
};

}  // namespace msprobe
