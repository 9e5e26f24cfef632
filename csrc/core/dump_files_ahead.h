// The dump files of a folder read in order, the small ones parsed ahead on the MemberThreads
// while the caller judges the one before: a run's folder is a file per step (0.4 MB for a small
// model), each too small to cut into regions (parallel_members.h), and `check` read them on one
// core.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dump_reader.h"

namespace msprobe {

struct FileAhead;

class DumpFilesAhead {
 public:
  // `files` and `threads` must outlive this reader.
  DumpFilesAhead(const std::vector<std::string>& files, MemberThreads& threads);
  ~DumpFilesAhead();
  DumpFilesAhead(const DumpFilesAhead&) = delete;
  DumpFilesAhead& operator=(const DumpFilesAhead&) = delete;

  // files[i], read as read_dump_file reads it: its records to `on_call`, in order, then its
  // header, or its error after the records before it. Called for i = 0, 1, 2, ... in turn.
  DumpHeader read(size_t i, const CallSink& on_call);

 private:
  void parse_ahead_of(size_t i);

  const std::vector<std::string>& files_;
  MemberThreads& threads_;
  std::vector<std::shared_ptr<FileAhead>> ahead_;  // by file; empty where not parsed ahead
  std::vector<std::shared_ptr<FileAhead>> spare_;  // read already: their records' storage reused
  size_t posted_ = 0;                              // files considered for parsing ahead
};

}  // namespace msprobe
