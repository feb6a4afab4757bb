// One server process shared by the integration cases of a test run (starting the model once).
#pragma once

#include "net/server_fixture.h"

namespace astrai::test {

// --max-body 1M so the 413 case needs only a small payload; --header-timeout 2 for slowloris,
// --body-timeout 2 for stalled bodies.
inline ServerProcess& shared_server() {
  static ServerProcess s({"--max-body", "1M", "--header-timeout", "2", "--body-timeout", "2",
                          "--served-model-name", "tiny-test"});
  return s;
}

}  // namespace astrai::test
