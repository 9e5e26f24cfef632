#include "core/parallel_members.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/job_thread.h"
#include "core/json_cursor.h"
#include "core/text_file.h"

namespace msprobe {

// One region's text and what a thread made of it. The reading thread waits on `parsed_latch`.
struct MemberRegion {
  size_t offset = 0;
  std::string text;
  ParsedMembers parsed;
  std::exception_ptr error;  // not a syntax error (those end `parsed`): out of memory, say
  JobLatch parsed_latch;
};

MemberThreads::MemberThreads(size_t threads) {
  if (threads == 0) threads = std::min<size_t>(std::thread::hardware_concurrency(), 4);
  for (size_t i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<JobThread>(2, nullptr, nullptr));
  }
}

MemberThreads::~MemberThreads() = default;

std::shared_ptr<MemberRegion> MemberThreads::take() {
  if (spare_.empty()) return std::make_shared<MemberRegion>();
  std::shared_ptr<MemberRegion> region = std::move(spare_.back());
  spare_.pop_back();
  region->parsed_latch.reset();
  region->error = nullptr;
  return region;
}

void MemberThreads::give_back(std::shared_ptr<MemberRegion> region) {
  spare_.push_back(std::move(region));
}

namespace {

// "\n" and the indentation of the first member's line, then '"': where a member begins in this
// file's layout. Empty when the first member is not on a line of its own (a compact file).
std::string member_start_pattern(InputFile& file, size_t first) {
  char before[256];
  const size_t from = first > sizeof before ? first - sizeof before : 0;
  const size_t got = file.read_at(before, first - from, from);
  const std::string_view text(before, got);
  const size_t newline = text.rfind('\n');
  if (newline == std::string_view::npos || got != first - from) return "";
  return std::string(text.substr(newline)) + '"';
}

// Cuts the file, from a member's start on, into regions of about `bytes` that each end where the
// pattern says the next member begins.
class RegionCutter {
 public:
  RegionCutter(InputFile& file, size_t start, std::string pattern, size_t bytes)
      : file_(file), pattern_(std::move(pattern)), bytes_(std::max<size_t>(bytes, 1)),
        start_(start), read_to_(start) {}

  // The next region's text, which begins at start(), into `text` (whose storage is reused); false
  // once a region would pass the point where no member start was found within eight regions'
  // bytes (the rest is left to the sequential reader), or at the end of the file. The last region
  // holds the file's end.
  bool next(std::string& text) {
    if (done_) return false;
    size_t searched = std::min(bytes_, buffer_.size());
    for (;;) {
      const size_t at = find_member_start(searched);
      if (at != std::string::npos) return cut(at, text);
      searched = buffer_.size() > pattern_.size() ? buffer_.size() - pattern_.size() : 0;
      if (buffer_.size() >= 8 * bytes_ || !read_more()) break;
    }
    done_ = true;
    // At the end of the file the rest is the last region; elsewhere it is left unread.
    return eof_ && !buffer_.empty() && cut(buffer_.size(), text);
  }
  // Where the region next() returns next begins.
  size_t start() const { return start_; }

 private:
  // The key's offset in buffer_ of the first member start at or after `from`, past the first
  // `bytes_` of the buffer; npos if none is there yet.
  size_t find_member_start(size_t from) const {
    if (buffer_.size() < bytes_) return std::string::npos;
    const size_t hit = std::string_view(buffer_).find(pattern_, std::max(from, bytes_ - 1));
    return hit == std::string::npos ? hit : hit + pattern_.size() - 1;
  }

  bool read_more() {
    if (eof_) return false;
    constexpr size_t kChunk = size_t{64} << 10;
    const size_t held = buffer_.size();
    // Enough for a region and a pattern after it at first, a chunk at a time after that.
    buffer_.resize(held + (held < bytes_ ? bytes_ - held + pattern_.size() : kChunk));
    const size_t got = file_.read_at(&buffer_[held], buffer_.size() - held, read_to_);
    buffer_.resize(held + got);
    read_to_ += got;
    eof_ = got == 0;
    return got > 0;
  }

  bool cut(size_t at, std::string& text) {
    text.swap(buffer_);
    buffer_.assign(text, at);
    text.resize(at);
    start_ += at;
    return true;
  }

  InputFile& file_;
  const std::string pattern_;
  const size_t bytes_;
  size_t start_;    // of buffer_
  size_t read_to_;  // the file's offset after buffer_
  std::string buffer_;
  bool eof_ = false;
  bool done_ = false;
};

// Where the sequential reader goes on: after the members handed on so far.
struct Resume {
  size_t offset;
  bool at_member;
  TextPosition position;
};

// Regions parsed on threads, their members handed on in file order while every region before
// ended exactly where the next one begins.
class OrderedRegions {
 public:
  OrderedRegions(MemberThreads& threads, const MemberParser& parse,
                 const std::function<void(CallRecord&&)>& on_call, Resume start)
      : threads_(threads), parse_(parse), on_call_(on_call), resume_(start) {}
  // The jobs refer to `parse`: none may outlive this reading, even one left by an exception.
  ~OrderedRegions() {
    for (const std::shared_ptr<MemberRegion>& region : in_flight_) region->parsed_latch.wait();
  }
  OrderedRegions(const OrderedRegions&) = delete;
  OrderedRegions& operator=(const OrderedRegions&) = delete;

  // Parses `region` on a thread; hands on the oldest regions while too many are in flight.
  void add(std::shared_ptr<MemberRegion> region) {
    threads_.worker(added_++).post([region, &parse = parse_] {
      std::exception_ptr error;
      try {
        parse(region->text, region->offset, region->parsed);
      } catch (...) {
        error = std::current_exception();
      }
      region->error = error;
      region->parsed_latch.set();
    });
    in_flight_.push_back(std::move(region));
    while (in_flight_.size() >= 2 * threads_.size()) hand_on_oldest();
  }
  // Hands on what is still in flight; the regions after one that ended early are dropped.
  void finish() {
    while (!in_flight_.empty()) hand_on_oldest();
  }
  bool going() const { return going_; }
  const Resume& resume() const { return resume_; }
  size_t members() const { return members_; }

 private:
  void hand_on_oldest() {
    std::shared_ptr<MemberRegion> region = std::move(in_flight_.front());
    in_flight_.pop_front();
    region->parsed_latch.wait();
    if (!going_) return threads_.give_back(std::move(region));
    if (region->error) std::rethrow_exception(region->error);
    ParsedMembers& parsed = region->parsed;
    for (size_t i = 0; i < parsed.count; ++i) {
      on_call_(std::move(parsed.records[i]));
      drop_entries(parsed.records[i]);
    }
    members_ += parsed.count;
    const char* const text = region->text.data();
    const size_t end = parsed.complete ? region->text.size() : parsed.resume - region->offset;
    resume_.position.advance(text, text + end);
    resume_.offset = region->offset + end;
    // A complete region ends where the next member begins; any other where the reader goes on.
    resume_.at_member = parsed.complete || parsed.at_member;
    going_ = parsed.complete;
    threads_.give_back(std::move(region));
  }

  MemberThreads& threads_;
  const MemberParser& parse_;
  const std::function<void(CallRecord&&)>& on_call_;
  Resume resume_;
  size_t members_ = 0;
  bool going_ = true;
  size_t added_ = 0;
  std::deque<std::shared_ptr<MemberRegion>> in_flight_;
};

}  // namespace

void read_members_in_parallel(InputFile& file, JsonCursor& cur, const MemberParser& parse,
                              const std::function<void(CallRecord&&)>& on_call,
                              const ParallelOptions& options) {
  if (file.size_hint() < options.min_file_bytes || cur.peek() != '"') return;
  std::optional<MemberThreads> own;
  MemberThreads& threads = options.threads ? *options.threads : own.emplace(0);
  if (threads.size() < 2) return;
  const size_t first = cur.offset();
  std::string pattern = member_start_pattern(file, first);
  if (pattern.empty()) return;

  OrderedRegions regions(threads, parse, on_call, Resume{first, true, cur.position(first)});
  const size_t region_bytes = std::min(
      options.region_bytes, std::max(file.size_hint() / (4 * threads.size()), size_t{256} << 10));
  RegionCutter cutter(file, first, std::move(pattern), region_bytes);
  while (regions.going()) {
    std::shared_ptr<MemberRegion> region = threads.take();
    region->offset = cutter.start();
    if (!cutter.next(region->text)) break;
    regions.add(std::move(region));
  }
  regions.finish();
  if (options.members_read) *options.members_read = regions.members();
  const Resume& resume = regions.resume();
  if (resume.offset == first) return;
  cur.resume_members(resume.offset, resume.at_member, resume.position,
                     [&file, at = resume.offset](char* buf, size_t n) mutable {
                       const size_t got = file.read_at(buf, n, at);
                       at += got;
                       return got;
                     });
}

}  // namespace msprobe
