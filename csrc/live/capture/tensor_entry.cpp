#include "live/capture/tensor_entry.h"

#include <cstdio>
#include <utility>

#include "core/crc32.h"
#include "core/output_files.h"
#include "core/xor_checksum.h"
#include "live/capture/tensor_saver.h"
#include "live/capture/tensor_slices.h"
#include "live/capture/unwritten_memory.h"
#include "live/stats/stats_cache.h"
#include "live/stats/tensor_stats.h"

namespace msprobe {

namespace {

// msprobe's "md5" is a CRC-32 of the tensor's bytes as laid out contiguously on the host, taken
// from numpy: bfloat16, which numpy lacks, goes through float32 first.
std::string tensor_crc(const at::Tensor& t) {
  at::Tensor host = t.detach().to(at::kCPU).contiguous();
  if (host.scalar_type() == at::kBFloat16) host = host.to(at::kFloat);
  return crc32_hex(crc32(host.data_ptr(), host.numel() * host.element_size()));
}

std::string first_line(const char* what) {
  std::string s(what ? what : "");
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

bool has_plain_bytes(const at::Tensor& t) {
  return t.layout() == at::kStrided && !t.is_meta() && !t.is_quantized();
}

// msprobe 26.x's xor checksum (core/xor_checksum.h) as it writes it: a 0-dimensional tensor's
// own value (an integer or bool one in hex, a float one as the number), "0x0...0" for an empty
// tensor, else the XOR of the bytes' words.
Scalar xor_checksum(const at::Tensor& t) {
  const at::Tensor x = t.detach();
  if (x.dim() == 0 && !x.is_complex()) {
    if (x.is_floating_point()) return Scalar::of_float(x.item<double>());
    return Scalar::of_string(xor_hex(static_cast<uint64_t>(x.item<int64_t>())));
  }
  if (x.numel() == 0) return Scalar::of_string(xor_hex(0));
  const at::Tensor host = x.to(at::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
  return Scalar::of_string(
      xor_hex(xor_words(bytes, static_cast<size_t>(host.numel()) * host.element_size())));
}

}  // namespace

std::string file_stem(const std::string& call, const char* side) {
  return call + "." + side;
}
std::string kwarg_file_stem(const std::string& call, const std::string& key) {
  return call + ".kwargs." + key;
}
std::string item_file_stem(const std::string& stem, size_t i) {
  return stem + "." + std::to_string(i);
}
std::string key_file_stem(const std::string& stem, const std::string& key) {
  return stem + "." + key;
}
std::string arg_file_stem(const std::string& call, const ArgPos& pos) {
  if (pos.side == ArgPos::Side::Kwarg) return kwarg_file_stem(call, *pos.key);
  return item_file_stem(file_stem(call, pos.side == ArgPos::Side::Input ? "input" : "output"),
                        pos.index);
}

std::string EntryOptions::stem(const std::string& call, const char* side) const {
  return saver ? file_stem(call, side) : std::string();
}
std::string EntryOptions::kwarg_stem(const std::string& call, const std::string& key) const {
  return saver ? kwarg_file_stem(call, key) : std::string();
}
std::string EntryOptions::item_stem(const std::string& stem, size_t i) const {
  return saver ? item_file_stem(stem, i) : std::string();
}
std::string EntryOptions::key_stem(const std::string& stem, const std::string& key) const {
  return saver ? key_file_stem(stem, key) : std::string();
}

namespace {

// Task tensor: the tensor saved as `<stem>.pt`, named in the entry's data_name.
void save_tensor(const at::Tensor& t, const EntryOptions& options, const std::string& stem,
                 Entry& e) {
  if (!options.saver || !options.file_names) return;
  // Made safe and unique: a module name may hold '/' or NUL, and data_name names the file as it
  // is written.
  std::string name = options.file_names->claim(stem) + ".pt";
  if (options.saver->save(t, options.file_names->dir() + "/" + name)) e.data_name = std::move(name);
}

// msprobe 26.x's Mean and Norm of a float tensor below 64 bits of one dimension or more.
void mean_norm_in_dtype(const at::Tensor& t, Entry& e) {
  if (!e.mean.is_number() || !t.is_floating_point() || t.scalar_type() == at::kDouble ||
      t.dim() == 0) {
    return;
  }
  const at::Tensor x = t.detach();
  e.mean = Scalar::of_float(at::mean(x).item<double>());
  e.norm = Scalar::of_float(at::norm(x).item<double>());
}

// The entry, letting a failure through.
Entry tensor_entry_unguarded(const at::Tensor& t, const EntryOptions& options,
                             const std::string& stem) {
  StatsCache* cache =
      options.cache && t.defined() && StatsCache::cacheable(t) ? options.cache : nullptr;
  // Not from the cache either: the base's NaN/inf, cached from another call, is no event of a
  // view call, and would make every view of that base a finding.
  if (options.read_limit > 0 && !options.saver && t.numel() > options.read_limit &&
      t.device().is_cpu()) {
    Entry e = tensor_layout_entry(t);
    e.max = e.min = e.mean = e.norm = Scalar::null();
    e.marks.view_base = true;
    return e;
  }
  if (options.xor_checksum) {
    // In place of the statistics (26.x computes none then).
    Entry e = tensor_layout_entry(t);
    if (e.kind == Entry::Kind::Object)
      e.value = has_plain_bytes(t) ? xor_checksum(t) : Scalar::null();
    save_tensor(t, options, stem, e);
    return e;
  }
  std::optional<DataStats> cached;
  if (cache) cached = cache->find(t);
  Entry e = cached ? tensor_layout_entry(t) : tensor_stats_entry(t, options.pending);
  if (cached) {
    e.max = std::move(cached->max);
    e.min = std::move(cached->min);
    e.mean = std::move(cached->mean);
    e.norm = std::move(cached->norm);
    e.finite = std::move(cached->finite);
    e.nonfinite = cached->nonfinite;
    e.md5 = std::move(cached->md5);
    e.pending_stats = cached->pending_stats;
  }
  if (e.kind != Entry::Kind::Object || !has_plain_bytes(t)) return e;
  e.marks.unwritten = unwritten_memory().holds(t);
  if (options.dtype_mean_norm && !cached) mean_norm_in_dtype(t, e);
  if (options.md5 && !cached) e.md5 = tensor_crc(t);
  if (cache && !cached)
    cache->put(
        t, DataStats{e.max, e.min, e.mean, e.norm, e.finite, e.nonfinite, e.md5, e.pending_stats});
  save_tensor(t, options, stem, e);
  return e;
}

}  // namespace

namespace {
thread_local std::string pending_failure;
}  // namespace

std::string take_statistics_failure() {
  if (pending_failure.empty()) return std::string();  // nearly always: no string to swap
  return std::exchange(pending_failure, std::string());
}

Entry tensor_entry(const at::Tensor& t, const EntryOptions& options, const std::string& stem) {
  try {
    if (options.slices && t.defined() && options.slices->any())
      return tensor_entry_unguarded(options.slices->apply(t), options, stem);
    return tensor_entry_unguarded(t, options, stem);
  } catch (const std::exception& err) {
    // The tool's own failure (a tensor without storage, memory for the float64 copy) must not
    // reach the training script: the entry says "not computed" (null statistics). The hook that
    // submits the call names it in the warning.
    if (pending_failure.empty()) pending_failure = first_line(err.what());
    Entry e;
    try {
      e = tensor_layout_entry(t);
    } catch (const std::exception&) {
      e.kind = Entry::Kind::Object;  // not even the layout: type alone
      e.type = "torch.Tensor";
    }
    e.max = e.min = e.mean = e.norm = Scalar::null();
    return e;
  }
}

}  // namespace msprobe
