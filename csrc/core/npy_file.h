// NumPy's .npy format (version 1.0) for boolean arrays: grad_probe's direction files, written as
// numpy.save writes them (the same header padding, so the bytes are equal) and read back by
// grad-compare, msprobe's files included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

// The file's bytes for a C-order bool array of `shape`; `values` holds one 0/1 byte per element.
std::string npy_bool_bytes(const std::vector<int64_t>& shape, const std::string& values);

struct BoolArray {
  std::vector<int64_t> shape;
  std::string values;  // one 0/1 byte per element, C order
};

// Reads a bool .npy file; anything else (another dtype, Fortran order, a cut-short file) is an
// std::runtime_error naming the file and what it holds.
BoolArray read_npy_bool(const std::string& path);

}  // namespace msprobe
