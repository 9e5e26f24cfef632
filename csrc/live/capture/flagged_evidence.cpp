#include "live/capture/flagged_evidence.h"

#include "live/capture/tensor_entry.h"

namespace msprobe {

EvidenceNames FlaggedEvidence::claim(CallRecord& rec, const LiveTensors& live) {
  std::vector<std::pair<ArgPos, Entry*>> kept;
  std::vector<std::string> stems;
  for_each_arg(rec, [&](const ArgPos& pos, Entry& e) {
    const at::Tensor* t = live.tensor(pos);
    // A view's base is not copied: its view is, and the base may be a buffer of any size.
    if (!t || !e.is_tensor() || e.marks.view_base || t->is_meta() || t->layout() != at::kStrided)
      return;
    kept.emplace_back(pos, &e);
    stems.push_back(arg_file_stem(rec.name, pos));
  });
  EvidenceNames names;
  if (kept.empty()) return names;
  const std::vector<std::string> claimed = names_.claim_all(stems);
  for (size_t i = 0; i < kept.size(); ++i) {
    kept[i].second->data_name = claimed[i] + ".pt";
    names.emplace_back(kept[i].first, kept[i].second->data_name);
  }
  return names;
}

std::vector<std::pair<at::Tensor, std::string>> FlaggedEvidence::copies(const EvidenceNames& names,
                                                                        const LiveTensors& live) {
  std::vector<std::pair<at::Tensor, std::string>> out;
  out.reserve(names.size());
  // The one copy of the evidence: compact, as the saver writes it (TensorSaver::save_copies).
  for (const auto& [pos, name] : names) {
    out.emplace_back(live.tensor(pos)->detach().clone(at::MemoryFormat::Contiguous), name);
  }
  return out;
}

}  // namespace msprobe
