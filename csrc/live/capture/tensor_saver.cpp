#include "live/capture/tensor_saver.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include "core/output_files.h"

namespace msprobe {

TensorSaver::TensorSaver(std::string root, size_t max_pending_bytes)
    : root_(std::move(root)), max_pending_bytes_(max_pending_bytes), thread_([this] { run(); }) {}

TensorSaver::~TensorSaver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool TensorSaver::save(const at::Tensor& t, std::string path) {
  if (stopped_) return false;
  // A compact copy on the tensor's own device: cheap next to the training step, and the only
  // work done on the calling thread.
  return enqueue(t.detach().clone(at::MemoryFormat::Contiguous), std::move(path));
}

bool TensorSaver::save_copies(std::vector<std::pair<at::Tensor, std::string>> copies) {
  if (stopped_) return false;
  std::vector<Job> jobs;
  jobs.reserve(copies.size());
  for (auto& [copy, path] : copies) {
    at::Tensor compact = copy.is_contiguous() ? std::move(copy) : copy.contiguous();
    const size_t bytes = compact.numel() * compact.element_size();
    jobs.push_back({std::move(compact), std::move(path), bytes});
  }
  return enqueue_all(std::move(jobs));
}

bool TensorSaver::enqueue(at::Tensor snapshot, std::string path) {
  const size_t bytes = snapshot.numel() * snapshot.element_size();
  std::unique_lock<std::mutex> lock(mu_);
  push(lock, {std::move(snapshot), std::move(path), bytes});
  return true;
}

bool TensorSaver::enqueue_all(std::vector<Job> jobs) {
  if (jobs.empty()) return true;
  std::unique_lock<std::mutex> lock(mu_);
  for (Job& job : jobs) push(lock, std::move(job));
  return true;
}

void TensorSaver::push(std::unique_lock<std::mutex>& lock, Job job) {
  // Waits for room (the bound on what is pending); the wait lets the writer in.
  changed_.wait(
      lock, [&] { return pending_bytes_ == 0 || pending_bytes_ + job.bytes <= max_pending_bytes_; });
  pending_bytes_ += job.bytes;
  queue_.push_back(std::move(job));
  changed_.notify_all();
}

std::string TensorSaver::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return queue_.empty() && in_flight_ == 0; });
  std::string e;
  e.swap(error_);
  return e;
}

void TensorSaver::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    ++in_flight_;
    lock.unlock();
    std::string failure;
    try {
      const size_t slash = job.path.rfind('/');
      const std::string dir = job.path.substr(0, slash);
      // A step's folder is renamed away when published: a call that ends after that (another
      // thread's, still running at stop()) must not find the folder gone and stop all saving.
      if (dir != made_dir_ || access(dir.c_str(), F_OK) != 0) {
        make_dirs(dir, root_);
        made_dir_ = dir;
      }
      const std::vector<char> bytes = torch::jit::pickle_save(job.tensor.cpu());
      write_file_atomic(job.path, std::string(bytes.begin(), bytes.end()));
    } catch (const std::exception& e) {
      failure = e.what();
    }
    job.tensor.reset();
    lock.lock();
    --in_flight_;
    pending_bytes_ -= job.bytes;
    if (!failure.empty()) {
      if (error_.empty()) error_ = failure;
      // What is queued would only fill the disk further, or fail the same way.
      stopped_ = true;
      for (const Job& dropped : queue_) pending_bytes_ -= dropped.bytes;
      queue_.clear();
    }
    changed_.notify_all();
  }
}

}  // namespace msprobe
