// The session's side of its current step: the records, where the step's files are built, and the
// peer stop being written. The session holds it in a Guarded: it is reached only under that one
// lock, from the Python thread and from the autograd engine's threads alike. The call counters are
// CallNumbering's, the judgements the OverflowGuard's (docs/architecture.md, "Who owns what").
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config_watch.h"
#include "core/record.h"
#include "core/report.h"
#include "core/step_ticket.h"
#include "live/capture/call_stack.h"
#include "live/capture/live_tensors.h"
#include "live/overflow/call_arguments.h"

namespace msprobe {

struct StoredCall {
  CallRecord record;
  // The step's epoch (its StepTicket's) when the call was numbered: a call still running when its
  // step ended (another thread's stop) is not the next step's. 0: numbered by no step counter.
  uint64_t epoch = 0;
  StackPtr stack;                          // may be null (no Python frames)
  std::optional<std::string> parent;       // enclosing module call, for construct.json
  // Named in construct.json only: a call 26.x's risk_level leaves out of dump.json and
  // stack.json, which its construct.json still names (level mix).
  bool construct_only = false;
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

// Where a session's files go, and which frames of a stack are the tool's own.
struct SessionPaths {
  std::string package_dir, library_dir;  // frames under these are ours, not the user's
  std::string dump_root;                 // dump_path, absolute, without a trailing '/'
  // The rank folder outside torch.distributed: "rank" (msprobe 1.1.x), "proc<pid>" (26.x).
  std::string unranked = "rank";

  std::string rank_folder_of(int rank) const { return rank < 0 ? unranked : rank_folder(rank); }
  // step<S>/rank<R> below the dump root
  std::string folder_of(const StepTicket& at) const {
    return step_part(at.step) + "/" + rank_folder_of(at.rank);
  }
  // <dump_root>/step<S>/rank<R>
  std::string dir_of(const StepTicket& at) const { return dump_root + "/" + folder_of(at); }
};

// msprobe 26.x's start(scheduled_tokens=...): the batch's requests in order, with their tokens.
using ScheduledTokens = std::optional<std::vector<std::pair<std::string, int64_t>>>;

// Which step this is, and on which rank, is the numbering's ticket (core/step_ticket.h), read
// under this state's lock where it must not change (it is published under it).
struct StepCalls {
  // msprobe 26.x's dump_enable: config.json looked at again; its dump_enable turns collection
  // on and off (core/config_watch.h).
  std::optional<ConfigWatch> dump_enable;
  std::vector<StoredCall> calls;
  bool dirty = false;           // collected since the last write
  bool collected = false;       // collecting was on at some start() of the step
  bool began = false;           // start() was called in the step
  bool stopped = false;         // stop() was called since the step's last start()
  bool ever_started = false;    // start() was called in some step of the session
  bool ended_by_raise = false;  // a raise ended the step already: the next step() must not
  // Where the step's next write is built (core/step_folders.h), and for which folder(); "": a
  // new one at the next start(), as a write took the last.
  std::string staging, staging_for;
  bool published = false;  // a write of the step is in place: a later one carries its tensors
  std::optional<PeerOverflow> peer_stop;  // the step is being ended by a peer stop
};

}  // namespace msprobe
