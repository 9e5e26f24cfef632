// read_dump_file with the calls parsed on threads (parallel_members.h) gives what one thread
// gives: the same records in the same order, the same header, and for a broken file the same
// message at the same line and column, whatever the file's layout and wherever regions fall.
#include <gtest/gtest.h>

#include <regex>
#include <stdexcept>
#include <string>

#include "core/dump_files_ahead.h"
#include "core/dump_reader.h"
#include "core/parallel_members.h"
#include "core/text_file.h"
#include "test_util.h"

using namespace msprobe;
using namespace msprobe::testing;

namespace {

std::string fixture(const std::string& dir) {
  return read_text_file(std::string(MSPROBE_FIXTURES_DIR) + "/" + dir + "/dump.json");
}

// The text's reading by one thread in memory, and by threads from a file, `region` bytes a
// region; `members` is how many calls the threads gave.
struct Readings {
  std::string sequential;
  std::string parallel;
  size_t members = 0;
};

Readings read_both(const TempDir& dir, const std::string& text, size_t region) {
  Readings r;
  r.sequential = reading_outcome(
      [&](const CallSink& sink) { return read_dump(std::string_view(text), dir.path() / "dump.json", sink); });
  const std::string path = dir.write("dump.json", text);
  MemberThreads threads(2);
  ParallelOptions options;
  options.threads = &threads;
  options.region_bytes = region;
  options.min_file_bytes = 0;
  options.members_read = &r.members;
  r.parallel = reading_outcome([&](const CallSink& sink) { return read_dump_file(path, sink, options); });
  return r;
}

// Every call of a real dump, repeated so that there are many regions.
std::string many_calls(const std::string& dump, int copies) {
  const size_t open = dump.find("\"data\": {") + 9;
  const size_t close = dump.rfind('}', dump.rfind('}') - 1);  // "data"'s own
  const std::string body = dump.substr(open, close - open);
  std::string calls;
  for (int i = 0; i < copies; ++i) {
    std::string copy = std::regex_replace(body, std::regex(R"(\.(\d+)\.(forward|backward)\")"),
                                          "." + std::to_string(i) + ".$1.$2\"");
    calls += (i ? "," : "") + copy.substr(0, copy.find_last_not_of(" \n") + 1);
  }
  return dump.substr(0, open) + calls + "\n " + dump.substr(close);
}

const size_t kRegions[] = {1, 2, 7, 64, 300, 1000, 4096};

}  // namespace

TEST(ParallelMembers, ReadsEveryFixtureAsOneThreadDoes) {
  TempDir dir;
  for (const char* name : {"mlp_statistics_L1", "mlp_overflow_check_L1", "mlp_statistics_mix",
                           "block_stat_L1/step0/rank", "block_tensor_L1/step0/rank",
                           "block_md5_L1/step0/rank"}) {
    const std::string text = many_calls(fixture(name), 5);
    for (size_t region : kRegions) {
      const Readings r = read_both(dir, text, region);
      EXPECT_EQ(r.parallel, r.sequential) << name << ", regions of " << region;
      EXPECT_GT(r.members, 0u) << name << ", regions of " << region;
    }
  }
}

TEST(ParallelMembers, EveryLayoutReadsTheSame) {
  TempDir dir;
  const std::string indented = many_calls(fixture("mlp_statistics_L1"), 4);
  const std::string crlf = std::regex_replace(indented, std::regex("\n"), "\r\n");
  const std::string wide = std::regex_replace(indented, std::regex("\n( +)"), "\n$1$1$1$1");
  const std::string compact = std::regex_replace(indented, std::regex("\n *"), "");
  // "data" before the header's other keys, and a call whose arguments are on lines indented as
  // calls are: a region may begin at such a line, which is not a call.
  const std::string data_first =
      "{\n \"data\": {\n  \"A.0.forward\": {\"input_args\": [\n  {\"type\": \"int\", \"value\": 1}\n]},\n"
      "  \"B.0.forward\": {\"output\": [\n  \"text\",\n  null]}\n },\n \"task\": \"statistics\",\n"
      " \"level\": \"L1\"\n}\n";
  for (const auto& [layout, text, threaded] :
       {std::tuple{"crlf", crlf, true}, {"indent 4", wide, true}, {"compact", compact, false},
        {"data first", data_first, true}}) {
    for (size_t region : kRegions) {
      const Readings r = read_both(dir, text, region);
      EXPECT_EQ(r.parallel, r.sequential) << layout << ", regions of " << region;
      if (!threaded) {
        EXPECT_EQ(r.members, 0u) << layout;
      }
    }
  }
}

TEST(ParallelMembers, ABrokenFileSaysWhatOneThreadSays) {
  TempDir dir;
  const std::string text = many_calls(fixture("mlp_statistics_mix"), 2);
  size_t errors = 0;
  for (size_t at = 0; at < text.size(); at += 211) {
    for (const char bad : {'x', '}', ']', ',', '"'}) {
      std::string broken = text;
      broken[at] = bad;
      const Readings r = read_both(dir, broken, 300);
      ASSERT_EQ(r.parallel, r.sequential) << "'" << bad << "' at " << at;
      errors += r.sequential.rfind("error: ", 0) == 0;
    }
    const Readings cut = read_both(dir, text.substr(0, at), 300);
    ASSERT_EQ(cut.parallel, cut.sequential) << "cut at " << at;
  }
  EXPECT_GT(errors, 150u);  // the corruptions were read as errors, mostly
}

TEST(ParallelMembers, ASinkThatThrowsEndsTheReading) {
  TempDir dir;
  const std::string path = dir.write("dump.json", many_calls(fixture("mlp_statistics_L1"), 20));
  MemberThreads threads(3);  // one set for every reading, as check keeps it for a folder
  ParallelOptions options;
  options.threads = &threads;
  options.region_bytes = 100;
  options.min_file_bytes = 0;
  for (int stop_after : {0, 1, 5, 40}) {
    int calls = 0;
    EXPECT_THROW(read_dump_file(path,
                                [&](CallRecord&&) {
                                  if (calls++ == stop_after) throw std::runtime_error("enough");
                                },
                                options),
                 std::runtime_error);
    EXPECT_EQ(calls, stop_after + 1);
  }
}

TEST(ParallelMembers, ASmallFileOrOneThreadReadsSequentially) {
  TempDir dir;
  const std::string path = dir.write("dump.json", many_calls(fixture("mlp_statistics_L1"), 3));
  for (const auto& [threads, min_file] : {std::pair<size_t, size_t>{1, 0}, {2, 1 << 30}}) {
    size_t members = 0;
    MemberThreads pool(threads);
    ParallelOptions options;
    options.threads = &pool;
    options.min_file_bytes = min_file;
    options.members_read = &members;
    size_t calls = 0;
    read_dump_file(path, [&](CallRecord&&) { ++calls; }, options);
    EXPECT_EQ(members, 0u);
    EXPECT_GT(calls, 0u);
  }
}

// A folder's small files parsed ahead on the threads (dump_files_ahead.h) read as one thread
// reads them one after the other: each file's records and header, and a broken file's error
// after the records before it, in its turn.
TEST(DumpFilesAhead, ReadsEachFileAsOneThreadDoes) {
  TempDir dir;
  const std::string calls = many_calls(fixture("mlp_statistics_mix"), 2);
  std::vector<std::string> files;
  for (int i = 0; i < 12; ++i) {
    std::string text = calls;
    if (i == 5) text = text.substr(0, text.size() / 2);                    // cut short
    if (i == 8) text.replace(text.find("\"Max\": "), 7, "\"Max\": [");  // a list where a number goes
    if (i == 10) text = "";                                                 // empty
    files.push_back(dir.write("dump" + std::to_string(i) + ".json", text));
  }
  files.push_back((dir / "missing.json").string());
  for (size_t threads : {1, 2, 3}) {
    MemberThreads pool(threads);
    DumpFilesAhead ahead(files, pool);
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string alone =
          reading_outcome([&](const CallSink& sink) { return read_dump_file(files[i], sink); });
      const std::string read_ahead =
          reading_outcome([&](const CallSink& sink) { return ahead.read(i, sink); });
      EXPECT_EQ(read_ahead, alone) << "file " << i << ", " << threads << " threads";
    }
  }
}

TEST(DumpFilesAhead, AReaderLeftEarlyLeavesNoWorkBehind) {
  TempDir dir;
  std::vector<std::string> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back(dir.write("dump" + std::to_string(i) + ".json",
                              many_calls(fixture("mlp_statistics_L1"), 3)));
  }
  MemberThreads pool(2);
  {
    DumpFilesAhead ahead(files, pool);
    EXPECT_THROW(ahead.read(0, [](CallRecord&&) { throw std::runtime_error("stop"); }),
                 std::runtime_error);
  }
  // The pool still works for the next reader.
  DumpFilesAhead again(files, pool);
  size_t calls = 0;
  again.read(0, [&](CallRecord&&) { ++calls; });
  EXPECT_GT(calls, 0u);
}
