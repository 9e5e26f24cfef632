// Turns a finished step into its files (docs/formats.md): tensors, stack.json, construct.json,
// overflow_report.json and dump.json, built in a folder of their own and published whole
// (core/step_folders.h), so a step folder that exists has them all, even after a kill -9.
// A function of its inputs: it runs with no session lock held and without the GIL.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/dump_format.h"
#include "core/overflow_facts.h"
#include "core/report.h"
#include "live/capture/call_stack.h"
#include "live/capture/tensor_saver.h"
#include "live/session/step_state.h"
#include "live/session/write_thread.h"

namespace msprobe {

struct FinishedStep {
  int64_t step = 0;
  int rank = -1;
  std::string dir;     // <dump_root>/step<S>/rank<R>
  std::string folder;  // step<S>/rank<R>
  // Where this write is built (core/step_folders.h): the tensors saved as the calls happened are
  // there already.
  std::string staging;
  bool again = false;      // an earlier write of the step was published in this session
  bool published = false;  // set by write()
  std::vector<StoredCall> calls;
  std::vector<StackLines> stacks;  // parallel to calls; null for backward records
  bool construct = false;          // construct.json names each call's enclosing module
  // Task overflow_check: the report, and how each of its findings was taken.
  std::optional<Report> report;
  std::vector<Judgement> judgements;
};

class StepWriter {
 public:
  // `dump_path`: as the user gave it, for dump.json's dump_data_dir (relative stays relative, as
  // msprobe writes it); `dump_root`: the same made absolute. `saver`: where kept tensors go (null
  // under task statistics).
  StepWriter(std::string dump_path, std::string dump_root, std::string task, std::string level,
             DumpFormat format, TensorSaver* saver);

  // Writes `step`'s files; under overflow_check also the one-screen summary on stderr. A step
  // that cannot be completed (a full disk) leaves nothing and returns why ("" when written); the
  // first such failure of a session is said on stderr. Thread-safe.
  std::string write(FinishedStep& step);
  // write() on the write thread, waited for: a stop's files are on disk when this returns, and
  // the stopping thread never formats or writes them.
  std::string write_and_wait(FinishedStep& step);
  // Steps that may wait for the write thread beside the one it writes (async_dump): one more
  // waits for room, and says so once (docs/config.md#async_dump).
  static constexpr size_t kStepsAhead = 4;

  // async_dump: writes `step` on the write thread and then calls `then(step)` there; returns at
  // once, or once there is room (write_thread.h).
  void write_later(std::shared_ptr<FinishedStep> step, std::function<void(FinishedStep&)> then);
  // Returns once every step handed over is written; drain_step: only if `step` was handed over
  // and may still be in writing.
  void drain() { thread_.drain(); }
  void drain_step(int64_t step) {
    if (last_posted_.load() == step) thread_.drain();
  }

 private:
  void write_files(FinishedStep& step);
  void write_stacks(const FinishedStep& step);
  void write_construct(const FinishedStep& step);
  void save_tensors(FinishedStep& step, const std::string& tensor_dir, DumpHeader& header);

  const std::string dump_path_, dump_root_;
  const std::string task_, level_;
  const DumpFormat format_;
  TensorSaver* const saver_;
  std::mutex mu_;            // one step at a time; guards the members below
  std::string buffer_;       // the files' text, its capacity kept from step to step
  bool said_error_ = false;  // a failed write or save is said once per session
  std::atomic<bool> said_behind_{false};  // the writer's falling behind is said once
  std::atomic<int64_t> last_posted_{-1};
  WriteThread thread_;  // last: its destructor finishes the jobs while the rest still lives
};

}  // namespace msprobe
