#include "live/session/step_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <future>
#include <unordered_map>
#include <unordered_set>

#include "core/dump_writer.h"
#include "core/json_writer.h"
#include "core/output_files.h"
#include "core/step_folders.h"
#include "live/log/tool_log.h"
#include "live/session/backward_scope.h"

namespace msprobe {
namespace {

// Whether stack.json names the call: msprobe writes no stack for backward records (the engine
// runs them, not a Python line) nor for parameters' gradients, nor for what risk_level left out.
// (We keep the forward's stack in memory, for the source line an overflow stop names.)
bool stack_recorded(const StoredCall& c) {
  return !c.construct_only && !c.record.parameter_grads && !is_backward_name(c.record.name);
}

// The step's calls in the order they began: a module call is recorded when it ends, after the
// calls made inside it, and so is put before the first of them.
std::vector<size_t> start_order(const std::vector<StoredCall>& calls) {
  std::unordered_map<std::string, size_t> index_of;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (is_module_name(calls[i].record.name)) index_of.emplace(calls[i].record.name, i);
  }
  std::vector<size_t> order;
  order.reserve(calls.size());
  std::vector<bool> placed(calls.size(), false);
  std::vector<size_t> enclosing;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (placed[i]) continue;
    enclosing.clear();
    for (const std::optional<std::string>* p = &calls[i].parent; *p;) {
      auto it = index_of.find(**p);
      if (it == index_of.end() || placed[it->second]) break;
      enclosing.push_back(it->second);
      p = &calls[it->second].parent;
    }
    for (auto it = enclosing.rbegin(); it != enclosing.rend(); ++it) {
      placed[*it] = true;
      order.push_back(*it);
    }
    placed[i] = true;
    order.push_back(i);
  }
  return order;
}

// msprobe 26.x's construct.json order: at each call's end (an API's, forward or backward, or a
// module's) it adds the API, then every module begun by then and not named yet, in the order
// they began.
std::vector<size_t> construct_order(const std::vector<StoredCall>& calls) {
  const std::vector<size_t> starts = start_order(calls);
  std::vector<size_t> position(calls.size(), 0);
  for (size_t k = 0; k < starts.size(); ++k) position[starts[k]] = k;
  std::vector<size_t> order;
  order.reserve(calls.size());
  std::vector<bool> named(calls.size(), false);
  size_t next = 0, frontier = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].record.parameter_grads) continue;
    if (!is_module_name(calls[i].record.name) && !named[i]) {
      named[i] = true;
      order.push_back(i);
    }
    frontier = std::max(frontier, position[i]);
    for (; next < starts.size() && next <= frontier; ++next) {
      const size_t m = starts[next];
      if (is_module_name(calls[m].record.name) && !named[m]) {
        named[m] = true;
        order.push_back(m);
      }
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!named[i] && !calls[i].record.parameter_grads) order.push_back(i);
  }
  return order;
}

// msprobe 26.x's stack.json: the forward calls of one stack together, {"<n>": [[names], [frames]]}
// in the order each stack first appears, as the calls began.
std::string grouped_stacks_json(const FinishedStep& step, std::string buffer) {
  std::vector<std::pair<const std::vector<std::string>*, std::vector<const std::string*>>> groups;
  static const std::vector<std::string> kNoFrames;
  for (const size_t i : start_order(step.calls)) {
    const std::string& name = step.calls[i].record.name;
    if (!stack_recorded(step.calls[i])) continue;
    const std::vector<std::string>* frames =
        i < step.stacks.size() && step.stacks[i] ? step.stacks[i].get() : &kNoFrames;
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return *g.first == *frames; });
    if (same == groups.end()) {
      groups.emplace_back(frames, std::vector<const std::string*>{});
      same = groups.end() - 1;
    }
    same->second.push_back(&name);
  }
  JsonWriter w(1, std::move(buffer));
  w.begin_object();
  for (size_t g = 0; g < groups.size(); ++g) {
    w.key(std::to_string(g));
    w.begin_array();
    w.begin_array();
    for (const std::string* name : groups[g].second) w.value_string(*name);
    w.end_array();
    w.begin_array();
    for (const std::string& frame : *groups[g].first) w.value_string(frame);
    w.end_array();
    w.end_array();
  }
  w.end_object();
  return w.take();
}

bool is_float_below_64(const std::string& dtype) {
  return (dtype.rfind("torch.float", 0) == 0 || dtype.rfind("torch.bfloat", 0) == 0) &&
         dtype != "torch.float64";
}

bool is_integer_dtype(const std::string& dtype) {
  return dtype.rfind("torch.int", 0) == 0 || dtype.rfind("torch.uint", 0) == 0;
}

// An integer tensor's statistic as Python's .item() of it writes it: 2, not 2.0.
void as_integer(Scalar& s) {
  if (s.kind == Scalar::Kind::Float && std::isfinite(s.number) &&
      std::trunc(s.number) == s.number && std::fabs(s.number) < 9.0e15) {
    s = Scalar::of_int(static_cast<int64_t>(s.number));
  }
}

// What 26.x writes of a tensor's statistics (dump_format.h): an integer tensor's as integers;
// Mean and Norm null unless it is a float tensor below 64 bits (and precision is low); a
// 0-dimensional tensor keeps all four.
void apply_stat_format(CallRecord& rec, const DumpFormat& format) {
  if (!format.null_mean_norm && !format.float_only_mean_norm) return;
  for_each_entry(rec, [&](Entry& e) {
    if (!e.is_tensor()) return;
    if (format.float_only_mean_norm && is_integer_dtype(e.dtype)) {
      for (Scalar* s : {&e.max, &e.min, &e.mean, &e.norm}) as_integer(*s);
    }
    if (!e.has_shape) return;
    if (e.shape.empty()) {
      // 26.x writes the value itself as all four: a negative scalar's Norm is that value.
      if (format.float_only_mean_norm && e.max.is_number()) e.mean = e.norm = e.max;
      return;
    }
    if (format.null_mean_norm || !is_float_below_64(e.dtype)) {
      e.mean = Scalar::null();
      e.norm = Scalar::null();
    }
  });
}

bool is_dtype_or_device(const Entry& e) {
  return e.kind == Entry::Kind::Object && (e.type == "torch.dtype" || e.type == "torch.device");
}

// 26.x's {} for a torch.dtype or torch.device it was not told the meaning of by a keyword.
void untype_objects(Entry& e) {
  if (is_dtype_or_device(e)) {
    e = Entry::map({}, {});
    return;
  }
  for (Entry& item : e.items) untype_objects(item);
}

void untype_positional_objects(CallRecord& rec) {
  for (Entry& e : rec.inputs) untype_objects(e);
  for (Entry& e : rec.outputs) untype_objects(e);
  for (auto& [key, e] : rec.kwargs) {
    if (is_dtype_or_device(e) && (key == "dtype" || key == "output_dtype" || key == "device"))
      continue;
    untype_objects(e);
  }
}

// A 26.x module backward record lists the gradients that exist only.
void drop_null_grads(CallRecord& rec) {
  auto drop = [](std::vector<Entry>& entries) {
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [](const Entry& e) { return e.kind == Entry::Kind::Null; }),
                  entries.end());
  };
  drop(rec.inputs);
  drop(rec.outputs);
}

// Lays the non-null leaves of `from` over `into` (a debug.json gradient record as its gradients
// arrive).
void overlay(Entry& into, const Entry& from) {
  if (from.kind == Entry::Kind::Null) return;
  if (!from.has_items() || !into.has_items() || into.items.size() != from.items.size()) {
    into = from;
    return;
  }
  for (size_t i = 0; i < from.items.size(); ++i) overlay(into.items[i], from.items[i]);
}

// The records dump.json lists, in order, formatted as the generation writes them. The
// parameters_grad records of one name are one, at the place of the last, with each parameter's
// gradient in the order they came (26.x merges them as they come); `merged` holds those.
std::vector<const CallRecord*> dump_records(std::vector<StoredCall>& calls,
                                            const DumpFormat& format,
                                            std::vector<CallRecord>& merged) {
  std::unordered_map<std::string, size_t> last_of;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].record.parameter_grads) last_of[calls[i].record.name] = i;
  }
  std::unordered_map<std::string, std::vector<std::pair<std::string, Entry>>> earlier;
  std::unordered_map<std::string, size_t> value_at;  // a debug.json name's merged record
  merged.reserve(last_of.size() + calls.size());
  std::vector<const CallRecord*> records;
  records.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    CallRecord& rec = calls[i].record;
    if (calls[i].construct_only) continue;
    apply_stat_format(rec, format);
    if (format.positional_objects_untyped) untype_positional_objects(rec);
    if (format.module_grads_without_nulls && is_module_name(rec.name) &&
        is_backward_name(rec.name))
      drop_null_grads(rec);
    if (rec.bare_value && !rec.outputs.empty()) {
      auto [first, added] = value_at.try_emplace(rec.name, merged.size());
      if (added) {
        merged.push_back(rec);
        records.push_back(&merged.back());
      } else {
        overlay(merged[first->second].outputs.front(), rec.outputs.front());
      }
      continue;
    }
    if (!rec.parameter_grads) {
      records.push_back(&rec);
      continue;
    }
    auto& before = earlier[rec.name];
    if (last_of[rec.name] != i) {
      before.insert(before.end(), rec.parameters.begin(), rec.parameters.end());
      continue;
    }
    merged.push_back(rec);
    merged.back().parameters.insert(merged.back().parameters.begin(), before.begin(),
                                    before.end());
    records.push_back(&merged.back());
  }
  return records;
}

}  // namespace

StepWriter::StepWriter(std::string dump_path, std::string dump_root, std::string task,
                       std::string level, DumpFormat format, TensorSaver* saver)
    : dump_path_(std::move(dump_path)),
      dump_root_(std::move(dump_root)),
      task_(std::move(task)),
      level_(std::move(level)),
      format_(format),
      saver_(saver),
      thread_(kStepsAhead) {}

void StepWriter::write_later(std::shared_ptr<FinishedStep> step,
                             std::function<void(FinishedStep&)> then) {
  last_posted_ = step->step;
  const bool waited = thread_.post([this, step = std::move(step), then = std::move(then)] {
    write(*step);
    then(*step);
  });
  if (waited && !said_behind_.exchange(true)) {
    QueuedLinesOnly queued;  // no GIL here: the next stop() or step() says it
    say_warning("the dump's writer is " + std::to_string(kStepsAhead + 1) +
                " steps behind the training (the disk is slower than the steps): each step now "
                "waits for room, so memory stays bounded (said once)");
  }
}

std::string StepWriter::write_and_wait(FinishedStep& step) {
  std::promise<std::string> written;
  std::future<std::string> error = written.get_future();
  thread_.post([&] {
    try {
      written.set_value(write(step));
    } catch (...) {
      written.set_exception(std::current_exception());  // raised here, as a write in place would
    }
  });
  return error.get();  // a wait on the future's own state: no lock of ours
}

std::string StepWriter::write(FinishedStep& step) {
  // Written without the GIL, on any thread: the caller delivers the lines once it has the GIL.
  QueuedLinesOnly queued;
  std::lock_guard<std::mutex> lock(mu_);
  std::string error;
  try {
    write_files(step);
    publish_folder(step.staging, dump_root_, step.folder);
    step.published = true;
  } catch (const WriteError& e) {
    error = e.what();
    // A step that cannot be completed leaves nothing of this write: no files that no dump.json
    // names, no empty folders. What an earlier write of the step published stays.
    discard_staging(step.staging);
  }
  if (step.report) {
    const std::string dump = error.empty()
                                 ? step.dir + "  (msprobe-cpp check " + step.dir + "/dump.json)"
                                 : "not written: " + error;
    say(LogLevel::Warning, step_summary(*step.report, step.judgements, step.step, step.rank, dump));
  }
  if (!error.empty() && !said_error_) {
    // The run being observed goes on: a full disk or a blocked folder costs the dump, not the
    // training.
    say(LogLevel::Error, "msprobe_cpp: the dump of step " + std::to_string(step.step) +
                             " could not be written: " + error);
    said_error_ = true;
  }
  return error;
}

void StepWriter::save_tensors(FinishedStep& step, const std::string& tensor_dir,
                              DumpHeader& header) {
  std::vector<std::pair<at::Tensor, std::string>> copies;
  for (StoredCall& c : step.calls) {
    for (auto& [tensor, name] : c.tensors)
      copies.emplace_back(std::move(tensor), tensor_dir + "/" + name);
    c.tensors.clear();
  }
  saver_->save_copies(std::move(copies));
  const std::string error = saver_->flush();
  if (!error.empty() && !said_error_) {
    // Training goes on: a full disk must not kill the run being observed.
    say(LogLevel::Error, "msprobe_cpp: saving tensors failed at step " + std::to_string(step.step) +
                             ": " + error +
                             "; tensor saving stops, and this step's dump keeps statistics only");
    said_error_ = true;
  }
  if (saver_->stopped()) {
    // A step's tensors are all saved or none: the files of a partial set are removed (which
    // also gives the statistics room), and dump.json names no file.
    for (StoredCall& c : step.calls) {
      for_each_entry(c.record, [&](Entry& e) {
        if (e.data_name.empty()) return;
        unlink((tensor_dir + "/" + e.data_name).c_str());
        e.data_name.clear();
      });
    }
    remove_empty_folders(tensor_dir, step.staging);
    return;
  }
  // Written again: the calls of the earlier write have their tensors in the published folder,
  // which this write replaces.
  const std::string published = dump_root_ + "/" + step.folder + "/" + kTensorFolder;
  bool made = false;
  for (StoredCall& c : step.calls) {
    for_each_entry(c.record, [&](Entry& e) {
      if (e.data_name.empty()) return;
      const std::string path = tensor_dir + "/" + e.data_name;
      if (access(path.c_str(), F_OK) == 0) return;
      const std::string earlier = published + "/" + e.data_name;
      if (step.again && access(earlier.c_str(), F_OK) == 0) {
        if (!made) make_dirs(tensor_dir, dump_root_);
        made = true;
        link_or_copy(earlier, path);
      } else {
        e.data_name.clear();  // its file went with an earlier write that failed
      }
    });
  }
  std::string given = dump_path_;
  while (given.size() > 1 && given.back() == '/') given.pop_back();
  header.dump_data_dir = given + "/" + step.folder + "/" + kTensorFolder;
}

void StepWriter::write_stacks(const FinishedStep& step) {
  const std::string& dir = step.staging;
  if (format_.grouped_stacks) {
    buffer_ = grouped_stacks_json(step, std::move(buffer_));
    write_file_atomic(dir + "/stack.json", buffer_);
    return;
  }
  JsonWriter stack(1, std::move(buffer_));
  stack.begin_object();
  for (size_t i = 0; i < step.calls.size(); ++i) {
    const std::string& name = step.calls[i].record.name;
    if (!stack_recorded(step.calls[i])) continue;
    stack.key(name);
    stack.begin_array();
    if (i < step.stacks.size() && step.stacks[i]) {
      for (const std::string& line : *step.stacks[i]) stack.value_string(line);
    }
    stack.end_array();
  }
  stack.end_object();
  buffer_ = stack.take();
  write_file_atomic(dir + "/stack.json", buffer_);
}

void StepWriter::write_construct(const FinishedStep& step) {
  const std::string& dir = step.staging;
  JsonWriter construct(1, std::move(buffer_));
  construct.begin_object();
  if (step.construct) {
    // On torch 1.x a module's backward record has, as msprobe writes it there, the backward of
    // the module call that enclosed its forward; API backward records have none. On 2.x the hooks
    // set both (backward_scope.h).
    std::unordered_map<std::string, const std::string*> forward_parents;
    std::unordered_set<std::string> regions;
    std::vector<size_t> order;
    if (format_.construct_in_start_order) {
      order = construct_order(step.calls);
    } else {
      for (size_t i = 0; i < step.calls.size(); ++i) order.push_back(i);
    }
    for (const size_t i : order) {
      const StoredCall& c = step.calls[i];
      const std::string& name = c.record.name;
      if (c.record.parameter_grads) continue;
      std::optional<std::string> parent = c.parent;
      // A region that is no module call (26.x's "optimizer"): a node of its own, named before
      // its first call.
      if (parent && !is_module_name(*parent) && regions.insert(*parent).second) {
        construct.key(*parent);
        construct.value_null();
      }
      if (!kBackwardScopes && !parent && is_module_name(name) && is_backward_name(name)) {
        auto it = forward_parents.find(forward_name_of(name));
        if (it != forward_parents.end() && it->second) parent = backward_name_of(*it->second);
      }
      if (!is_backward_name(name)) forward_parents[name] = c.parent ? &*c.parent : nullptr;
      construct.key(name);
      if (parent) {
        construct.value_string(*parent);
      } else {
        construct.value_null();
      }
    }
  }
  construct.end_object();
  buffer_ = construct.take();
  write_file_atomic(dir + "/construct.json", buffer_);
}

void StepWriter::write_files(FinishedStep& step) {
  const std::string& dir = step.staging;
  make_dirs(dir, dump_root_);
  DumpHeader header{task_, level_, std::nullopt, std::nullopt};
  if (format_.framework) header.framework = "pytorch";
  if (saver_) save_tensors(step, dir + "/" + kTensorFolder, header);

  if (format_.extra_info && !format_.debug_json) {
    write_stacks(step);
    write_construct(step);
  }
  if (step.report) {
    write_file_atomic(dir + "/overflow_report.json", step.report->to_json(1));
  }
  std::vector<CallRecord> merged;
  std::vector<const CallRecord*> records = dump_records(step.calls, format_, merged);
  if (!format_.records_in_dump_json) records.clear();
  buffer_ = dump_json(header, records, std::move(buffer_));
  write_file_atomic(dir + (format_.debug_json ? "/debug.json" : "/dump.json"), buffer_);
}

}  // namespace msprobe
