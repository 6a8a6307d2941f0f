#include "tessera/unique_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <type_traits>
#include <utility>

namespace tessera {
namespace {

bool is_open(int fd) {
  return fcntl(fd, F_GETFD) != -1;
}

static_assert(!std::is_copy_constructible_v<UniqueFd>);
static_assert(!std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd>);

TEST(UniqueFd, ClosesWhenTheOwnerGoes) {
  int raw = -1;
  {
    UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
  EXPECT_FALSE(UniqueFd().valid());
  EXPECT_EQ(UniqueFd().get(), -1);
}

TEST(UniqueFd, MovesOwnershipAndClosesOnlyOnce) {
  UniqueFd first(open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = first.get();
  UniqueFd second(std::move(first));
  EXPECT_FALSE(first.valid());
  EXPECT_EQ(second.get(), raw);
  UniqueFd third;
  third = std::move(second);
  EXPECT_FALSE(second.valid());
  EXPECT_EQ(third.get(), raw);
  EXPECT_TRUE(is_open(raw));
  third = UniqueFd();  // move-assigning an empty owner closes the old descriptor
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, ReleaseHandsTheDescriptorOn) {
  int raw = -1;
  {
    UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    raw = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(is_open(raw));
  close(raw);
}

TEST(UniqueFd, ResetClosesTheOldDescriptorAndKeepsErrno) {
  UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int old = fd.get();
  const int replacement = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  errno = ENOSPC;  // the failure a caller is about to report
  fd.reset(replacement);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(fd.get(), replacement);
  EXPECT_FALSE(is_open(old));  // opened before `old` was closed, so not reused since
  fd.reset();
  EXPECT_FALSE(is_open(replacement));
}

}  // namespace
}  // namespace tessera
