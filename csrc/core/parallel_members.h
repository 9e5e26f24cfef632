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
#include <string_view>
#include <vector>

#include "core/record.h"

namespace msprobe {

class InputFile;
class JsonCursor;

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

struct ParallelOptions {
  size_t threads = 0;  // 0: one per core, at most 4; fewer than 2: none
  size_t region_bytes = size_t{512} << 10;
  size_t min_file_bytes = size_t{16} << 20;  // smaller files are read sequentially
  size_t* members_read = nullptr;            // if set: how many members the threads gave
};

// `cur` streams `file` and is inside the object, before its first member. Reads as many of its
// members as the file's layout allows on threads, hands them to `on_call` in order, and leaves
// `cur` after the last of them (untouched if none).
void read_members_in_parallel(InputFile& file, JsonCursor& cur, const MemberParser& parse,
                              const std::function<void(CallRecord&&)>& on_call,
                              const ParallelOptions& options);

}  // namespace msprobe
