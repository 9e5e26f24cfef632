#include "core/findings.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace msprobe {

namespace {

// A spilled finding: its byte length, then its fields in declaration order. Numbers are written
// as their bytes: the file is read back by this process only.
class FindingWriter {
 public:
  std::string record(const Finding& f) {
    out_.assign(sizeof(uint32_t), '\0');
    text(f.call);
    byte(static_cast<uint8_t>(f.scene));
    byte(static_cast<uint8_t>(f.severity));
    sizes(f.input_indices);
    byte(f.uses_input_key ? 1 : 0);
    number(static_cast<uint64_t>(f.kwarg_keys.size()));
    for (const std::string& k : f.kwarg_keys) text(k);
    sizes(f.output_indices);
    number(f.threshold);
    number(f.input_norm);
    number(f.output_norm);
    const uint32_t length = static_cast<uint32_t>(out_.size() - sizeof(uint32_t));
    std::memcpy(out_.data(), &length, sizeof(length));
    return out_;
  }

 private:
  template <typename T>
  void number(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void text(const std::string& s) {
    number(static_cast<uint64_t>(s.size()));
    out_ += s;
  }
  void sizes(const std::vector<size_t>& v) {
    number(static_cast<uint64_t>(v.size()));
    for (size_t i : v) number(static_cast<uint64_t>(i));
  }

  std::string out_;
};

class FindingReader {
 public:
  explicit FindingReader(std::string_view bytes) : in_(bytes) {}

  Finding finding() {
    Finding f;
    f.call = text();
    f.scene = static_cast<Scene>(byte());
    f.severity = static_cast<Severity>(byte());
    f.input_indices = sizes();
    f.uses_input_key = byte() != 0;
    f.kwarg_keys.resize(number<uint64_t>());
    for (std::string& k : f.kwarg_keys) k = text();
    f.output_indices = sizes();
    f.threshold = number<double>();
    f.input_norm = number<double>();
    f.output_norm = number<double>();
    if (!in_.empty()) throw std::runtime_error("the report's temporary file is corrupt");
    return f;
  }

 private:
  std::string_view take(size_t n) {
    if (n > in_.size()) throw std::runtime_error("the report's temporary file is corrupt");
    std::string_view head = in_.substr(0, n);
    in_.remove_prefix(n);
    return head;
  }
  template <typename T>
  T number() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  uint8_t byte() { return static_cast<uint8_t>(take(1)[0]); }
  std::string text() { return std::string(take(number<uint64_t>())); }
  std::vector<size_t> sizes() {
    std::vector<size_t> v(number<uint64_t>());
    for (size_t& i : v) i = static_cast<size_t>(number<uint64_t>());
    return v;
  }

  std::string_view in_;
};

}  // namespace

bool SeverityCounts::fails(Severity fail_on) const {
  for (int s = static_cast<int>(fail_on); s < 3; ++s) {
    if (by_level[s] > 0) return true;
  }
  return false;
}

Findings::Findings(const std::vector<Finding>& in_memory) {
  for (const Finding& f : in_memory) add(f);
}

Findings Findings::spilled() {
  Findings findings;
  findings.spill_ = std::make_unique<SpillFile>();
  return findings;
}

void Findings::add(const Finding& f) {
  const int level = static_cast<int>(f.severity);
  counts_.add(f.severity);
  if (!first_[level]) first_[level] = f.call;
  if (spill_) {
    spill_->append(FindingWriter().record(f));
  } else {
    memory_.push_back(f);
  }
}

const std::optional<std::string>& Findings::first(Severity level) const {
  return first_[static_cast<int>(level)];
}

void Findings::for_each(const std::function<void(const Finding&)>& fn) const {
  if (!spill_) {
    for (const Finding& f : memory_) fn(f);
    return;
  }
  // Records cross the file's chunks: the tail of one chunk waits for the next.
  std::string pending;
  spill_->replay([&](const std::string& chunk) {
    pending += chunk;
    size_t at = 0;
    uint32_t length = 0;
    while (pending.size() - at >= sizeof(length)) {
      std::memcpy(&length, pending.data() + at, sizeof(length));
      if (pending.size() - at - sizeof(length) < length) break;
      fn(FindingReader(std::string_view(pending).substr(at + sizeof(length), length)).finding());
      at += sizeof(length) + length;
    }
    pending.erase(0, at);
  });
  if (!pending.empty()) throw std::runtime_error("the report's temporary file is truncated");
}

}  // namespace msprobe
