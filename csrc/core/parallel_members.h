// The members of a dump's "data" object parsed on several threads and handed on in file order:
// `check` on a dump of many GB is bound by the parse (issue 56: 378 MB/s on one core), and the
// calls are independent of each other.
//
// The file is cut into regions at what looks like the start of a member: a line indented as the
// first member's line, beginning with '"' (a JSON string holds no raw newline, so in an indented
// file that is a key at the members' depth). Each region is parsed on a thread. A guess is only
// trusted once the region before it, whose start is known, was parsed to exactly that byte: then
// it is a member's start, by induction from the first. At the first region that does not end so
// (a wrong guess, a syntax error, the end of the object), the caller's own sequential cursor goes
// on from the last member read, and says what is wrong exactly as it would have alone. A compact
// file (no newlines) is read sequentially.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "core/record.h"

namespace msprobe {

class InputFile;
class JobThread;
class JsonCursor;
struct MemberRegion;

// What a thread made of one region: its whole members' records, in order, and where a sequential
// reader goes on after them.
struct ParsedMembers {
  // The first `count` are the region's; all keep their lists' storage for the next region parsed
  // into them (a record's allocations were most of a thread's time otherwise).
  std::vector<CallRecord> records;
  size_t count = 0;
  size_t resume = 0;       // just after the last whole member, or the region's start if none
  bool at_member = true;   // `resume` is where a member begins (its ',' read), not after one
  bool complete = false;   // whole members to the region's end, each followed by ','
};

// Parses the members in `text`, which is at `offset` of the file and begins with a member's key,
// into `out` (whose records are refilled).
using MemberParser =
    std::function<void(std::string_view text, size_t offset, ParsedMembers& out)>;

// The threads and the regions' storage, kept from one file to the next: `check` reads a run's
// folder a file at a time, and new threads with fresh memory for each (44 000 page faults for
// 100 files of 0.4 MB) cost more than the parse they share. The threads start with the first
// region given to them.
class MemberThreads {
 public:
  explicit MemberThreads(size_t threads);  // 0: one per core, at most 4
  ~MemberThreads();
  MemberThreads(const MemberThreads&) = delete;
  MemberThreads& operator=(const MemberThreads&) = delete;

  size_t size() const { return workers_.size(); }
  JobThread& worker(size_t i) { return *workers_[i % workers_.size()]; }
  // A region to fill: one given back, with its storage, or a new one.
  std::shared_ptr<MemberRegion> take();
  void give_back(std::shared_ptr<MemberRegion> region);

 private:
  std::vector<std::unique_ptr<JobThread>> workers_;
  std::vector<std::shared_ptr<MemberRegion>> spare_;
};

struct ParallelOptions {
  MemberThreads* threads = nullptr;  // none: threads for this file alone (one per core, at most 4)
  // At most; a file of less than four regions a thread gets smaller ones, of 256 KiB at least
  // (a thread's hand-over costs tens of microseconds; a region of 256 KiB is about 0.6 ms of parse).
  size_t region_bytes = size_t{512} << 10;
  // Smaller files are read on one thread: a small real model's dump of one step (0.4 MB) gains
  // nothing from being cut in two.
  size_t min_file_bytes = size_t{1} << 20;
  size_t* members_read = nullptr;            // if set: how many members the threads gave
};

// `cur` streams `file` and is inside the object, before its first member. Reads as many of its
// members as the file's layout allows on threads, hands them to `on_call` in order, and leaves
// `cur` after the last of them (untouched if none).
void read_members_in_parallel(InputFile& file, JsonCursor& cur, const MemberParser& parse,
                              const std::function<void(CallRecord&&)>& on_call,
                              const ParallelOptions& options);

}  // namespace msprobe
