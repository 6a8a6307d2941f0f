// check_shared_library (tessera/shared_library.h): the ELF header checks the agent's shim check and
// `tessera run --libvgpu` share.
#include "tessera/shared_library.h"

#include <elf.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace tessera {
namespace {

namespace fs = std::filesystem;

// The first mapped file of this process whose name holds `part` (libc, the test itself).
std::string mapped_file(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (const size_t at = line.find('/');
        at != std::string::npos && line.find(part) != std::string::npos)
      return line.substr(at);
  return "";
}

TEST(SharedLibrary, ARealLibraryPassesAndItsPathIsNamedWhenRefused) {
  const std::string libc = mapped_file("libc.so");
  ASSERT_FALSE(libc.empty());
  EXPECT_EQ(check_shared_library(libc).message(), "");
  const Status passwd = check_shared_library("/etc/passwd");
  EXPECT_EQ(passwd.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(passwd.message(), "/etc/passwd is not an ELF shared library (no ELF header)");
  EXPECT_NE(check_shared_library("/").message().find("not a regular file"), std::string::npos);
}

// A position-independent executable is ET_DYN as well, but ld.so does not preload it.
TEST(SharedLibrary, APositionIndependentExecutableIsRefused) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::ifstream file(self, std::ios::binary);
  Elf64_Ehdr header{};
  file.read(reinterpret_cast<char*>(&header), sizeof header);
  if (header.e_type != ET_DYN) GTEST_SKIP() << self << " is not built as a PIE";
  const Status status = check_shared_library(self);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("position-independent executable"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace tessera
