#include "live/capture/flagged_evidence.h"

#include "live/capture/tensor_entry.h"

namespace msprobe {

EvidenceNames FlaggedEvidence::claim(CallRecord& rec, const LiveTensors& live) {
  EvidenceNames names;
  for_each_arg(rec, [&](const ArgPos& pos, Entry& e) {
    const at::Tensor* t = live.tensor(pos);
    // A view's base is not copied: its view is, and the base may be a buffer of any size.
    if (!t || !e.is_tensor() || e.marks.view_base || t->is_meta() || t->layout() != at::kStrided)
      return;
    e.data_name = names_.claim(arg_file_stem(rec.name, pos)) + ".pt";
    names.emplace_back(pos, e.data_name);
  });
  return names;
}

std::vector<std::pair<at::Tensor, std::string>> FlaggedEvidence::copies(const EvidenceNames& names,
                                                                        const LiveTensors& live) {
  std::vector<std::pair<at::Tensor, std::string>> out;
  out.reserve(names.size());
  // The one copy of the evidence: compact, as the saver writes it (TensorSaver::save_copy).
  for (const auto& [pos, name] : names) {
    out.emplace_back(live.tensor(pos)->detach().clone(at::MemoryFormat::Contiguous), name);
  }
  return out;
}

}  // namespace msprobe
