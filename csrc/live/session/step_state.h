// Everything a session knows about its current step: the records, the call counters, the overflow
// guard's judgements and decisions, and the peer stop being written. The session holds it in a
// Guarded: it is reached only under that one lock, from the Python thread and from the autograd
// engine's threads alike.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/headroom.h"
#include "core/overflow_decisions.h"
#include "core/record.h"
#include "core/report.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"
#include "live/overflow/call_arguments.h"
#include "live/overflow/model_tensors.h"
#include "live/overflow/overflow_watch.h"

namespace msprobe {

struct StoredCall {
  CallRecord record;
  // Session::epoch() when the call was numbered: a call still running when its step ended (another
  // thread's stop) is not the next step's. 0: numbered by no step counter.
  uint64_t epoch = 0;
  StackPtr stack;                          // may be null (no Python frames)
  std::optional<std::string> parent;       // enclosing module call, for construct.json
  std::optional<std::string> module_hint;  // a backward call's forward module, for messages
  std::optional<int> peer_rank;  // a collective's anomalous result came from this rank's input
  // Task overflow_check: tensors of a call with a finding, saved if the step is dumped.
  std::vector<std::pair<at::Tensor, std::string>> tensors;
};

// Batched sync: a call waiting for its device statistics, with its live tensors.
struct DeferredCall {
  StoredCall call;
  LiveTensors live;
  std::shared_ptr<HeldArguments> held;  // an API call's arguments, for a replay (GIL to release)
};

struct StepState {
  int64_t step = 0;
  int rank = -1;  // -1: torch.distributed not initialized
  std::unordered_map<std::string, int64_t> counters;
  std::vector<StoredCall> calls;
  bool dirty = false;           // collected since the last write
  bool collected = false;       // collecting was on at some start() of the step
  bool began = false;           // start() was called in the step
  bool ended_by_raise = false;  // a raise ended the step already: the next step() must not
  // Where the step's next write is built (core/step_folders.h), and for which folder(); "": a
  // new one at the next start(), as a write took the last.
  std::string staging, staging_for;
  bool published = false;  // a write of the step is in place: a later one carries its tensors
  std::optional<PeerOverflow> peer_stop;  // the step is being ended by a peer stop
  // Task overflow_check: the started models' tensors (across steps), the calls' judge and what
  // the judgements lead to (both null otherwise).
  ModelTensors models;
  std::unique_ptr<OverflowWatch> watch;
  std::unique_ptr<OverflowDecisions> decisions;
  std::unique_ptr<Headroom> headroom;  // overflow_check with headroom > 0; kept across steps

  // "step<S>/rank<R>" below the dump root.
  std::string folder() const {
    return "step" + std::to_string(step) + "/" +
           (rank < 0 ? std::string("rank") : "rank" + std::to_string(rank));
  }
};

}  // namespace msprobe
