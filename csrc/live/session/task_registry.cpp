// The registrations: one line per task with a processor of its own.
#include "core/config.h"
#include "live/free_benchmark/free_benchmark.h"
#include "live/grad_probe/grad_monitor.h"
#include "live/monitor/trainer_monitor.h"
#include "live/session/session.h"
#include "live/session/task_processor.h"

namespace msprobe {
namespace {

using MakeProcessor = std::shared_ptr<TaskProcessor> (*)(const TaskParts&);

template <typename Processor>
std::shared_ptr<TaskProcessor> make(const TaskParts& parts) {
  return std::make_shared<Processor>(parts);
}

struct TaskRegistration {
  Task task;
  MakeProcessor make;
};

constexpr TaskRegistration kRegistrations[] = {
    {Task::GradProbe, &make<GradMonitor>},
    {Task::FreeBenchmark, &make<FreeBenchmark>},
    {Task::Monitor, &make<TrainerMonitor>},
};

}  // namespace

void install_task_processor(const std::shared_ptr<Session>& session) {
  const Config& config = session->config();
  for (const TaskRegistration& r : kRegistrations) {
    if (r.task != config.task) continue;
    HookContext& hooks = session->hooks();
    hooks.processor = r.make(TaskParts{config, session, StepRankGate::of(config)});
    hooks.call_checker = hooks.processor->call_checker();
  }
}

}  // namespace msprobe
