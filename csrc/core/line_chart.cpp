#include "core/line_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace msprobe {
namespace {

constexpr double kWidth = 640, kHeight = 480, kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string text_at(double x, double y, const std::string& text, const char* anchor,
                    const std::string& extra = "") {
  return "<text x=\"" + number(x) + "\" y=\"" + number(y) + "\" text-anchor=\"" + anchor +
         "\" font-family=\"sans-serif\" font-size=\"12\"" + extra + ">" + escaped(text) +
         "</text>\n";
}

}  // namespace

std::string line_chart_svg(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<int64_t>& xs,
                           const std::vector<double>& ys, const std::vector<int64_t>& marked) {
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const double x0 = xs.empty() ? 0 : double(xs.front()), x1 = xs.empty() ? 1 : double(xs.back());
  double y1 = 1;
  for (double y : ys)
    if (std::isfinite(y)) y1 = std::max(y1, y);
  const auto px = [&](double x) { return kLeft + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * plot_w; };
  const auto py = [&](double y) { return kTop + (1 - y / y1) * plot_h; };
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(kWidth) +
                    "\" height=\"" + number(kHeight) +
                    "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<rect x=\"" + number(kLeft) + "\" y=\"" + number(kTop) + "\" width=\"" + number(plot_w) +
         "\" height=\"" + number(plot_h) + "\" fill=\"none\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {  // y ticks
    const double y = y1 * i / 4;
    out += text_at(kLeft - 6, py(y) + 4, number(y), "end");
  }
  if (!xs.empty()) {
    out += text_at(px(x0), kTop + plot_h + 18, std::to_string(xs.front()), "middle");
    if (xs.size() > 1)
      out += text_at(px(x1), kTop + plot_h + 18, std::to_string(xs.back()), "middle");
  }
  std::string points;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i)
    points += number(px(double(xs[i]))) + "," + number(py(std::isfinite(ys[i]) ? ys[i] : 0)) + " ";
  out += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + points +
         "\"/>\n";
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
    if (std::find(marked.begin(), marked.end(), xs[i]) == marked.end()) continue;
    out += "<circle class=\"alert\" cx=\"" + number(px(double(xs[i]))) + "\" cy=\"" +
           number(py(std::isfinite(ys[i]) ? ys[i] : 0)) +
           "\" r=\"5\" fill=\"none\" stroke=\"red\" stroke-width=\"2\"/>\n";
  }
  out += text_at(kWidth / 2, kTop - 14, title, "middle");
  out += text_at(kLeft + plot_w / 2, kHeight - 16, x_label, "middle");
  out += text_at(18, kTop + plot_h / 2, y_label, "middle",
                 " transform=\"rotate(-90 18 " + number(kTop + plot_h / 2) + ")\"");
  return out + "</svg>\n";
}

}  // namespace msprobe
