#include "core/grad_summary.h"

#include <algorithm>

#include "core/python_text.h"

namespace msprobe {
namespace {

void add_distribution_header(const std::vector<GradBound>& bounds, std::vector<std::string>& out) {
  if (!bounds.empty()) {
    out.push_back("(-inf, " + bounds[0].text + "]");
    for (size_t i = 1; i < bounds.size(); ++i)
      out.push_back("(" + bounds[i - 1].text + ", " + bounds[i].text + "]");
    out.push_back("(" + bounds.back().text + ", inf)");
  }
  out.push_back("=0");
}

// x / numel as Python's true division writes it; msprobe writes the int 0 for an empty gradient.
std::string fraction(int64_t count, int64_t numel) {
  if (numel == 0) return "0";
  return python_float(static_cast<double>(count) / static_cast<double>(numel));
}

}  // namespace

bool GradProbeSection::watches(const std::string& param_name) const {
  return param_list.empty() ||
         std::find(param_list.begin(), param_list.end(), param_name) != param_list.end();
}

const std::vector<GradColumn>& grad_columns(GradLevel level) {
  using C = GradColumn;
  static const std::vector<GradColumn> l0 = {C::Md5, C::Max, C::Min, C::Norm, C::Shape};
  static const std::vector<GradColumn> l1 = {C::Max, C::Min, C::Norm, C::Shape};
  static const std::vector<GradColumn> l2 = {C::Distribution, C::Max, C::Min, C::Norm, C::Shape};
  return level == GradLevel::L0 ? l0 : level == GradLevel::L1 ? l1 : l2;
}

bool writes_direction(GradLevel level) {
  return level != GradLevel::L0;
}

std::vector<std::string> grad_summary_header(const GradProbeSection& section) {
  std::vector<std::string> out = {"param_name"};
  for (GradColumn c : grad_columns(section.level)) {
    switch (c) {
      case GradColumn::Md5:
        out.push_back("MD5");
        break;
      case GradColumn::Distribution:
        add_distribution_header(section.bounds, out);
        break;
      case GradColumn::Max:
        out.push_back("max");
        break;
      case GradColumn::Min:
        out.push_back("min");
        break;
      case GradColumn::Norm:
        out.push_back("norm");
        break;
      case GradColumn::Shape:
        out.push_back("shape");
        break;
    }
  }
  return out;
}

std::vector<std::string> grad_summary_row(const GradProbeSection& section, const GradFacts& facts) {
  std::vector<std::string> out = {facts.name};
  for (GradColumn c : grad_columns(section.level)) {
    switch (c) {
      case GradColumn::Md5:
        out.push_back(facts.md5);
        break;
      case GradColumn::Distribution:
        for (int64_t n : facts.intervals) out.push_back(fraction(n, facts.numel));
        out.push_back(fraction(facts.zeros, facts.numel));
        break;
      case GradColumn::Max:
        out.push_back(python_float(facts.max));
        break;
      case GradColumn::Min:
        out.push_back(python_float(facts.min));
        break;
      case GradColumn::Norm:
        out.push_back(python_float(facts.norm));
        break;
      case GradColumn::Shape:
        out.push_back(python_int_list(facts.shape));
        break;
    }
  }
  return out;
}

std::string grad_summary_csv(const GradProbeSection& section, const std::vector<GradFacts>& rows) {
  std::string out = kUtf8Bom + csv_row(grad_summary_header(section));
  for (const GradFacts& facts : rows) out += csv_row(grad_summary_row(section, facts));
  return out;
}

}  // namespace msprobe
