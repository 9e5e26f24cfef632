#include "live/grad_probe/grad_monitor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/md5.h"
#include "core/npy_file.h"
#include "core/output_files.h"
#include "core/record.h"
#include "live/log/tool_log.h"

namespace msprobe {
namespace {

// Per gradient, in one float64 vector: max, min, norm (each as the float32 msprobe writes), the
// count of zeros, then the count in each interval of the bounds.
// Per gradient, in the values read back: max, min and norm (each as the float32 msprobe writes);
// in the counts (L2): the zeros, then each interval of the bounds.
constexpr int64_t kMax = 0, kMin = 1, kNorm = 2, kValues = 3;

// One gradient's max, min and norm on its own device, with the ops msprobe's torch.max, min and
// norm run, as float32 0-d tensors: a float32 gradient's need no cast.
void add_values(const at::Tensor& g, std::vector<at::Tensor>& out) {
  if (g.numel() == 0) {  // torch.max of nothing raises in msprobe; here: nan, and a norm of 0
    const auto nan = at::full({}, std::nan(""), g.options().dtype(at::kFloat));
    out.insert(out.end(), {nan, nan, at::zeros({}, g.options().dtype(at::kFloat))});
    return;
  }
  out.insert(out.end(),
             {at::max(g).to(at::kFloat), at::min(g).to(at::kFloat),
              at::linalg_vector_norm(g, 2, c10::nullopt, false, c10::nullopt).to(at::kFloat)});
}

// L2: the zeros and torch.bucketize's intervals on the float32 bounds, as int64.
void add_counts(const at::Tensor& g, const at::Tensor& bounds, std::vector<at::Tensor>& out) {
  out.push_back(at::eq(g, 0).sum().reshape({1}));
  const at::Tensor g32 = g.scalar_type() == at::kBFloat16 ? g.to(at::kFloat) : g;
  out.push_back(at::bincount(at::bucketize(g32, bounds).reshape({-1}), {}, bounds.numel() + 1));
}

std::vector<int64_t> shape_of(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

// numpy's flags: Fortran-contiguous (sizes of 1 aside) and not C-contiguous.
bool fortran_only(const at::Tensor& t) {
  if (t.dim() < 2 || t.is_contiguous()) return false;
  int64_t expected = 1;
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (t.size(k) != 1 && t.stride(k) != expected) return false;
    expected *= t.size(k);
  }
  return true;
}

at::Tensor reversed(const at::Tensor& t) {
  std::vector<int64_t> dims;
  for (int64_t k = t.dim() - 1; k >= 0; --k) dims.push_back(k);
  return t.permute(dims);
}

// What the write thread needs of one step: the rows and the bytes of each direction file.
struct StepFiles {
  std::string folder;  // <dump_path>/rank<R>
  int64_t step = 0;
  std::string csv;
  std::vector<std::pair<std::string, std::string>> directions;  // (file name, npy bytes)
  std::string shards;  // shards.json: the sharded gradients' global shapes ("" when none is)
};

void write_step_files(const StepFiles& files) {
  make_dirs(files.folder);
  if (!files.directions.empty()) {
    const std::string step_folder = files.folder + "/" + step_part(files.step);
    make_dirs(step_folder);
    for (const auto& [name, bytes] : files.directions)
      write_file_atomic(step_folder + "/" + name, bytes);
  }
  if (!files.shards.empty()) write_file_atomic(files.folder + "/shards.json", files.shards);
  write_file_atomic(files.folder + "/grad_summary_" + std::to_string(files.step) + ".csv",
                    files.csv);
}

// What grad_level asks of each gradient besides max, min, norm and shape.
struct GradOutputs {
  bool distribution, direction, md5;
};

// The gradients of one device, read back together: one copy of the statistics, one of the
// directions and (L0) one of the float32 bytes.
struct DeviceBatch {
  at::Tensor bounds;  // float32, on the device, as msprobe's torch.Tensor(bounds)
  std::vector<size_t> rows;
  std::vector<at::Tensor> values, counts, directions, bytes;
  std::vector<bool> fortran_order;

  void add(size_t row, const at::Tensor& grad, const GradOutputs& wanted) {
    rows.push_back(row);
    add_values(grad, values);
    if (wanted.distribution) add_counts(grad, bounds, counts);
    if (wanted.direction) {
      // numpy saves a Fortran-contiguous array (a transposed parameter's gradient) in Fortran
      // order: so does this, from the same layout msprobe's `grad.clone() > 0` has.
      const at::Tensor positive = at::gt(grad, 0);
      const bool fortran = fortran_only(positive);
      fortran_order.push_back(fortran);
      directions.push_back(fortran ? reversed(positive).reshape({-1}) : positive.reshape({-1}));
    }
    if (wanted.md5) bytes.push_back(grad.to(at::kFloat).reshape({-1}));
  }

  void read_back(const GradOutputs& wanted, size_t bound_count, std::vector<GradFacts>& facts,
                 StepFiles& files) const {
    const int64_t per_count = int64_t(bound_count) + 2;
    const at::Tensor s = at::stack(values).to(at::kCPU).to(at::kDouble).contiguous();
    const at::Tensor n = wanted.distribution ? at::cat(counts).to(at::kCPU).contiguous() : s;
    const at::Tensor dirs = wanted.direction ? at::cat(directions).to(at::kCPU).contiguous() : s;
    const at::Tensor f32 = wanted.md5 ? at::cat(bytes).to(at::kCPU).contiguous() : s;
    int64_t element = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      GradFacts& f = facts[rows[i]];
      const double* row = s.data_ptr<double>() + int64_t(i) * kValues;
      f.max = row[kMax];
      f.min = row[kMin];
      f.norm = row[kNorm];
      if (wanted.distribution) {
        const int64_t* c = n.data_ptr<int64_t>() + int64_t(i) * per_count;
        f.zeros = c[0];
        f.intervals.assign(c + 1, c + per_count);
      }
      if (wanted.md5) f.md5 = md5_hex(f32.data_ptr<float>() + element, f.numel * sizeof(float));
      if (wanted.direction) {
        const auto* d = reinterpret_cast<const char*>(dirs.data_ptr<bool>()) + element;
        files.directions.emplace_back(
            f.name + ".npy",
            npy_bool_bytes(f.shape, std::string(d, size_t(f.numel)), fortran_order[i]));
      }
      element += f.numel;
    }
  }
};

// What a rank's summary of sharded gradients (FSDP2's DTensors) is of: each one's shard shape,
// whole shape and placements. msprobe's files have no place for it; its comparator reads no
// .json.
std::string shards_json(const std::vector<NamedGrad>& grads) {
  nlohmann::json parameters = nlohmann::json::object();
  for (const NamedGrad& g : grads) {
    if (g.placements.empty()) continue;
    parameters[g.name] = {{"shard_shape", shape_of(g.grad)},
                          {"global_shape", g.global_shape},
                          {"placements", g.placements}};
  }
  if (parameters.empty()) return "";
  const nlohmann::json doc = {
      {"note",
       "each row of this rank's grad_summary CSVs and each direction file is of the "
       "rank's own shard of the gradient, not of the whole"},
      {"parameters", parameters}};
  return doc.dump(1) + "\n";
}

// The step's files from the gradients' copies: the same ATen ops msprobe uses, read back once per
// device.
StepFiles summary_files(const GradProbeSection& section, const std::vector<NamedGrad>& grads,
                        const std::string& folder, int64_t step) {
  const GradOutputs wanted{section.level == GradLevel::L2, writes_direction(section.level),
                           section.level == GradLevel::L0};
  std::vector<double> bounds;
  for (const GradBound& b : section.bounds) bounds.push_back(b.value);
  std::vector<GradFacts> facts;
  std::map<std::string, DeviceBatch> batches;  // by device
  for (const NamedGrad& g : grads) {
    DeviceBatch& batch = batches[g.grad.device().str()];
    if (!batch.bounds.defined())
      batch.bounds = at::tensor(bounds, at::TensorOptions().dtype(at::kDouble))
                         .to(g.grad.device(), at::kFloat);
    batch.add(facts.size(), g.grad, wanted);
    GradFacts f;
    f.name = g.name;
    f.shape = shape_of(g.grad);
    f.numel = g.grad.numel();
    facts.push_back(std::move(f));
  }
  StepFiles files;
  files.folder = folder;
  files.step = step;
  for (auto& entry : batches) entry.second.read_back(wanted, bounds.size(), facts, files);
  files.csv = grad_summary_csv(section, facts);
  files.shards = shards_json(grads);
  return files;
}

}  // namespace

GradMonitor::GradMonitor(const TaskParts& parts)
    : section_(parts.config.grad_probe),
      dump_path_(parts.config.dump_path),
      steps_ranks_(parts.steps_ranks) {}

GradMonitor::~GradMonitor() {
  reads_.drain();
  writes_.drain();
}

bool GradMonitor::writes_rank(int rank) const {
  return steps_ranks_.rank_in(rank);
}

bool GradMonitor::next_step() {
  say_failures();
  ++step_;
  say(LogLevel::Debug, "msprobe_cpp: grad_probe: optimizer step " + std::to_string(step_));
  return steps_ranks_.step_in(step_);
}

void GradMonitor::summarize(int rank, const std::vector<NamedGrad>& grads, bool optimizer_writes) {
  const bool copy = optimizer_writes || copy_always_;
  std::vector<NamedGrad> read;
  read.reserve(grads.size());
  in_place_.clear();
  versions_.clear();
  for (const NamedGrad& g : grads) {
    if (!g.grad.defined()) {
      say(LogLevel::Info, "msprobe_cpp: grad_probe: grad is None: " + g.name);
      continue;
    }
    read.push_back(
        {g.name, copy ? g.grad.detach().clone() : g.grad.detach(), g.global_shape, g.placements});
    if (!copy) {
      in_place_.push_back(read.back());
      versions_.push_back(static_cast<int64_t>(g.grad._version()));
    }
  }
  // Outside torch.distributed, msprobe's grad_probe writes rank0 (not the dump's bare "rank").
  const std::string folder = dump_path_ + "/" + rank_folder(std::max(rank, 0));
  reads_.post([this, read = std::move(read), folder, step = step_] {
    try {
      auto files = std::make_shared<StepFiles>(summary_files(section_, read, folder, step));
      writes_.post([this, files] {
        try {
          write_step_files(*files);
        } catch (const std::exception& e) {
          failed(e.what());
        }
      });
    } catch (const c10::Error& e) {
      failed(e.what_without_backtrace());
    } catch (const std::exception& e) {
      failed(e.what());
    }
  });
}

void GradMonitor::step_done() {
  reads_.drain();
  for (size_t i = 0; i < in_place_.size(); ++i) {
    if (static_cast<int64_t>(in_place_[i].grad._version()) == versions_[i]) continue;
    copy_always_ = true;
    failed("the optimizer wrote into " + in_place_[i].name + "'s gradient during step " +
           std::to_string(step_) +
           " while it was read: that step's summary may mix its values before and after; the "
           "gradients are copied before each step from now on");
    break;
  }
  in_place_.clear();
  versions_.clear();
}

void GradMonitor::failed(const std::string& why) {
  std::lock_guard<std::mutex> lock(failed_mu_);
  failed_.push_back(why);
}

void GradMonitor::drain() {
  reads_.drain();
  writes_.drain();
  say_failures();
}

void GradMonitor::say_failures() {
  std::vector<std::string> failed;
  {
    std::lock_guard<std::mutex> lock(failed_mu_);
    failed.swap(failed_);
  }
  for (const std::string& why : failed) say_warning("grad_probe: " + why);
}

}  // namespace msprobe
