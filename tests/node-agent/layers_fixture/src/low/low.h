// The lower layer.
#pragma once

inline int low_value() {
  return 1;
}
