// libFuzzer target: msprobe-cpp check reads dump.json files it did not write, so any bytes must
// end in records or a DumpError, never a crash, a hang or a sanitizer report. The text is read
// twice, in memory and streamed in small chunks, and both readings must agree exactly (as
// tests/cpp/test_dump_reader.cpp requires of its own cases).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "core/dump_reader.h"
#include "core/dump_writer.h"
#include "core/json_cursor.h"
#include "core/json_writer.h"

namespace {

using msprobe::CallRecord;
using msprobe::CallSink;
using msprobe::DumpHeader;

// Header, records and error of one reading, as text two readings can be compared by.
std::string outcome(const std::function<DumpHeader(const CallSink&)>& read) {
  std::string out;
  try {
    DumpHeader h = read([&](CallRecord&& r) {
      msprobe::JsonWriter w(0);
      msprobe::write_record(w, r);
      out += r.name + "=" + w.str() + "\n";
    });
    return h.task + "|" + h.level + "|" + h.dump_data_dir.value_or("(none)") + "\n" + out;
  } catch (const msprobe::DumpError& e) {
    // The expected rejection of a bad file; anything else escapes and is a finding.
    return out + "error: " + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A view of the fuzzer's own buffer, not a copy: there is no NUL after it, so ASan sees any
  // read past the end of the text.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string whole =
      outcome([&](const CallSink& sink) { return msprobe::read_dump(text, "dump.json", sink); });

  // Chunk sizes that split tokens everywhere; which one follows from the length, so the same
  // input always replays the same way.
  static constexpr size_t kChunks[] = {1, 2, 3, 7, 64};
  const size_t chunk = kChunks[size % (sizeof(kChunks) / sizeof(kChunks[0]))];
  const std::string streamed = outcome([&](const CallSink& sink) {
    size_t at = 0;
    msprobe::JsonCursor cur(
        [&](char* buf, size_t n) {
          const size_t take = std::min(n, size - at);
          std::copy_n(text.data() + at, take, buf);
          at += take;
          return take;
        },
        chunk);
    return msprobe::read_dump(cur, "dump.json", sink);
  });
  if (streamed != whole) {
    std::fprintf(stderr,
                 "streamed reading (chunk %zu) differs:\n--- in memory\n%s\n--- streamed\n%s\n",
                 chunk, whole.c_str(), streamed.c_str());
    std::abort();
  }
  return 0;
}
