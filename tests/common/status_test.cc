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

// Doubles a positive value; the parse's error comes back unchanged.
Result<int> doubled(int value, int* reached_end) {
  TESSERA_ASSIGN_OR_RETURN(const int positive, parse_positive(value));
  ++*reached_end;
  return positive * 2;
}

// The same, with the error prefixed; a Status-returning caller, and an existing variable as lhs.
Status doubled_into(int value, int* out, int* context_built) {
  auto context = [context_built] {
    ++*context_built;
    return std::string("doubling");
  };
  TESSERA_ASSIGN_OR_RETURN(*out, parse_positive(value), with_context(context()));
  *out *= 2;
  return Status::ok();
}

// Two in one scope (distinct temporaries), a move-only value, and a handler mapping the error to
// the caller's own return type.
Result<std::string> sum_owned(int a, int b) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<int> first,
                           Result<std::unique_ptr<int>>(std::make_unique<int>(a)));
  TESSERA_ASSIGN_OR_RETURN(int second, parse_positive(b), [](const Status& status) {
    return Result<std::string>(not_found("second: " + status.message()));
  });
  return std::to_string(*first + second);
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

TEST(AssignOrReturnTest, AssignsTheValueOrReturnsTheErrorUnchanged) {
  int reached_end = 0;
  Result<int> good = doubled(4, &reached_end);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 8);
  EXPECT_EQ(reached_end, 1);

  Result<int> bad = doubled(-1, &reached_end);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status(), invalid_argument("value -1 is not positive"));
  EXPECT_EQ(reached_end, 1);  // returned before the rest
}

TEST(AssignOrReturnTest, WithContextPrefixesOnlyOnError) {
  int out = 0;
  int context_built = 0;
  EXPECT_TRUE(doubled_into(5, &out, &context_built).is_ok());
  EXPECT_EQ(out, 10);
  EXPECT_EQ(context_built, 0);  // the context is built only for an error

  const Status failed = doubled_into(0, &out, &context_built);
  EXPECT_EQ(failed.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.message(), "doubling: value 0 is not positive");
  EXPECT_EQ(context_built, 1);
  EXPECT_EQ(out, 10);  // left as it was
}

TEST(AssignOrReturnTest, MoveOnlyValuesAndOwnErrorHandlers) {
  Result<std::string> sum = sum_owned(2, 3);
  ASSERT_TRUE(sum.is_ok());
  EXPECT_EQ(*sum, "5");
  Result<std::string> failed = sum_owned(2, -3);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status(), not_found("second: value -3 is not positive"));
}

TEST(AssignOrReturnTest, WithContextKeepsTheCodeAndOk) {
  EXPECT_EQ(with_context("reading /a")(unavailable("timed out")),
            unavailable("reading /a: timed out"));
  EXPECT_TRUE(with_context("reading /a")(Status::ok()).is_ok());
}

}  // namespace
}  // namespace tessera
