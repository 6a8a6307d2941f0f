// Writes into a share's limits page as an agent's earlier run left it, for the usage tests.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tessera/share_region.h"

namespace tessera::agent::testing {

// Maps `<dir>/limits` read-write, hands the page to `edit`, unmaps it.
template <typename Edit>
void edit_limits_page(const std::string& dir, Edit edit) {
  const int fd = open((dir + "/limits").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* memory =
      mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  edit(*static_cast<share::LimitsPage*>(memory));
  munmap(memory, sizeof(share::LimitsPage));
}

}  // namespace tessera::agent::testing
