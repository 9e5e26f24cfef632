#include "live/overflow/python_side.h"

#include <pybind11/stl.h>

#include <filesystem>

#include "core/fact_fields.h"
#include "core/record.h"
#include "live/crossing/dict_fields.h"
#include "live/capture/call_values.h"
#include "live/crossing/python_crossing.h"
#include "live/overflow/call_arguments.h"
#include "live/session/overflow_control.h"

namespace py = pybind11;

namespace msprobe {

namespace {

py::dict attr_dict(const std::vector<FactField>& fields);

py::object attr_value(const FactValue& v) {
  switch (v.kind) {
    case FactValue::Kind::Null:
      return py::none();
    case FactValue::Kind::Bool:
      return py::bool_(v.boolean);
    case FactValue::Kind::Int:
      return py::int_(v.integer);
    case FactValue::Kind::Float:
      return py::float_(v.number);
    case FactValue::Kind::String:
      return py::str(v.text);
    case FactValue::Kind::List: {
      py::list items;
      for (const FactValue& item : v.items) items.append(attr_value(item));
      return py::object(std::move(items));
    }
    case FactValue::Kind::Record:
      return attr_dict(v.record);
  }
  return py::none();
}

// The fields that have an attribute, by it: the Python side of the one field list.
py::dict attr_dict(const std::vector<FactField>& fields) {
  py::dict d;
  for (const FactField& f : fields) {
    if (f.attr) d[f.attr] = attr_value(f.value);
  }
  return d;
}

// The end of the backward pass: runs on the thread that finished it, with the GIL (torch's
// queue_callback wrapper takes it), and an exception raised here leaves loss.backward() with its
// own type.
void queue_end_of_backward(Session& session) {
  PythonSide* side = session.guard().python_side();
  if (!side || !side->queue_callback) return;
  std::weak_ptr<Session> weak = current_session();
  side->queue_callback(py::cpp_function([weak] {
    std::shared_ptr<Session> s = weak.lock();
    if (!s) return;
    if (auto event = s->guard().end_of_backward()) handle_overflow_event(*s, *event);
  }));
}

// Op-origin stops: the call replayed wider and on the CPU (msprobe_cpp.replay), its verdicts put
// into the facts and into the step's report. A replay never costs the stop: whatever it raises
// becomes one "not replayed" line.
void replay_op(Session& session, const PythonSide& side, OverflowFacts& facts) {
  if (!session.config().overflow_check.replay || !side.replay || side.replay.is_none()) return;
  if (facts.origin != Origin::Op) return;
  std::string dtype;
  for (const ArgFacts& t : facts.tensors) {
    if (t.is_tensor() && t.position.rfind("output", 0) == 0) {
      dtype = t.dtype;
      break;
    }
  }
  // The wrapper's own arguments (judged at the call), or those its batch kept (batched sync).
  std::shared_ptr<HeldArguments> kept = std::move(raising_call_arguments());
  std::optional<CallArguments> held;
  std::string gone;  // why the arguments cannot be used
  if (!facts.caught.call.empty()) {
    gone = "the call's NaN/inf was held (no gradient) and caught at " + facts.caught.call +
           ", after its arguments were let go";
  }
  if (const CallArguments* current = current_call_arguments();
      current && *current->name == facts.finding.call) {
    held = *current;
  } else if (kept && kept->name() == facts.finding.call) {
    if (kept->inputs_written_since()) {
      gone = "an input was written in place after the call (batched sync judged it later)";
    } else {
      held = kept->view();
    }
  }
  auto handle_or_none = [](py::handle o) {
    return o ? py::reinterpret_borrow<py::object>(o) : py::object(py::none());
  };
  facts.replay.tried = true;
  try {
    py::object out =
        side.replay(facts.finding.call, held ? handle_or_none(held->original) : py::none(),
                    held ? handle_or_none(held->args) : py::none(),
                    held ? handle_or_none(held->kwargs) : py::none(), dtype,
                    gone.empty() ? py::object(py::none()) : py::str(gone));
    for (py::handle r : out["replay"])
      facts.replay.verdicts.push_back(read_dict(replay_members(), r));
    if (!out["not_replayed"].is_none()) facts.replay.not_replayed = py::str(out["not_replayed"]);
  } catch (py::error_already_set& e) {
    facts.replay.not_replayed = std::string("not replayed: ") + e.what();
  } catch (const std::exception& e) {
    facts.replay.not_replayed = std::string("not replayed: ") + e.what();
  }
  fit_replay_advice(facts);  // the report takes the replays when the step is written
}

}  // namespace

void mark_anomalous_collective_input(Session& session, const std::string& call) {
  PythonCrossing::assert_gil();
  PythonSide* side = session.guard().python_side();
  if (side && side->mark_collective_input && !side->mark_collective_input.is_none()) {
    side->mark_collective_input(call);
  }
}

std::optional<int> anomalous_collective_input_rank(Session& session, const std::string& call) {
  PythonSide* side = session.guard().python_side();
  if (!side || !side->collective_input_rank || side->collective_input_rank.is_none()) return {};
  py::object rank = side->collective_input_rank(call);
  if (rank.is_none()) return {};
  return rank.cast<int>();
}

void raise_peer_stop(Session& session) {
  PythonCrossing::assert_gil();
  PythonSide* side = session.guard().python_side();
  if (!side || !side->raise_peer_stop || side->raise_peer_stop.is_none()) return;
  try {
    side->raise_peer_stop();  // raises, or returns where this rank is to finish its step first
  } catch (...) {
    session.peer_stop().mark_raised();
    throw;
  }
}

void queue_backward_flush(Session& session) {
  PythonCrossing::assert_gil();
  PythonSide* side = session.guard().python_side();
  if (!side || !side->queue_callback) return;
  std::weak_ptr<Session> weak = current_session();
  side->queue_callback(py::cpp_function([weak] {
    if (std::shared_ptr<Session> s = weak.lock()) flush_deferred(*s);
  }));
}

py::dict overflow_fields(const OverflowFacts& facts) {
  PythonCrossing::assert_gil();
  py::dict kw = attr_dict(fields_of(facts));
  kw["message"] = facts.message();
  return kw;
}

py::object overflow_object(const PythonSide& side, const OverflowFacts& facts) {
  PythonCrossing::assert_gil();
  return side.overflow_type(**overflow_fields(facts));
}

void flush_deferred(Session& session) {
  PythonCrossing::assert_gil();
  // The raising call's kept arguments are for its replay alone: released here whatever happens.
  struct Release {
    ~Release() { raising_call_arguments().reset(); }
  } release;
  std::vector<OverflowEvent> events = resolve_deferred(session);
  const OverflowEvent* stop = nullptr;
  // An on_overflow that raises for a notice must not cost the batch's stop: the stop is raised
  // with that exception as its cause, or, without a stop, the exception goes on once every
  // notice is told.
  std::optional<py::error_already_set> callback_error;
  for (const OverflowEvent& e : events) {
    if (e.raise) {
      if (!stop) stop = &e;
      continue;
    }
    try {
      handle_overflow_event(session, e);
    } catch (py::error_already_set& error) {
      if (!callback_error) callback_error = std::move(error);
    }
  }
  if (stop) {
    handle_overflow_event(session, *stop, callback_error ? callback_error->value() : py::object());
  }
  if (callback_error) throw std::move(*callback_error);
}

void handle_overflow_event(Session& session, const OverflowEvent& event, py::object cause) {
  PythonCrossing::assert_gil();
  PythonSide* side = session.guard().python_side();
  if (event.queue_end_of_backward) queue_end_of_backward(session);
  if (!side) return;
  if (event.raise) raise_stop(session, *side, event, std::move(cause));
  // A notice: the user's on_overflow may raise; that exception goes on as itself, as any
  // exception of the user's code in a hooked call would.
  if (event.notify && side->on_flagged) side->on_flagged(overflow_object(*side, event.facts));
}

void raise_stop(Session& session, const PythonSide& side, const OverflowEvent& event,
                py::object cause) {
  PythonCrossing::assert_gil();
  OverflowFacts facts = event.facts;
  replay_op(session, side, facts);
  const std::string write_error = session.end_step_for_raise(&facts);
  if (!write_error.empty() && !facts.dump.dir.empty()) {
    facts.dump.dir.clear();  // never name a folder that is not there
    facts.dump.error = write_error;
  }
  // Named only where the write made it: a step no call of which kept its tensors has none.
  if (!facts.dump.dir.empty()) {
    std::error_code ec;
    const std::string tensors = facts.dump.dir + "/" + kTensorFolder;
    facts.dump.tensor_files = std::filesystem::is_directory(tensors, ec);
  }
  // One Overflow for everyone: the error's, on_overflow's and debugger.overflow.
  py::object error = side.error_type.attr("_of")(**overflow_fields(facts));
  if (side.on_stop && !side.on_stop.is_none()) {
    try {
      side.on_stop(error.attr("overflow"), event.notify);
    } catch (py::error_already_set& e) {
      // The user's on_overflow raised: the stop is raised all the same (its step is written),
      // with the user's exception as its __cause__.
      if (!cause) cause = e.value();
    }
  }
  PythonCrossing::raise(side.error_type, error, std::move(cause));
}

void stop_collecting(Session& session) {
  flush_deferred(session);
  session.stop();
}

void end_step(Session& session) {
  flush_deferred(session);
  session.step();
}

void handle_event(Session& session, const std::optional<OverflowEvent>& event) {
  PythonCrossing::assert_gil();
  if (event) handle_overflow_event(session, *event);
}

bool begin_optimizer_step(Session& session, bool runs_closure) {
  PythonCrossing::assert_gil();
  if (!may_leave_optimizer_calls(session, runs_closure)) return false;
  if (session.deferred().any()) flush_deferred(session);  // the step's calls so far, judged
  return leave_optimizer_calls(session);
}

}  // namespace msprobe
