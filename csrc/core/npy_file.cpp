#include "core/npy_file.h"

#include <stdexcept>

#include "core/text_file.h"

namespace msprobe {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kPreamble = 10;  // magic, version (2 bytes), header length (2 bytes)
// numpy leaves room for the first axis to grow to this many digits without moving the data.
constexpr size_t kGrowthAxisDigits = 21;
constexpr size_t kAlign = 64;

std::string shape_tuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Fortran-order elements put in C order: the element at index (i0, ..., ik) is at
// i0 + s0 * (i1 + s1 * (...)) in the Fortran data.
std::string fortran_to_c_order(const std::vector<int64_t>& shape, const std::string& values) {
  std::string out(values.size(), '\0');
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t c = 0; c < values.size(); ++c) {
    int64_t f = 0;
    for (size_t k = shape.size(); k-- > 0;) f = f * shape[k] + index[k];
    out[c] = values[static_cast<size_t>(f)];
    for (size_t k = shape.size(); k-- > 0;) {  // the next C index
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

[[noreturn]] void not_bool_npy(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": not a bool .npy file (" + what + ")");
}

// The value of `'key': ` in the header dict, up to the next ", '" or the closing brace.
std::string header_value(const std::string& header, const std::string& key,
                         const std::string& path) {
  const std::string tag = "'" + key + "': ";
  const size_t at = header.find(tag);
  if (at == std::string::npos) not_bool_npy(path, "no " + key + " in its header");
  const size_t from = at + tag.size();
  const size_t to = header[from] == '(' ? header.find(')', from) + 1 : header.find(',', from);
  return header.substr(from, to - from);
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& path) {
  std::vector<int64_t> shape;
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    not_bool_npy(path, "shape " + text);
  std::string number;
  for (size_t i = 1; i + 1 <= text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      number += c;
    } else if (c == ',' || c == ')') {
      if (!number.empty()) shape.push_back(std::stoll(number));
      number.clear();
    } else if (c != ' ' && c != 'L') {
      not_bool_npy(path, "shape " + text);
    }
  }
  return shape;
}

}  // namespace

std::string npy_bool_bytes(const std::vector<int64_t>& shape, const std::string& values,
                           bool fortran) {
  std::string header = std::string("{'descr': '|b1', 'fortran_order': ") +
                       (fortran ? "True" : "False") + ", 'shape': " + shape_tuple(shape) + ", }";
  if (!shape.empty()) {
    const size_t digits = std::to_string(fortran ? shape.back() : shape[0]).size();
    if (digits < kGrowthAxisDigits) header += std::string(kGrowthAxisDigits - digits, ' ');
  }
  const size_t unpadded = kPreamble + header.size() + 1;  // + the closing newline
  header += std::string(kAlign - unpadded % kAlign, ' ') + "\n";
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  return out + header + values;
}

BoolArray read_npy_bool(const std::string& path) {
  const std::string bytes = read_text_file(path);
  if (bytes.size() < kPreamble || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    not_bool_npy(path, "no NumPy magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_size = 0, data_at = 0;
  if (major == 1) {
    header_size = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    data_at = kPreamble + header_size;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) not_bool_npy(path, "cut short");
    for (int i = 0; i < 4; ++i)
      header_size |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    data_at = 12 + header_size;
  } else {
    not_bool_npy(path, "format version " + std::to_string(major));
  }
  if (bytes.size() < data_at) not_bool_npy(path, "cut short");
  const std::string header = bytes.substr(data_at - header_size, header_size);
  const std::string descr = header_value(header, "descr", path);
  if (descr != "'|b1'") not_bool_npy(path, "dtype " + descr);
  const std::string order = header_value(header, "fortran_order", path);
  if (order != "False" && order != "True") not_bool_npy(path, "fortran_order " + order);
  BoolArray out;
  out.shape = parse_shape(header_value(header, "shape", path), path);
  const int64_t n = element_count(out.shape);
  if (n < 0 || bytes.size() - data_at != static_cast<size_t>(n))
    not_bool_npy(path, "holds " + std::to_string(bytes.size() - data_at) + " bytes of data for " +
                           std::to_string(n) + " elements");
  out.values = bytes.substr(data_at);
  if (order == "True") out.values = fortran_to_c_order(out.shape, out.values);
  return out;
}

}  // namespace msprobe
