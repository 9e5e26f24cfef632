// The vector types and per-CPU clones of the statistics scans (cpu_summary.cpp,
// nonfinite_scan.cpp).
#pragma once

#include <cstdint>

namespace msprobe {

// 256-bit vectors: AVX2 keeps them in registers, AVX-512 and SSE split or join them cleanly.
typedef double v4d __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

}  // namespace msprobe

// Clones for AVX-512 and AVX2 (with FMA) are picked at load time where the CPU has them; other
// architectures (aarch64 Ascend hosts) get the portable vector code.
#if defined(__x86_64__) && defined(__GNUC__)
#define MSPROBE_SCAN_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MSPROBE_SCAN_CLONES
#endif
