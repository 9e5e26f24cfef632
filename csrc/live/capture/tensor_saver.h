// Task `tensor`: saves tensors as .pt files that torch.load reads, on a writer thread so that the
// training thread only pays for a snapshot copy. The queue is bounded by bytes: a producer that
// gets ahead of the disk waits rather than letting memory grow without limit.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace msprobe {

class TensorSaver {
 public:
  // `root`: dump_path; below it the saver follows no symbolic link where it makes a folder.
  explicit TensorSaver(std::string root = "", size_t max_pending_bytes = size_t{512} << 20);
  ~TensorSaver();  // writes what is pending, then stops the thread
  TensorSaver(const TensorSaver&) = delete;
  TensorSaver& operator=(const TensorSaver&) = delete;

  // Snapshots `t` now (so a later in-place change does not reach the file) and queues it. Once a
  // write has failed (a full disk, most likely) saving stops: false, and nothing is queued.
  bool save(const at::Tensor& t, std::string path);
  // Queues each of `copies`: (a private copy nobody else writes, its path), a step's flagged
  // evidence, copied when its call was flagged: not copied again. One lock for them all.
  bool save_copies(std::vector<std::pair<at::Tensor, std::string>> copies);
  bool stopped() const { return stopped_; }
  // Blocks until every queued tensor is on disk; returns the first error since the last flush
  // ("" when none), so it can be reported once without stopping the training.
  std::string flush();

 private:
  struct Job {
    at::Tensor tensor;
    std::string path;
    size_t bytes;
  };
  void run();
  bool enqueue(at::Tensor snapshot, std::string path);
  bool enqueue_all(std::vector<Job> jobs);
  void push(std::unique_lock<std::mutex>& lock, Job job);  // mu_ held

  const std::string root_;
  const size_t max_pending_bytes_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  size_t pending_bytes_ = 0;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stopped_{false};
  std::string error_;
  std::string made_dir_;  // writer thread only
  std::thread thread_;
};

}  // namespace msprobe
