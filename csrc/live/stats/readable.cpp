#include "live/stats/readable.h"

namespace msprobe {

std::string unreadable_reason(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->is_python_dispatch()) return "a tensor subclass holding no single plain tensor";
  try {
    if (t.is_meta()) return "a meta tensor";
    if (t.layout() != at::kStrided) return "";  // sparse: read through its values (tensor_stats)
    if (t.is_nested()) return "a nested tensor";
    if (t.numel() == 0) return "";
    if (!impl->has_storage()) return "a tensor without storage";
    const c10::Storage& storage = impl->unsafe_storage();
    if (!storage || storage.data() == nullptr) return "its data is not allocated";
  } catch (const std::exception&) {
    return "its storage cannot be read";
  }
  return "";
}

}  // namespace msprobe
