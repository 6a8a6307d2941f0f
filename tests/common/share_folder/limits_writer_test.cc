#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_folder/snapshot.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace tessera::share_folder {
namespace {

using share::kPriorityHigh;
using share::kPriorityLow;
using share::kPriorityNormal;
using share::kUnlimited;
using share::LimitsPage;

class LimitsWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-share-files-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string limits_path() const { return dir_ + "/limits"; }
  std::string dir_;
};

TEST_F(LimitsWriter, WritesAReadOnlyValidLimitsPage) {
  ASSERT_EQ(
      write_limits(dir_, {{"GPU-aaaa", 8ull << 30, 30}, {"GPU-bbbb", kUnlimited, 100}}).message(),
      "");
  struct stat info {};
  ASSERT_EQ(stat(limits_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0444u);
  EXPECT_EQ(static_cast<size_t>(info.st_size), sizeof(LimitsPage));
  const int fd = open(limits_path().c_str(), O_RDONLY);
  LimitsPage page;
  ASSERT_EQ(pread(fd, &page, sizeof page, 0), static_cast<ssize_t>(sizeof page));
  close(fd);
  ASSERT_TRUE(valid_limits_page(page));
  EXPECT_EQ(page.device_count.load(), 2u);
  EXPECT_STREQ(page.devices[0].uuid, "GPU-aaaa");
  EXPECT_EQ(page.devices[0].memory_limit.load(), 8ull << 30);
  EXPECT_EQ(page.devices[0].cores_request.load(), 30u);
  EXPECT_EQ(page.devices[1].memory_limit.load(), kUnlimited);
}

TEST_F(LimitsWriter, UpdatesInPlaceSoMappingsSeeTheChange) {
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", 8ull << 30, 100}}).message(), "");
  const int fd = open(limits_path().c_str(), O_RDONLY);
  void* memory = mmap(nullptr, sizeof(LimitsPage), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  const auto* live = static_cast<const LimitsPage*>(memory);
  const uint64_t generation = live->generation.load();
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", 4ull << 30, 50}}).message(), "");
  EXPECT_EQ(live->devices[0].memory_limit.load(), 4ull << 30);  // the running process's mapping
  EXPECT_EQ(live->devices[0].cores_request.load(), 50u);
  EXPECT_GT(live->generation.load(), generation);
  munmap(memory, sizeof(LimitsPage));
}

TEST_F(LimitsWriter, BurstAndPriorityAreWrittenAndUpdated) {
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", kUnlimited, 30, 100}}, {kPriorityHigh}).message(), "");
  const int fd = open(limits_path().c_str(), O_RDONLY);
  void* memory = mmap(nullptr, sizeof(LimitsPage), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  const auto* live = static_cast<const LimitsPage*>(memory);
  EXPECT_EQ(live->devices[0].cores_request.load(), 30u);
  EXPECT_EQ(live->devices[0].cores_limit.load(), 100u);
  EXPECT_EQ(live->priority.load(), kPriorityHigh);
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", kUnlimited, 40, 0}}, {kPriorityLow}).message(), "");
  EXPECT_EQ(live->devices[0].cores_request.load(), 40u);
  EXPECT_EQ(live->devices[0].cores_limit.load(), 0u);
  EXPECT_EQ(live->priority.load(), kPriorityLow);
  munmap(memory, sizeof(LimitsPage));
  EXPECT_NE(write_limits(dir_, {{"GPU-aaaa", kUnlimited, 40, 101}}).message(), "");
  EXPECT_NE(write_limits(dir_, {{"GPU-aaaa", kUnlimited, 40, 0}}, {7}).message(), "");
}

TEST_F(LimitsWriter, ADevicesChangeIsRefusedAndNamesTheDevices) {
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", 8ull << 30, 100}}).message(), "");
  const std::string swapped = write_limits(dir_, {{"GPU-cccc", 8ull << 30, 100}}).message();
  EXPECT_NE(swapped.find("GPU-aaaa"), std::string::npos) << swapped;
  EXPECT_NE(swapped.find("GPU-cccc"), std::string::npos) << swapped;
  const std::string grown =
      write_limits(dir_, {{"GPU-aaaa", 1, 100}, {"GPU-bbbb", 1, 100}}).message();
  EXPECT_NE(grown.find("cannot change"), std::string::npos) << grown;
}

TEST_F(LimitsWriter, BadInputIsRefusedBeforeAnythingIsWritten) {
  EXPECT_NE(write_limits(dir_, {{"", 1, 100}}).message(), "");
  EXPECT_NE(write_limits(dir_, {{std::string(80, 'x'), 1, 100}}).message().find("characters"),
            std::string::npos);
  EXPECT_NE(write_limits(dir_, {{"GPU-aaaa", 1, 101}}).message().find("101"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(limits_path()));
  EXPECT_NE(
      write_limits("/proc/no/such/dir", {{"GPU-aaaa", 1, 100}}).message().find("/proc/no/such/dir"),
      std::string::npos);
}

TEST_F(LimitsWriter, ANewPageIsNvmlMeasuredAndAnExistingOneKeepsItsSourceUnlessGiven) {
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", 1, 100}}).message(), "");
  EXPECT_EQ(read_limits_page(limits_path()).measure_source, share::kMeasureNvml);
  ASSERT_EQ(
      write_limits(dir_, {{"GPU-aaaa", 1, 100}}, {kPriorityNormal, share::kMeasureAgent}).message(),
      "");
  EXPECT_EQ(read_limits_page(limits_path()).measure_source, share::kMeasureAgent);
  ASSERT_EQ(write_limits(dir_, {{"GPU-aaaa", 2, 100}}, {kPriorityHigh}).message(), "");
  const LimitsPageCopy kept = read_limits_page(limits_path());
  EXPECT_EQ(kept.measure_source, share::kMeasureAgent);
  EXPECT_EQ(kept.priority, kPriorityHigh);
  ASSERT_EQ(kept.devices.size(), 1u);
  EXPECT_EQ(kept.devices[0].memory_limit, 2u);
}

TEST_F(LimitsWriter, ErrorsAreTypedAndNameTheValue) {
  const Status priority = write_limits(dir_, {{"GPU-aaaa", 1, 100}}, {7});
  EXPECT_EQ(priority.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(priority.message().find("priority 7"), std::string::npos) << priority.message();
  const Status source = write_limits(dir_, {{"GPU-aaaa", 1, 100}}, {kPriorityNormal, 9});
  EXPECT_EQ(source.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(source.message().find("measure source 9"), std::string::npos) << source.message();
  ASSERT_TRUE(write_limits(dir_, {{"GPU-aaaa", 1, 100}}).is_ok());
  const Status swapped = write_limits(dir_, {{"GPU-bbbb", 1, 100}});
  EXPECT_EQ(swapped.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(write_limits("/proc/no/such/dir", {{"GPU-aaaa", 1, 100}}).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace tessera::share_folder
