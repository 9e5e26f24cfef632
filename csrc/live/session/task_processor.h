// The task processors: the session owns the one its config's task selects, made from the table
// in task_registry.cpp (docs/architecture.md, "Adding a task"), as msprobe 26.x's
// DataProcessorFactory registers each task's processor. The recording tasks (statistics, tensor,
// structure, overflow_check) are the session's own pipeline (Session::add) and register none;
// a task with work of its own (grad_probe, free_benchmark) registers a processor, which uses the
// session's shared parts (its selection, its said-once lines, the step/rank gate, the name
// makers of core/record.h) and keeps no global slot.
#pragma once

#include <memory>

#include "core/step_rank_gate.h"

namespace msprobe {

struct Config;
class Session;
class CallChecker;

class TaskProcessor {
 public:
  virtual ~TaskProcessor() = default;
  // The processor that runs the selected API calls itself instead of recording them hands the
  // API hooks its checker; null for the others.
  virtual CallChecker* call_checker() { return nullptr; }
};

// What a processor is made from. `session` is weak: the session owns the processor, and a
// processor that reaches it from another thread (an autograd hook) asks whether it is still there.
struct TaskParts {
  const Config& config;
  std::weak_ptr<Session> session;
  StepRankGate steps_ranks;
};

// Makes the processor of `session`'s task (none for the recording tasks) and hands it to the
// session's hooks. Called once, as the session is made.
void install_task_processor(const std::shared_ptr<Session>& session);

}  // namespace msprobe
