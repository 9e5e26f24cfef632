// What the live guard knows about a flagged call (issue 8): the finding, where its NaN/inf came
// from, and the facts a user needs once the terminal is gone. The same facts become the exception's
// message and attributes, debugger.overflow, and overflow_report.json's `first_anomaly`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/detector.h"
#include "core/fact_fields.h"
#include "core/headroom.h"
#include "core/json_writer.h"
#include "core/record.h"

namespace msprobe {

// How each finding of a step was taken, for the summary and the report.
// Held: downstream of NaN/inf held in tensors that need no gradient (the damage rule), not yet
// caught doing damage.
// HeldToEnd: held NaN/inf that did no damage and was never turned finite: still in a tensor at
// the end of the step (a metric, an inference output), or let go unrecorded.
enum class Judgement { Flagged, Explained, Lead, Absorbed, Held, HeldToEnd };

// One anomalous argument: a tensor with its NaN/+inf/-inf counts, or a non-finite constant.
struct ArgFacts {
  std::string position;  // "input_args[0]", "output[1]", "input[0]" (backward), a kwarg's name
  std::string type;      // "torch.Tensor", "float", ...
  std::string dtype;     // tensors only
  std::vector<int64_t> shape;
  bool counted = false;  // counts were taken (strided floating-point tensors)
  int64_t nan = 0, posinf = 0, neginf = 0;
  std::optional<double> value;  // a scalar's value

  bool is_tensor() const { return type == "torch.Tensor"; }
  // "output[0]: torch.float16 [8, 4]: 0 NaN, 12 +inf, 0 -inf" or
  // "input_args[2]: float -Infinity".
  std::string text() const;
};

// One replay of an op-origin call (issue 23): in a wider dtype, or on the CPU in the same one.
struct ReplayFacts {
  std::string kind;    // "wider" or "cpu"
  std::string dtype;   // "torch.float32"
  std::string device;  // "cpu", "cuda", ...
  bool finite = false;
  std::optional<double> max, min;  // over the finite elements; none when there is none
  std::string verdict;             // "replay in float32: finite (max 1.07e+05 > ...): ..."
};

// Where held NaN/inf did damage: the call, and what the NaN/inf did there ("entered a tensor
// that requires grad"). Both empty when it did none.
struct CaughtAt {
  std::string call;
  std::string how;
};

// Where a stop's step was written. Both empty: not written (overflow_nums reached).
struct DumpPlace {
  std::string dir;
  std::string error;  // why the step's files could not be written
  // The flagged calls' tensors are among the files: false where no call of the step kept any (a
  // stop at an optimizer's step, a loss scaler's), once the step is written.
  bool tensor_files = true;
};

// An op origin's replays: what they said, and why a replay was not done ("not replayed: an
// in-place call ..."; empty when every replay ran).
struct ReplayOutcome {
  bool tried = false;
  std::vector<ReplayFacts> verdicts;
  std::string not_replayed;
};

// A backward finding: the parameters whose gradients are not finite; `masked` when the anomaly
// reached none of them.
struct ReachedGradients {
  std::vector<std::string> parameters;
  bool masked = false;
};

// torch.distributed: another rank overflowed, and this one stopped with it (a peer stop).
struct PeerOverflow {
  int rank = 0;              // the rank that overflowed
  int64_t step = 0;          // its step
  std::string call;          // its first flagged call
  std::string origin;        // that call's origin ("op", "input", "parameter"), or empty
  std::string scene, level;  // that call's scene and level, as named in a report ("" unknown)
};

// Another rank in a finding: with origin peer, the rank whose input to the collective held the
// NaN/inf; in a peer stop, the stop of another rank that this one follows (the finding names
// that rank's call, and `rank` is that rank).
struct PeerFacts {
  std::optional<int> rank;
  std::optional<PeerOverflow> stop;
};

struct OverflowFacts {
  Finding finding;
  std::optional<Origin> origin;          // none: downstream of an origin, or a mutation
  std::optional<std::string> parameter;  // origin parameter: its qualified name
  // Origin parameter through the optimizer's state of `parameter`: the state's key ("exp_avg_sq").
  std::optional<std::string> optimizer_state;
  std::optional<std::string> module;  // the enclosing module call
  std::optional<std::string> source;  // "<file>:<line>: <code>" of the innermost user frame
  std::vector<ArgFacts> tensors;
  ReachedGradients gradients;
  std::string note;  // one more line of explanation, or empty
  // Foreign NaN/inf (origin says whence) that this call turned into finite outputs: no stop.
  bool absorbed = false;
  // The damage rule (docs/overflow-detection.md): the NaN/inf was made in, or came in with, a
  // tensor that needs no gradient, and was held until it did damage at `caught`; `caught` is
  // empty when the stop is where it was made.
  bool held = false;
  CaughtAt caught;
  // The call is a started model's forward: judged, never recorded (msprobe records none), so
  // no ignore rule applies to it.
  bool started_model = false;
  int64_t step = 0;
  int rank = 0;
  DumpPlace dump;
  // Batched sync: how many hooked calls ran between this call and the raise.
  int64_t raised_calls_later = 0;
  // A 16-bit call site's largest magnitudes over the steps before this one, and their trend.
  std::optional<HeadroomTrend> history;
  ReplayOutcome replay;  // op-origin stops (overflow_check.replay)
  PeerFacts peer;

  // The exception's message: several lines, each fact on its own (the field list's lines,
  // core/fact_fields.h).
  std::string message() const;
  // The texts of the message's lines that take more than one field's value.
  std::string origin_words() const;  // "op (this call made NaN/inf from finite inputs)"
  std::string history_text() const;  // "step 6 50%, step 7 90% of float16's range: grew"
  std::string dump_words() const;    // where the step's files went, or why there are none
  std::string source_line() const;
  std::string raised_calls_later_line() const;
  std::string gradients_line() const;
  std::string intended_line() const;  // a critical op's ignore rule, where one may be meant
  // The one stderr line of an absorbed anomaly: "msprobe_cpp: step 2: NaN in an input was
  // absorbed by Torch.nan_to_num.0.forward (train.py:9: ...); no stop", or of a held one that
  // did no damage by the end of its step.
  std::string absorbed_line() const;
  // A critical op's way out when the NaN/inf is intended (log of a 0/1 mask): the ignore rule
  // that silences this call, as lines of a rules file.
  std::string ignore_rule_snippet() const;
  // overflow_report.json's `first_anomaly`: the report detail plus these facts.
  void write(JsonWriter& w) const;
};

// The facts of this rank's stop for `peer`'s, in `step`: its evidence in `dump_dir` ("" none),
// and the gradients here that hold NaN/inf from it.
OverflowFacts peer_stop_facts(const PeerOverflow& peer, int64_t step, int rank,
                              const std::string& dump_dir, std::vector<std::string> gradients);
// "[rank R] stopping: rank P overflowed at step S (call, origin O)": the line a rank says, and
// its stop's first line.
std::string peer_stop_line(const PeerOverflow& peer, int rank);

// The facts of the anomalous arguments of `finding` in `rec`, from their entries: each anomalous
// tensor with its dtype, shape and NaN/+inf/-inf counts (each anomalous tensor inside a list on
// its own), each non-finite scalar with its value.
std::vector<ArgFacts> anomalous_args(const CallRecord& rec, const Finding& finding, bool compat);

// Each fact type's one field list (core/fact_fields.h): read by the report's JSON, the Python
// objects' attributes and the message.
std::vector<FactField> fields_of(const Finding& f);
std::vector<FactField> fields_of(const ArgFacts& a);
std::vector<FactField> fields_of(const ReplayFacts& r);
std::vector<FactField> fields_of(const OverflowFacts& f);

// The types that other writers hand back, as member tables (core/fact_fields.h) that drive both
// directions: a replay's verdict (written by python/msprobe_cpp/replay.py, read by the guard; in
// the report; read again by the CLI), a peer's published stop (written by a rank's
// peer_stop.py from Overflow's attributes, read by the others; in the report), a headroom point
// (the report; debugger.headroom's dicts).
const std::vector<MemberField<ReplayFacts>>& replay_members();
const std::vector<MemberField<PeerOverflow>>& peer_overflow_members();
const std::vector<MemberField<HeadroomPoint>>& headroom_point_members();

// The report's key of the field whose Python attribute is `attr` in fields_of(OverflowFacts)
// ("call" -> "api_name"): readers of a report find a field by the name it has everywhere else.
// Throws std::logic_error for an attribute no field has.
const char* report_key(const std::string& attr);

// A replay finite in a wider dtype says "keep this op in float32": wrong advice where the call's
// history jumped (its inputs grew by orders of magnitude since the last step). There the advice
// points at what changed before the step.
void fit_replay_advice(OverflowFacts& facts);

// The masked note of a backward anomaly that no parameter gradient received.
inline constexpr const char* kMaskedNote = "masked: reached no parameter gradient";

}  // namespace msprobe
