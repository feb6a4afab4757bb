// `astrai train plot`: reading metrics.jsonl and the SVG drawn from it (points where the axes put
// them), its errors, and the CLI (the `plot` subcommand leaves `astrai train` flags working).
#include "train/plot.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>

#include "tools/test_util.h"

namespace test = astrai::test;
namespace fs = std::filesystem;
using astrai::ErrorCode;
using astrai::train::loss_curve_svg;
using astrai::train::MetricsPoint;
using astrai::train::PlotOptions;
using astrai::train::read_metrics;

namespace {

// The (x, y) pairs of the polyline of the given class.
std::vector<std::pair<double, double>> polyline(const std::string& svg, const std::string& cls) {
  std::smatch m;
  const std::regex re("<polyline class=\"" + cls + "\"[^>]* points=\"([^\"]*)\"");
  if (!std::regex_search(svg, m, re)) return {};
  std::vector<std::pair<double, double>> out;
  std::istringstream ss(m[1].str());
  for (std::string pair; ss >> pair;) {
    const size_t comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

}  // namespace

TEST_CASE("read_metrics reads step, loss and the val_loss of evaluation steps", "[unit]") {
  test::TempDir dir;
  test::write_file(
      dir / "metrics.jsonl",
      "{\"step\":1,\"loss\":5.5,\"lr\":0.001,\"grad_norm\":1.0,\"tokens_per_s\":10}\n"
      "\n"
      "{\"step\":2,\"loss\":4.25,\"lr\":0.001,\"grad_norm\":1.0,\"tokens_per_s\":10,\"val_loss\":4.5}\n");
  const std::vector<MetricsPoint> p = read_metrics(dir / "metrics.jsonl").value();
  REQUIRE(p.size() == 2);
  CHECK(p[0].step == 1);
  CHECK(p[0].loss == 5.5);
  CHECK_FALSE(p[0].val_loss);
  CHECK(p[1].step == 2);
  CHECK(p[1].loss == 4.25);
  REQUIRE(p[1].val_loss);
  CHECK(*p[1].val_loss == 4.5);
}

TEST_CASE("read_metrics names the file and line of a bad line, and refuses empty input", "[unit]") {
  test::TempDir dir;
  const fs::path f = dir / "metrics.jsonl";
  test::write_file(f, "{\"step\":1,\"loss\":2}\n{\"step\":2}\n");
  auto r = read_metrics(f);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::corrupt);
  CHECK_THAT(r.status().message(), Catch::Contains(f.string() + ":2") && Catch::Contains("\"loss\""));

  test::write_file(f, "{\"step\":1,\"loss\":2}\nnot json\n");
  r = read_metrics(f);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(f.string() + ":2"));

  test::write_file(f, "{\"step\":1,\"loss\":2,\"val_loss\":\"low\"}\n");
  r = read_metrics(f);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("val_loss"));

  test::write_file(f, "\n");
  r = read_metrics(f);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("no steps"));

  r = read_metrics(dir / "missing.jsonl");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::not_found);
}

TEST_CASE("the SVG puts every step on the train line and every evaluation on the val line", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> loss(1.0, 6.0);
  const int n = 50 + int(rng() % 200), every = 5 + int(rng() % 20);
  std::vector<MetricsPoint> points;
  for (int s = 1; s <= n; ++s) {
    MetricsPoint p{s, loss(rng), std::nullopt};
    if (s % every == 0) p.val_loss = loss(rng);
    points.push_back(p);
  }
  PlotOptions o;
  o.width = 640;
  o.height = 400;
  const std::string svg = loss_curve_svg(points, o);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\"", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  const auto train = polyline(svg, "train"), val = polyline(svg, "val");
  REQUIRE(train.size() == points.size());
  REQUIRE(val.size() == size_t(n / every));

  // The mapping is affine and increasing in step, decreasing in loss (up is a higher loss): recover
  // it from two points and check every other point against it (coordinates carry one decimal).
  auto affine = [](double a0, double a1, double b0, double b1) {
    return [=](double a) { return b0 + (a - a0) * (b1 - b0) / (a1 - a0); };
  };
  size_t lo = 0, hi = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].loss < points[lo].loss) lo = i;
    if (points[i].loss > points[hi].loss) hi = i;
  }
  const auto x_of = affine(double(points.front().step), double(points.back().step), train.front().first,
                           train.back().first);
  const auto y_of = affine(points[lo].loss, points[hi].loss, train[lo].second, train[hi].second);
  CHECK(train.back().first > train.front().first);
  CHECK(train[hi].second < train[lo].second);
  for (size_t i = 0; i < points.size(); ++i) {
    CHECK(train[i].first == Approx(x_of(double(points[i].step))).margin(0.2));
    CHECK(train[i].second == Approx(y_of(points[i].loss)).margin(0.2));
  }
  size_t k = 0;
  for (const MetricsPoint& p : points) {
    if (!p.val_loss) continue;
    CHECK(val[k].first == Approx(x_of(double(p.step))).margin(0.2));
    CHECK(val[k].second == Approx(y_of(*p.val_loss)).margin(0.2));
    ++k;
  }
  // Every point lies inside the drawing.
  for (const auto& [x, y] : train) {
    CHECK(x >= 0);
    CHECK(x <= o.width);
    CHECK(y >= 0);
    CHECK(y <= o.height);
  }
  CHECK(svg.find("class=\"reference\"") == std::string::npos);
}

TEST_CASE("the SVG draws the reference line at its loss and escapes the title", "[unit]") {
  // Loss 4 at step 1 and 2 at step 2: the reference at 3 lies halfway between them vertically.
  const std::vector<MetricsPoint> points = {{1, 4.0, std::nullopt}, {2, 2.0, std::nullopt}};
  PlotOptions o;
  o.title = "a <b> & \"c\"";
  o.reference = 3.0;
  o.reference_label = "unigram entropy";
  const std::string svg = loss_curve_svg(points, o);
  CHECK(svg.find("a &lt;b&gt; &amp; &quot;c&quot;") != std::string::npos);
  CHECK(svg.find("unigram entropy") != std::string::npos);
  const auto train = polyline(svg, "train");
  REQUIRE(train.size() == 2);
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("class=\"reference\"[^>]* y1=\"([0-9.]+)\"")));
  CHECK(std::stod(m[1].str()) == Approx((train[0].second + train[1].second) / 2).margin(0.1));
  CHECK(polyline(svg, "val").empty());
}

TEST_CASE("astrai train plot writes the SVG of a run, and astrai train still trains", "[unit]") {
  test::TempDir dir;
  test::write_file(dir / "lines.jsonl", [] {
    std::string s;
    for (int i = 0; i < 40; ++i)
      s += "{\"text\": \"the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\"}\n";
    return s;
  }());
  const std::string env = "ASTRAI_CACHE_DIR='" + (dir / "cache").string() + "' ";
  auto r = test::run_command(
      env + test::astrai_bin() + " train --preset tiny --data.train '" + (dir / "lines.jsonl").string() +
      "' --data.valid '" + (dir / "lines.jsonl").string() + "' --out '" + (dir / "run").string() +
      "' --seq_len 32 --batch_size 2 --steps 4 --eval_every 2 --threads 1 --no-progress");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);

  r = test::run_command(test::astrai_bin() + " train plot '" + (dir / "run").string() + "' -o '" +
                        (dir / "loss.svg").string() + "' --title 'fox run' --reference 5.5");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string svg = test::read_file(dir / "loss.svg");
  CHECK(polyline(svg, "train").size() == 4);
  CHECK(polyline(svg, "val").size() == 2);
  CHECK(svg.find("fox run") != std::string::npos);
  CHECK(svg.find("class=\"reference\"") != std::string::npos);

  // Without -o: RUN_DIR/loss.svg; a metrics.jsonl path works as well as its directory.
  r = test::run_command(test::astrai_bin() + " train plot '" + (dir / "run" / "metrics.jsonl").string() +
                        "'");
  REQUIRE(r.exit_code == 0);
  CHECK(polyline(test::read_file(dir / "run" / "loss.svg"), "train").size() == 4);

  r = test::run_command(test::astrai_bin() + " train plot '" + (dir / "nothing").string() + "'");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("nothing") && Catch::Contains("cannot open"));
  r = test::run_command(test::astrai_bin() + " train plot '" + (dir / "run").string() + "' --reference inf");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("--reference"));
  r = test::run_command(test::astrai_bin() + " train plot");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("run"));
}
