// Builders for test records in msprobe's dump.json text form, so each test reads like a dump.
#pragma once

#include <string>
#include <vector>

#include "core/dump_reader.h"
#include "core/record.h"

namespace msprobe::testing {

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
