#include "tessera/local_shares.h"

#include <gtest/gtest.h>

namespace tessera::share {
namespace {

TEST(LocalShares, UsesXdgRuntimeDirWhenAbsolute) {
  EXPECT_EQ(local_share_root("/run/user/1000", 1000), "/run/user/1000/tessera/shares");
}

TEST(LocalShares, FallsBackToPerUserTmpFolder) {
  EXPECT_EQ(local_share_root(nullptr, 1000), "/tmp/tessera-1000/shares");
  EXPECT_EQ(local_share_root("", 0), "/tmp/tessera-0/shares");
  // A relative value could point anywhere under the working directory: not used.
  EXPECT_EQ(local_share_root("run/user/7", 7), "/tmp/tessera-7/shares");
}

}  // namespace
}  // namespace tessera::share
