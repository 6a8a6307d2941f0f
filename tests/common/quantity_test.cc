#include "tessera/quantity.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ParseByteQuantity, AcceptsBinaryDecimalAndPlainForms) {
  EXPECT_EQ(parse_byte_quantity("8Gi"), 8ull << 30);
  EXPECT_EQ(parse_byte_quantity("8G"), 8'000'000'000ull);
  EXPECT_EQ(parse_byte_quantity("8192Mi"), 8ull << 30);
  EXPECT_EQ(parse_byte_quantity("1073741824"), 1ull << 30);
  EXPECT_EQ(parse_byte_quantity("143771Mi"), 143771ull << 20);
  EXPECT_EQ(parse_byte_quantity("1.5Gi"), 3ull << 29);
  EXPECT_EQ(parse_byte_quantity("0"), 0u);
  EXPECT_EQ(parse_byte_quantity("1k"), 1000u);
  EXPECT_EQ(parse_byte_quantity("15Ei"), 15ull << 60);
}

TEST(ParseByteQuantity, RejectsMalformedInput) {
  for (const char* bad : {"", "Gi", "-1", "8 Gi", " 8Gi", "8Gi ", "8gi", "8GiB", "1.", ".5", "0.5",
                          "1.0000001Ki", "16Ei", "18446744073709551616", "1e9", "0x10"}) {
    EXPECT_EQ(parse_byte_quantity(bad), std::nullopt) << bad;
  }
}

TEST(FormatByteQuantity, UsesExactBinaryUnits) {
  char buffer[32];
  format_byte_quantity(8ull << 30, buffer, sizeof buffer);
  EXPECT_STREQ(buffer, "8Gi");
  format_byte_quantity(1536ull << 20, buffer, sizeof buffer);
  EXPECT_STREQ(buffer, "1536Mi");
  format_byte_quantity(1000, buffer, sizeof buffer);
  EXPECT_STREQ(buffer, "1000");
  format_byte_quantity(0, buffer, sizeof buffer);
  EXPECT_STREQ(buffer, "0");
}

TEST(FormatByteQuantity, TruncatesToCapacity) {
  char buffer[3];
  EXPECT_EQ(format_byte_quantity(8ull << 30, buffer, sizeof buffer), 2u);
  EXPECT_STREQ(buffer, "8G");
}

}  // namespace
}  // namespace tessera
