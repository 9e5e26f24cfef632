// Helpers shared by the core tests: the message a call throws, a private temp folder, and builders
// for test records in msprobe's dump.json text form, so each test reads like a dump.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/dump_reader.h"
#include "core/dump_writer.h"
#include "core/json_writer.h"
#include "core/json_cursor.h"
#include "core/record.h"

namespace msprobe::testing {

// What a reading produced, in a form two readings can be compared by.
inline std::string reading_outcome(const std::function<DumpHeader(const CallSink&)>& read) {
  std::string out;
  try {
    DumpHeader h = read([&](CallRecord&& r) {
      JsonWriter w(0);
      write_record(w, r);
      out += r.name + "=" + w.str() + "\n";
    });
    return h.task + "|" + h.level + "|" + h.dump_data_dir.value_or("(none)") + "\n" + out;
  } catch (const DumpError& e) {
    return std::string("error: ") + e.what();
  }
}

// A cursor that reads `text` at most `chunk` bytes at a time, as a file is read: the streamed
// side of a reader's test against the whole text. `text` must outlive the cursor.
inline JsonCursor chunked_cursor(const std::string& text, size_t chunk) {
  auto at = std::make_shared<size_t>(0);
  return JsonCursor(
      [&text, at](char* buf, size_t n) {
        const size_t take = std::min(n, text.size() - *at);
        std::copy_n(text.data() + *at, take, buf);
        *at += take;
        return take;
      },
      chunk);
}

// What error_of returns when nothing was thrown: a missing rejection then shows in the
// EXPECT_EQ's diff next to the message that was expected, not as a bare "no exception".
inline const std::string kAccepted = "<accepted>";

// `message(e)` of the E that `call()` throws, or kAccepted. Any other exception propagates, so a
// wrong kind of error fails the test instead of passing for a rejection.
template <class E, class Call, class Message>
std::string error_of(Call&& call, Message&& message) {
  try {
    std::forward<Call>(call)();
  } catch (const E& e) {
    return message(e);
  }
  return kAccepted;
}

template <class E, class Call>
std::string error_of(Call&& call) {
  return error_of<E>(std::forward<Call>(call), [](const E& e) { return std::string(e.what()); });
}

// A fresh folder of its own under the system temp dir (mkdtemp: no other run's leftovers, no
// collision between tests run in parallel), removed with everything in it at scope exit.
// A file's whole text ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "msprobe_test_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // Writes `text` byte for byte to `name` in the folder; returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// A float32 tensor entry; pass "NaN", "Infinity", "-Infinity" or a number as text.
inline std::string T(const std::string& max, const std::string& min = "0.0",
                     const std::string& mean = "0.5", const std::string& norm = "1.0") {
  return R"({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": )" + max +
         R"(, "Min": )" + min + R"(, "Mean": )" + mean + R"(, "Norm": )" + norm +
         R"(, "requires_grad": false})";
}

inline std::string clean() {
  return T("1.0");
}
inline std::string nan_t() {
  return T("NaN", "NaN", "NaN", "NaN");
}
inline std::string inf_t() {
  return T("Infinity", "0.0", "Infinity", "Infinity");
}
inline std::string norm_t(const std::string& norm) {
  return T("1.0", "0.0", "0.5", norm);
}
inline std::string F(const std::string& v) {
  return R"({"type": "float", "value": )" + v + "}";
}

// One forward record: `args` and `outs` are comma-separated entry texts; kwargs a JSON object body.
inline std::string fwd(const std::string& name, const std::string& args, const std::string& outs,
                       const std::string& kwargs = "") {
  return "\"" + name + "\": {\"input_args\": [" + args + "], \"input_kwargs\": {" + kwargs +
         "}, \"output\": [" + outs + "]}";
}

inline std::string bwd(const std::string& name, const std::string& grads_in,
                       const std::string& grads_out) {
  return "\"" + name + "\": {\"input\": [" + grads_in + "], \"output\": [" + grads_out + "]}";
}

inline std::vector<CallRecord> records(const std::vector<std::string>& entries) {
  std::string text = R"({"task": "statistics", "level": "L1", "dump_data_dir": null, "data": {)";
  for (size_t i = 0; i < entries.size(); ++i) text += (i ? ", " : "") + entries[i];
  text += "}}";
  std::vector<CallRecord> out;
  read_dump(text, "test.json", [&](CallRecord&& r) { out.push_back(std::move(r)); });
  return out;
}

inline CallRecord record(const std::string& entry) {
  return records({entry}).at(0);
}

}  // namespace msprobe::testing
