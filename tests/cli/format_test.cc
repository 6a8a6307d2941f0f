// The text pieces of the CLI's views: sizes, ages, bars, fitted columns.
#include "views/format.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

TEST(Format, BytesAsQuantities) {
  EXPECT_EQ(format_bytes(0), "0");
  EXPECT_EQ(format_bytes(1023), "1023");
  EXPECT_EQ(format_bytes(1536), "1.5Ki");
  EXPECT_EQ(format_bytes(500ull << 20), "500Mi");
  EXPECT_EQ(format_bytes(4ull << 30), "4Gi");
  EXPECT_EQ(format_bytes((7ull << 30) / 2), "3.5Gi");
  EXPECT_EQ(format_bytes(143771ull << 20), "140Gi");
  EXPECT_EQ(format_bytes((10ull << 30) - 1), "10Gi");
  EXPECT_EQ(format_bytes(~0ull), "16Ei");
}

TEST(Format, AgesAsKubectlShowsThem) {
  EXPECT_EQ(format_age(-1), "<unknown>");
  EXPECT_EQ(format_age(45'000), "45s");
  EXPECT_EQ(format_age(192'000), "3m12s");
  EXPECT_EQ(format_age(180'000), "3m");
  EXPECT_EQ(format_age(17 * 60'000), "17m");
  EXPECT_EQ(format_age((5 * 60 + 2) * 60'000), "5h2m");
  EXPECT_EQ(format_age(20 * 3'600'000), "20h");
  EXPECT_EQ(format_age((3 * 24 + 4) * 3'600'000ll), "3d4h");
  EXPECT_EQ(format_age(12 * 24 * 3'600'000ll), "12d");
}

TEST(Format, BarsFillTheirInsideProportionally) {
  EXPECT_EQ(format_bar(0, 12), "[..........]");
  EXPECT_EQ(format_bar(0.5, 12), "[#####.....]");
  EXPECT_EQ(format_bar(0.26, 12), "[###.......]");
  EXPECT_EQ(format_bar(1, 12), "[##########]");
  EXPECT_EQ(format_bar(7.5, 12), "[##########]");  // over the limit: full, never wider
  EXPECT_EQ(format_bar(-1, 4), "[..]");
  EXPECT_EQ(format_bar(0.5, 0), "[]");
}

TEST(Format, FitKeepsTheEndsOfLongNames) {
  EXPECT_EQ(fit("alpha", 14), "alpha");
  EXPECT_EQ(fit("tessera-run-4f2a9c", 14), "tessera~4f2a9c");
  EXPECT_EQ(fit("abcdef", 3), "abc");
  EXPECT_EQ(fit("abc", 0), "");
  EXPECT_EQ(pad_right("ab", 4), "ab  ");
  EXPECT_EQ(pad_left("ab", 4), "  ab");
  EXPECT_EQ(pad_left("abcdefgh", 5), "ab~gh");
}

}  // namespace
}  // namespace tessera::cli
