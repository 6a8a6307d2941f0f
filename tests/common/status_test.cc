#include "tessera/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace tessera {
namespace {

Status fails_when(bool fail) {
  if (fail) return invalid_argument("memory: \"-1\" is not a quantity");
  return Status::ok();
}

Status forwards(bool fail, int* reached_end) {
  TESSERA_RETURN_IF_ERROR(fails_when(fail));
  ++*reached_end;
  return Status::ok();
}

Result<int> parse_positive(int value) {
  if (value <= 0) return invalid_argument("value " + std::to_string(value) + " is not positive");
  return value;
}

TEST(StatusTest, DefaultIsOkWithNoMessage) {
  Status status;
  EXPECT_TRUE(status.is_ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status, Status::ok());
}

TEST(StatusTest, ErrorKeepsCodeAndMessage) {
  Status status = not_found("claim default/a (uid 1) not found");
  EXPECT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "claim default/a (uid 1) not found");
  EXPECT_EQ(status_code_name(status.code()), "NOT_FOUND");
}

TEST(StatusTest, ContextIsPrefixedAndOkStaysOk) {
  EXPECT_EQ(unavailable("connection refused").with_context("GET /apis/x"),
            unavailable("GET /apis/x: connection refused"));
  EXPECT_TRUE(Status::ok().with_context("anything").is_ok());
}

TEST(StatusTest, ReturnIfErrorStopsAtTheFirstError) {
  int reached_end = 0;
  EXPECT_TRUE(forwards(false, &reached_end).is_ok());
  EXPECT_EQ(reached_end, 1);
  Status status = forwards(true, &reached_end);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reached_end, 1);
}

TEST(ResultTest, HoldsValueOrError) {
  Result<int> good = parse_positive(3);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 3);
  EXPECT_TRUE(good.status().is_ok());

  Result<int> bad = parse_positive(-2);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "value -2 is not positive");
}

TEST(ResultTest, MovesOutMoveOnlyValues) {
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(7);
  ASSERT_TRUE(owned.is_ok());
  std::unique_ptr<int> taken = std::move(owned).value();
  EXPECT_EQ(*taken, 7);
}

}  // namespace
}  // namespace tessera
