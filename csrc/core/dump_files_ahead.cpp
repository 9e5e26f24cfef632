#include "core/dump_files_ahead.h"

#include <exception>
#include <filesystem>
#include <system_error>

#include "core/job_thread.h"
#include "core/parallel_members.h"

namespace msprobe {

// One small file parsed on a thread: its records, then its header or its error. The records keep
// their lists' storage from one file to the next.
struct FileAhead {
  std::vector<CallRecord> records;
  size_t count = 0;  // this file's, the first of `records`
  DumpHeader header;
  std::exception_ptr error;
  JobLatch parsed_latch;
};

namespace {

// Whether `path` is a file small enough to be read on one thread (one that cannot be sized is
// read in its turn, where its error is said).
bool small_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return !ec && size < ParallelOptions().min_file_bytes;
}

}  // namespace

DumpFilesAhead::DumpFilesAhead(const std::vector<std::string>& files, MemberThreads& threads)
    : files_(files), threads_(threads), ahead_(files.size()) {}

// The jobs hold their FileAhead: one still running when this reader goes writes into it alone.
DumpFilesAhead::~DumpFilesAhead() = default;

void DumpFilesAhead::parse_ahead_of(size_t i) {
  // Two files a thread ahead: their records are held until their turn (a few MB each).
  const size_t limit = std::min(files_.size(), i + 1 + 2 * threads_.size());
  if (threads_.size() < 2) return;
  for (; posted_ < limit; ++posted_) {
    if (posted_ <= i || !small_file(files_[posted_])) continue;
    std::shared_ptr<FileAhead> file = std::make_shared<FileAhead>();
    if (!spare_.empty()) {
      file = std::move(spare_.back());
      spare_.pop_back();
      file->count = 0;
      file->error = nullptr;
      file->parsed_latch.reset();
    }
    ahead_[posted_] = file;
    threads_.worker(posted_).post([file, path = files_[posted_]] {
      try {
        // Swapped, not moved: the reader gets a record with storage back for its next call.
        file->header = read_dump_file(path, [&](CallRecord&& rec) {
          if (file->count == file->records.size()) file->records.emplace_back();
          std::swap(file->records[file->count++], rec);
        });
      } catch (...) {
        file->error = std::current_exception();
      }
      file->parsed_latch.set();
    });
  }
}

DumpHeader DumpFilesAhead::read(size_t i, const CallSink& on_call) {
  parse_ahead_of(i);
  std::shared_ptr<FileAhead> file = std::move(ahead_[i]);
  if (!file) {
    ParallelOptions parallel;
    parallel.threads = &threads_;
    return read_dump_file(files_[i], on_call, parallel);
  }
  file->parsed_latch.wait();
  for (size_t r = 0; r < file->count; ++r) {
    on_call(std::move(file->records[r]));
    drop_entries(file->records[r]);
  }
  spare_.push_back(file);
  if (file->error) std::rethrow_exception(file->error);
  return file->header;
}

}  // namespace msprobe
