// What free_benchmark does with a call's two outputs: compares them (check, preheat) and writes
// the inconsistent ones as rows, or puts the second in place of the first (fix).
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/output_files.h"
#include "core/preheat_counter.h"
#include "live/free_benchmark/free_benchmark.h"
#include "live/free_benchmark/output_compare.h"
#include "live/free_benchmark/perturbation.h"
#include "live/capture/is_tensor.h"
#include "live/log/tool_log.h"
#include "live/session/session.h"
#include "live/stats/tensor_stats.h"

namespace py = pybind11;

namespace msprobe {
namespace {

// msprobe compares an output that is a floating tensor, or a list or tuple holding one.
bool comparable(const py::handle& out) {
  if (py::isinstance<py::bool_>(out)) return false;
  if (is_tensor(out)) return tensor_of(out).is_floating_point();
  if (!is_py_sequence(out)) return false;
  for (const py::handle item : out)
    if (is_tensor(item) && tensor_of(item).is_floating_point()) return true;
  return false;
}

// SingleCompare's compare_seq: dispatched on `golden`; inside a sequence the two change places,
// as in msprobe.
bool agrees(const py::handle& actual, const py::handle& golden) {
  if (is_tensor(golden)) return single_compare(tensor_of(actual), tensor_of(golden));
  if (is_py_sequence(golden)) {
    if (py::len(actual) != py::len(golden)) return false;
    for (size_t i = 0; i < py::len(golden); ++i)
      if (!agrees(golden[py::int_(i)], actual[py::int_(i)])) return false;
    return true;
  }
  if (py::isinstance<py::float_>(golden)) {
    const double a = actual.cast<double>(), g = golden.cast<double>();
    return std::fabs(a - g) <= 1e-9 * std::max(std::fabs(a), std::fabs(g));
  }
  return actual.equal(golden);
}

std::string first_dtype(const py::handle& out) {
  if (is_tensor(out)) return dtype_name(tensor_of(out).scalar_type());
  if (is_py_sequence(out))
    for (const py::handle item : out)
      if (is_tensor(item)) return dtype_name(tensor_of(item).scalar_type());
  return "";
}

void describe(UnequalRow& row, const py::handle& original) {
  if (!is_tensor(original)) return;
  const at::Tensor& t = tensor_of(original);
  row.dtype = dtype_name(t.scalar_type());
  row.shape.assign(t.sizes().begin(), t.sizes().end());
  row.has_shape = true;
}

}  // namespace

void FreeBenchmark::compare(const CheckedCall& call, const py::object& original,
                            const py::object& perturbed, const CpuRun& cpu_run) {
  if (!comparable(perturbed)) return;
  auto session = session_.lock();
  UnequalRow base;
  base.rank = session ? std::max(0, session->current_rank()) : 0;
  base.pert_mode = to_string(section_.pert_mode);
  base.stage = to_string(section_.stage);
  base.step = session ? session->current_step() : 0;
  base.api_name = call.name;
  // to_cpu's own comparison; preheat compares by ratio whatever the device, as msprobe's does.
  if (section_.fuzz_on_cpu && !preheat_) {
    if (!agrees(original, perturbed)) {
      describe(base, original);
      write_row(base);
    }
    return;
  }
  double max_ratio = 0;
  auto one = [&](const py::handle& o, const py::handle& p, std::optional<int64_t> index) {
    UnequalRow row = base;
    row.output_index = index;
    bool ok = true;
    if (py::isinstance<py::int_>(p)) {
      ok = o.equal(p);
    } else if (py::isinstance<py::float_>(p)) {
      double a = o.cast<double>(), b = p.cast<double>();
      if (b == 0) a += 1e-8, b += 1e-8;
      row.ratio = a / b;
      ok = std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
    } else if (is_tensor(p)) {
      if (!is_tensor(o))
        throw std::runtime_error("an output that is a tensor in one run only");
      const at::Tensor& t = tensor_of(o);
      const std::string dtype = dtype_name(t.scalar_type());
      const double threshold =
          preheat_ ? preheat_->threshold(call.api, dtype)
                   : ratio_threshold(float_kind(t.scalar_type()), section_.pert_mode);
      row.ratio = output_ratio(t, tensor_of(p), section_.stage);
      max_ratio = std::max(max_ratio, *row.ratio);
      ok = consistent(*row.ratio, threshold);
      describe(row, o);
    }
    if (!ok) write_row(row);
  };
  if (is_tensor(original)) {
    one(original, perturbed, std::nullopt);
  } else if (is_py_sequence(original)) {
    for (size_t i = 0; i < py::len(original); ++i)
      one(original[py::int_(i)], perturbed[py::int_(i)], static_cast<int64_t>(i));
  }
  if (preheat_ && preheat_->sampled(call.api, base.step)) {
    bool cpu_ok = true;
    try {
      cpu_ok = agrees(original, cpu_run());
    } catch (const std::exception&) {
      cpu_ok = true;  // msprobe counts a CPU run that fails as agreeing
    }
    preheat_->record(call.api, first_dtype(original), max_ratio, cpu_ok);
  }
}

py::object FreeBenchmark::fix(const CheckedCall& call, const py::object& original,
                              const py::object& perturbed) {
  auto replace = [](const py::handle& o, const py::handle& p) {
    if (!is_tensor(o) || !is_tensor(p)) return;
    const at::Tensor& t = tensor_of(o);
    t.set_data(tensor_of(p).to(t.scalar_type()).to(t.device()));
  };
  if (is_tensor(original) && is_tensor(perturbed)) {
    replace(original, perturbed);
  } else if (is_py_sequence(original) && is_py_sequence(perturbed) &&
             py::len(original) == py::len(perturbed)) {
    for (size_t i = 0; i < py::len(original); ++i)
      replace(original[py::int_(i)], perturbed[py::int_(i)]);
  } else {
    say_once("fix failed " + call.api,
             "free_benchmark: fix: " + call.name + "'s output is kept: outputs of types " +
                 std::string(Py_TYPE(original.ptr())->tp_name) + " and " +
                 std::string(Py_TYPE(perturbed.ptr())->tp_name) +
                 " cannot be put one in place of the other",
             true);
    return original;
  }
  say_once("fix " + call.api,
           "msprobe_cpp: free_benchmark: fix: " + call.api + "'s outputs are those of its " +
               to_string(section_.pert_mode) +
               " run, cast back to their dtype and device: the training differs from an unfixed "
               "run by design");
  return original;
}

void FreeBenchmark::write_row(const UnequalRow& row) {
  try {
    make_dirs(std::filesystem::path(csv_path_).parent_path().string());
    // One append per row, as msprobe does: every rank adds its rows to the one file.
    append_to_shared_file(csv_path_, free_benchmark_header(), free_benchmark_row(row));
  } catch (const std::exception& e) {
    say_once("csv", std::string("free_benchmark: rows cannot be written: ") + e.what(), true);
  }
}

}  // namespace msprobe
