#include "core/line_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace msprobe {
namespace {

// The plot's frame is x 70..620 and y 40..420 in a 640 x 480 picture.
std::string points_of(const std::string& svg) {
  const std::string key = "points=\"";
  const size_t at = svg.find(key);
  if (at == std::string::npos) return "<no polyline>";
  return svg.substr(at + key.size(), svg.find('"', at + key.size()) - at - key.size());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LineChartTest, ASimilarityIsDrawnFromZeroToOneAcrossThePlot) {
  const std::string svg = line_chart_svg("w_similarities", "steps", "similarities", {0, 5, 10},
                                         {1.0, 0.5, 0.0});
  EXPECT_EQ(
      svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"480\">\n", 0),
      0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(points_of(svg), "70,40 345,230 620,420 ");
  EXPECT_NE(svg.find(">w_similarities</text>"), std::string::npos);
  EXPECT_NE(svg.find(">steps</text>"), std::string::npos);
  EXPECT_NE(svg.find("rotate(-90 18 230)\">similarities</text>"), std::string::npos);
  // y ticks 0, 0.25, ... 1 and the first and last step under the x axis.
  EXPECT_NE(svg.find("y=\"424\" text-anchor=\"end\" font-family=\"sans-serif\" "
                     "font-size=\"12\">0</text>"),
            std::string::npos);
  EXPECT_NE(svg.find(">0.25</text>"), std::string::npos);
  EXPECT_NE(svg.find("y=\"44\" text-anchor=\"end\" font-family=\"sans-serif\" "
                     "font-size=\"12\">1</text>"),
            std::string::npos);
  EXPECT_NE(svg.find("x=\"620\" y=\"438\" text-anchor=\"middle\" font-family=\"sans-serif\" "
                     "font-size=\"12\">10</text>"),
            std::string::npos);
}

TEST(LineChartTest, ValuesAboveOneStretchTheYAxisToTheLargest) {
  const std::string svg = line_chart_svg("t", "x", "y", {1, 2}, {2.0, 1.0});
  EXPECT_EQ(points_of(svg), "70,40 620,230 ");
  EXPECT_NE(svg.find(">2</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1.5</text>"), std::string::npos);
}

TEST(LineChartTest, NonFiniteValuesAreDrawnAtZeroAndDoNotScaleTheAxis) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::string svg = line_chart_svg("t", "x", "y", {0, 1, 2}, {std::nan(""), inf, 1.0});
  EXPECT_EQ(points_of(svg), "70,420 345,420 620,40 ");
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(LineChartTest, OneStepIsCentredAndLabelledOnce) {
  const std::string svg = line_chart_svg("t", "x", "y", {7}, {0.5});
  EXPECT_EQ(points_of(svg), "345,230 ");
  EXPECT_EQ(count(svg, ">7</text>"), 1u);
}

TEST(LineChartTest, NoStepsDrawAnEmptyLine) {
  const std::string svg = line_chart_svg("t", "x", "y", {}, {});
  EXPECT_EQ(points_of(svg), "");
  EXPECT_EQ(count(svg, "<text "), 8u);  // five y ticks, the title and the two axis labels
}

TEST(LineChartTest, OnlyStepsWithAValueAreDrawn) {
  EXPECT_EQ(points_of(line_chart_svg("t", "x", "y", {0, 1, 2}, {1.0})), "70,40 ");
}

TEST(LineChartTest, TextIsEscapedForXml) {
  const std::string svg = line_chart_svg("a<b>&\"c\"", "x", "y", {0}, {0.0});
  EXPECT_NE(svg.find(">a&lt;b&gt;&amp;&quot;c&quot;</text>"), std::string::npos);
  EXPECT_EQ(svg.find("a<b>"), std::string::npos);
}

}  // namespace
}  // namespace msprobe
