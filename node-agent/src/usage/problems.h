// What a meter's pass could not do, as values: one Status per problem (a share folder that is no
// usable share, a GPU NVML does not answer for), never a stop to the pass. Joined into one line
// only at the edge (a log line, sample_once's Status).
#pragma once

#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

using Problems = std::vector<Status>;

// "<message>; <message>; ...", "" for none.
inline std::string join_problems(const Problems& problems) {
  std::string joined;
  for (const Status& problem : problems) {
    if (problem.is_ok()) continue;
    if (!joined.empty()) joined += "; ";
    joined += problem.message();
  }
  return joined;
}

// Appends `more` to `problems`.
inline void add_problems(Problems& problems, const Problems& more) {
  problems.insert(problems.end(), more.begin(), more.end());
}

}  // namespace tessera::agent
