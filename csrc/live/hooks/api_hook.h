// The wrapper that replaces a torch API (torch.*, torch.Tensor.*, torch.nn.functional.*, ...):
// it records the outermost call's inputs, calls the original, records its outputs, and arranges a
// backward record; the original's result is returned untouched.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/detector.h"
#include "live/hooks/collectives.h"

namespace msprobe {

class Session;
struct EntryOptions;
struct LiveTensors;
struct Selected;
struct StoredCall;

// The call counter of one API name: atomics, reset under reset_mu when the session's step
// changes. Hooks of one name share it: msprobe 26.x records torch.linalg.norm and torch.norm both
// as Torch.norm, numbered together.
struct ApiCounter {
  std::atomic<uint64_t> epoch{0};  // Session::epoch() the count belongs to
  std::atomic<int64_t> count{0};
  std::mutex reset_mu;

  // The counter of `api`, made at its first hook; kept while a hook of that name lives.
  static std::shared_ptr<ApiCounter> of(const std::string& api);
};

// One wrapped torch API. Called with the GIL.
class ApiHook {
 public:
  ApiHook(std::string api, pybind11::object original)
      : api_(std::move(api)),
        original_(std::move(original)),
        written_(written_argument(api_)),
        view_of_first_arg_(makes_view_of_first_arg(api_ + ".0.forward")),
        writes_first_arg_(writes_first_arg(api_ + ".0.forward")),
        dropout_(is_dropout(api_)),
        counter_(ApiCounter::of(api_)) {}

  // `args`: the call's tuple; `kwargs`: its dict, or null when it has none.
  pybind11::object call(pybind11::handle args, pybind11::handle kwargs);
  // n of this API's next call within the session's step: its name's counter, reset when the
  // step changes, so naming a call takes no lock and no lookup.
  int64_t next_index(Session& session);
  // `program_call`: the program's own call (not the tool's, nor one inside a hooked call), whose
  // writes are noted (note_writes).
  pybind11::object call_original(pybind11::handle args, pybind11::handle kwargs,
                                 bool program_call) const;
  const pybind11::object& original() const { return original_; }
  const std::string& api() const { return api_; }

 private:
  // A selected call: its inputs described, the original called, its outputs described, and the
  // call submitted (and its backward hooked).
  pybind11::object record(const std::shared_ptr<Session>& owner, const std::string& name,
                          const Selected& sel, uint64_t epoch, pybind11::handle args,
                          pybind11::handle kwargs);
  // `limit_view_base`: a view call's large base is left unread (EntryOptions::read_limit).
  void describe_inputs(StoredCall& call, LiveTensors* live, pybind11::handle args,
                       pybind11::handle kwargs, const EntryOptions& options,
                       bool limit_view_base) const;
  // msprobe 26.x records no backward of a dropout with p == 0 (its list of dropout APIs).
  static bool is_dropout(const std::string& api);
  static bool dropout_p_is_zero(pybind11::handle args, pybind11::handle kwargs);
  // A view call whose view holds NaN/inf: its unread base marked as holding them.
  void mark_view_bases(StoredCall& call) const;
  // What a call just wrote (its first argument, `out=`, a collective's buffer) is no longer
  // uninitialised memory (UnwrittenMemory::written).
  void note_writes(pybind11::handle args, pybind11::handle kwargs) const;

  std::string api_;  // "Functional.linear"
  pybind11::object original_;
  WrittenArgument written_;         // in-place collectives: the argument that holds the result
  // narrow, view, select, ...: its first argument is read no further than its view needs (a
  // view's statistics are the view's elements, whatever the size of the tensor it is taken of).
  bool view_of_first_arg_;
  bool writes_first_arg_;  // copy_, add_, __setitem__, ...
  bool dropout_;
  const std::shared_ptr<ApiCounter> counter_;
};

}  // namespace msprobe
