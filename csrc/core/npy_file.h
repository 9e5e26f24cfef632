// NumPy's .npy format (version 1.0) for boolean arrays: grad_probe's direction files, written as
// numpy.save writes them (the same header padding, so the bytes are equal) and read back by
// grad-compare, msprobe's files included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msprobe {

// The file's bytes for a bool array of `shape`; `values` holds one 0/1 byte per element, in C
// order, or in Fortran order when `fortran` (numpy saves an array that is Fortran-contiguous and
// not C-contiguous, a transposed one, that way).
std::string npy_bool_bytes(const std::vector<int64_t>& shape, const std::string& values,
                           bool fortran = false);

struct BoolArray {
  std::vector<int64_t> shape;
  std::string values;  // one 0/1 byte per element, C order
};

// Reads a bool .npy file (C or Fortran order); anything else (another dtype, a cut-short file)
// is an std::runtime_error naming the file and what it holds.
BoolArray read_npy_bool(const std::string& path);

}  // namespace msprobe
