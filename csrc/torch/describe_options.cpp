#include "torch/describe_options.h"

#include "core/crc32.h"
#include "torch/tensor_saver.h"
#include "torch/tensor_stats.h"

namespace msprobe {

namespace {

// msprobe's "md5" is a CRC-32 of the tensor's bytes as laid out contiguously on the host.
std::string tensor_crc(const at::Tensor& t) {
  const at::Tensor host = t.detach().to(at::kCPU).contiguous();
  return crc32_hex(crc32(host.data_ptr(), host.numel() * host.element_size()));
}

bool has_plain_bytes(const at::Tensor& t) {
  return t.layout() == at::kStrided && !t.is_meta() && !t.is_quantized();
}

}  // namespace

Entry describe_tensor_for(const at::Tensor& t, const DescribeOptions& options,
                          const std::string& stem) {
  Entry e = describe_tensor(t);
  if (e.kind != Entry::Kind::Object || !has_plain_bytes(t)) return e;
  if (options.md5) e.md5 = tensor_crc(t);
  if (options.saver) {
    e.data_name = stem + ".pt";
    options.saver->save(t, options.tensor_dir + "/" + e.data_name);
  }
  return e;
}

}  // namespace msprobe
