// add_flag_pair (src/cli/commands.h): `bench decode --overlap / --no-overlap` and any such pair
// set 1 or 0, and leave a value decided later (-1) alone when neither is given.
#include <catch2/catch.hpp>
#include <string>

#include "src/cli/commands.h"

namespace astrai::cli {
namespace {

struct Parsed {
  int value = -1;
  bool ok = false;
  std::string error;
};

Parsed parse(const std::string& args) {
  Parsed p;
  CLI::App app;
  CLI::App* sub = app.add_subcommand("bench");
  CLI::Option* on = add_flag_pair(*sub, "overlap", p.value, "on", "off");
  bool other = false;
  sub->add_flag("--host-sampling", other, "another flag")->excludes(on);
  try {
    app.parse("bench" + args, false);
    p.ok = true;
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace

TEST_CASE("a --name / --no-name flag pair sets 1 or 0, and neither leaves the value to decide later",
          "[unit]") {
  const Parsed neither = parse("");
  CHECK(neither.ok);
  CHECK(neither.value == -1);
  const Parsed on = parse(" --overlap");
  CHECK(on.ok);
  CHECK(on.value == 1);
  const Parsed off = parse(" --no-overlap");
  CHECK(off.ok);
  CHECK(off.value == 0);
  const Parsed both = parse(" --overlap --no-overlap");
  CHECK_FALSE(both.ok);
  CHECK(both.error.find("--overlap excludes --no-overlap") != std::string::npos);
  // The --NAME option returned takes further exclusions.
  const Parsed excluded = parse(" --overlap --host-sampling");
  CHECK_FALSE(excluded.ok);
  CHECK(excluded.error.find("--overlap excludes --host-sampling") != std::string::npos);
}

}  // namespace astrai::cli
