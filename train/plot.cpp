#include "train/plot.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace astrai::train {
namespace {

struct Axis {
  double lo = 0, hi = 1, tick = 1;
};

// lo..hi widened to multiples of a tick of 1, 2 or 5 x 10^k that gives about `target` intervals.
Axis nice_axis(double lo, double hi, int target) {
  if (!(hi > lo)) {  // one value: give it some room
    const double pad = std::max(std::abs(lo) * 0.1, 1.0);
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double tick = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  return {std::floor(lo / tick) * tick, std::ceil(hi / tick) * tick, tick};
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v, double tick) {
  // Enough decimals to tell neighbouring ticks apart, no more.
  const int decimals = tick >= 1 ? 0 : int(std::ceil(-std::log10(tick) - 1e-9));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < tick * 1e-6 ? 0.0 : v);
  return buf;
}

}  // namespace

Result<std::vector<MetricsPoint>> read_metrics(const std::filesystem::path& metrics_jsonl) {
  std::ifstream in(metrics_jsonl, std::ios::binary);
  if (!in) return not_found(metrics_jsonl.string() + ": cannot open");
  std::vector<MetricsPoint> points;
  simdjson::dom::parser parser;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = metrics_jsonl.string() + ":" + std::to_string(n);
    simdjson::dom::element doc;
    MetricsPoint p;
    if (parser.parse(simdjson::padded_string(line)).get(doc)) return corrupt(where + ": not a JSON object");
    if (doc["step"].get(p.step) || doc["loss"].get(p.loss))
      return corrupt(where + ": needs a numeric \"step\" and \"loss\"");
    double v = 0;
    if (doc["val_loss"].get(v) == simdjson::SUCCESS) {
      p.val_loss = v;
    } else if (doc["val_loss"].error() != simdjson::NO_SUCH_FIELD) {
      return corrupt(where + ": \"val_loss\" is not a number");
    }
    if (!std::isfinite(p.loss) || (p.val_loss && !std::isfinite(*p.val_loss)))
      return corrupt(where + ": loss is not finite");
    points.push_back(p);
  }
  if (points.empty()) return invalid_argument(metrics_jsonl.string() + ": no steps to plot");
  return points;
}

std::string loss_curve_svg(const std::vector<MetricsPoint>& points, const PlotOptions& o) {
  const double left = 64, right = 16, top = o.title.empty() ? 16 : 40, bottom = 48;
  const double w = o.width - left - right, h = o.height - top - bottom;

  int64_t max_step = 1;
  double lo = INFINITY, hi = -INFINITY;
  for (const MetricsPoint& p : points) {
    max_step = std::max(max_step, p.step);
    lo = std::min(lo, p.loss);
    hi = std::max(hi, p.loss);
    if (p.val_loss) lo = std::min(lo, *p.val_loss), hi = std::max(hi, *p.val_loss);
  }
  if (o.reference) lo = std::min(lo, *o.reference), hi = std::max(hi, *o.reference);
  const Axis xa = nice_axis(0, double(max_step), 8), ya = nice_axis(lo, hi, 6);
  auto x_of = [&](double step) { return left + (step - xa.lo) / (xa.hi - xa.lo) * w; };
  auto y_of = [&](double loss) { return top + (ya.hi - loss) / (ya.hi - ya.lo) * h; };

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << o.height
    << "\" viewBox=\"0 0 " << o.width << ' ' << o.height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty())
    s << "<text x=\"" << num(left + w / 2) << "\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">"
      << xml_escape(o.title) << "</text>\n";

  // Grid, ticks and their labels.
  s << "<g stroke=\"#e0e0e0\">\n";
  for (double v = xa.lo; v <= xa.hi + xa.tick * 1e-6; v += xa.tick)
    s << "<line x1=\"" << num(x_of(v)) << "\" y1=\"" << num(top) << "\" x2=\"" << num(x_of(v)) << "\" y2=\""
      << num(top + h) << "\"/>\n";
  for (double v = ya.lo; v <= ya.hi + ya.tick * 1e-6; v += ya.tick)
    s << "<line x1=\"" << num(left) << "\" y1=\"" << num(y_of(v)) << "\" x2=\"" << num(left + w) << "\" y2=\""
      << num(y_of(v)) << "\"/>\n";
  s << "</g>\n<g fill=\"#333\">\n";
  for (double v = xa.lo; v <= xa.hi + xa.tick * 1e-6; v += xa.tick)
    s << "<text x=\"" << num(x_of(v)) << "\" y=\"" << num(top + h + 16) << "\" text-anchor=\"middle\">"
      << tick_label(v, xa.tick) << "</text>\n";
  for (double v = ya.lo; v <= ya.hi + ya.tick * 1e-6; v += ya.tick)
    s << "<text x=\"" << num(left - 6) << "\" y=\"" << num(y_of(v) + 4) << "\" text-anchor=\"end\">"
      << tick_label(v, ya.tick) << "</text>\n";
  s << "<text x=\"" << num(left + w / 2) << "\" y=\"" << num(top + h + 36)
    << "\" text-anchor=\"middle\">step</text>\n";
  s << "<text transform=\"translate(16 " << num(top + h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">loss (nats per token)</text>\n</g>\n";
  s << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(w) << "\" height=\""
    << num(h) << "\" fill=\"none\" stroke=\"#333\"/>\n";

  if (o.reference)
    s << "<line class=\"reference\" x1=\"" << num(left) << "\" y1=\"" << num(y_of(*o.reference)) << "\" x2=\""
      << num(left + w) << "\" y2=\"" << num(y_of(*o.reference))
      << "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n";
  s << "<polyline class=\"train\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"";
  for (size_t i = 0; i < points.size(); ++i)
    s << (i ? " " : "") << num(x_of(double(points[i].step))) << ',' << num(y_of(points[i].loss));
  s << "\"/>\n";
  std::string val_points;
  std::ostringstream dots;
  for (const MetricsPoint& p : points) {
    if (!p.val_loss) continue;
    const std::string x = num(x_of(double(p.step))), y = num(y_of(*p.val_loss));
    val_points += (val_points.empty() ? "" : " ") + x + "," + y;
    dots << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"3\"/>\n";
  }
  if (!val_points.empty())
    s << "<polyline class=\"val\" fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"" << val_points
      << "\"/>\n<g fill=\"#ff7f0e\">\n"
      << dots.str() << "</g>\n";

  // Legend, top right inside the plot.
  struct Entry {
    std::string label, style;
  };
  std::vector<Entry> legend = {{"train loss", "stroke=\"#1f77b4\" stroke-width=\"1.2\""}};
  if (!val_points.empty()) legend.push_back({"val loss", "stroke=\"#ff7f0e\" stroke-width=\"2\""});
  if (o.reference)
    legend.push_back(
        {o.reference_label.empty() ? "reference " + tick_label(*o.reference, 0.001) : o.reference_label,
         "stroke=\"#888\" stroke-dasharray=\"6 4\""});
  size_t longest = 0;
  for (const Entry& e : legend) longest = std::max(longest, e.label.size());
  // About 7 px per character at font-size 12, after a 28 px line sample and its gap.
  const double box = 52 + 7.0 * double(longest), lx = left + w - box, ly = top + 10;
  s << "<rect x=\"" << num(lx - 8) << "\" y=\"" << num(ly - 4) << "\" width=\"" << num(box) << "\" height=\""
    << num(double(legend.size()) * 18 + 6) << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  for (size_t i = 0; i < legend.size(); ++i) {
    const double y = ly + 9 + double(i) * 18;
    s << "<line x1=\"" << num(lx) << "\" y1=\"" << num(y) << "\" x2=\"" << num(lx + 28) << "\" y2=\""
      << num(y) << "\" " << legend[i].style << "/>\n";
    s << "<text x=\"" << num(lx + 36) << "\" y=\"" << num(y + 4) << "\" fill=\"#333\">"
      << xml_escape(legend[i].label) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace astrai::train
