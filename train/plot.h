// `astrai train plot`: the loss curve of a run (train loss and val_loss against the step, from
// OUT/metrics.jsonl) drawn as a self-contained SVG, written by hand so the picture needs no
// plotting library and renders in any browser or Markdown viewer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/core/status.h"

namespace astrai::train {

struct MetricsPoint {
  int64_t step = 0;
  double loss = 0;
  std::optional<double> val_loss;  // on evaluation steps only
};

// The points of a metrics.jsonl, in file order. Blank lines are skipped; a line that is not a JSON
// object with a numeric "step" and "loss" is an error naming the file and the line. An empty file
// is an error too (nothing to draw).
Result<std::vector<MetricsPoint>> read_metrics(const std::filesystem::path& metrics_jsonl);

struct PlotOptions {
  std::string title;                // drawn above the plot (empty: none)
  std::optional<double> reference;  // a dashed horizontal line at this loss, e.g. a baseline
  std::string reference_label;      // its legend entry
  int width = 800, height = 480;    // pixels
};

// The SVG document. Axes: step from 0 to the last step, loss from a rounded value below the
// smallest to one above the largest (the reference line included); ticks at 1, 2 or 5 x 10^k.
// The train loss is a polyline, val_loss a polyline with a dot per evaluation.
std::string loss_curve_svg(const std::vector<MetricsPoint>& points, const PlotOptions& options);

}  // namespace astrai::train
