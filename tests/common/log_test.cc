#include "tessera/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::log {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

// Captures lines and drives the clock the logger reads.
class LogTest : public ::testing::Test {
 protected:
  void configure_with(Format format, Level level = Level::kInfo,
                      TextStyle style = TextStyle::kDaemon) {
    Options options;
    options.logger = style == TextStyle::kDaemon ? "tessera-node-agent" : "tessera events";
    options.level = level;
    options.format = format;
    options.text_style = style;
    options.repeat_window = milliseconds(10000);
    options.now = [this] { return now_; };
    options.sink = [this](std::string_view line) { lines_.emplace_back(line); };
    configure(std::move(options));
  }
  void TearDown() override { configure(Options{}); }

  system_clock::time_point now_ = system_clock::time_point(milliseconds(1796140800123));
  std::vector<std::string> lines_;
};

TEST_F(LogTest, TextLineHasTimeLevelMessageAndFields) {
  configure_with(Format::kText);
  info("prepared share", {{"claim", "team-a/train"}, {"devices", 2}});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "2026-12-01T16:00:00.123Z info  prepared share claim=team-a/train devices=2");
}

TEST_F(LogTest, CommandStyleReadsLikeACliMessage) {
  configure_with(Format::kText, Level::kDebug, TextStyle::kCommand);
  error("cannot open the agent socket", {{"path", "/var/lib/tessera/api.sock"}});
  warn("no agent: local shares only");
  debug("polling", {{"interval_ms", 1000}});
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_EQ(lines_[0],
            "tessera events: cannot open the agent socket path=/var/lib/tessera/api.sock");
  EXPECT_EQ(lines_[1], "tessera events: warning: no agent: local shares only");
  EXPECT_EQ(lines_[2], "tessera events: debug: polling interval_ms=1000");
}

TEST_F(LogTest, JsonIsOneObjectPerLineWithTheFields) {
  configure_with(Format::kJson);
  warn("finding", {{"kind", "over_memory_limit"}, {"share", "c1-gpu0-0"}, {"message", "x"}});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(lines_[0]);
  EXPECT_EQ(parsed["time"], "2026-12-01T16:00:00.123Z");
  EXPECT_EQ(parsed["level"], "warn");
  EXPECT_EQ(parsed["logger"], "tessera-node-agent");
  EXPECT_EQ(parsed["message"], "finding");
  EXPECT_EQ(parsed["kind"], "over_memory_limit");
  EXPECT_EQ(parsed["share"], "c1-gpu0-0");
  // A field named like a record key does not replace it.
  EXPECT_EQ(parsed["field.message"], "x");
}

TEST_F(LogTest, ControlCharactersInValuesCannotForgeALine) {
  configure_with(Format::kText);
  info("claim refused", {{"name", "x\ninfo  prepared share claim=evil\x1b[2J"}});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  EXPECT_EQ(lines_[0].find('\x1b'), std::string::npos);
  EXPECT_NE(lines_[0].find(R"(name="x\ninfo  prepared share claim=evil\x1b[2J")"),
            std::string::npos)
      << lines_[0];

  lines_.clear();
  configure_with(Format::kJson);
  info("claim refused", {{"name", "a\nb\xff"}});  // invalid UTF-8 too
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(lines_[0])["name"].get<std::string>().substr(0, 3), "a\nb");
}

TEST_F(LogTest, LevelsFilterAndVerboseAddsDetail) {
  configure_with(Format::kText, verbose(Level::kInfo, 0));
  debug("hidden");
  info("shown");
  EXPECT_EQ(lines_.size(), 1u);
  configure_with(Format::kText, verbose(Level::kInfo, 1));
  debug("shown at -v");
  trace("hidden at -v");
  EXPECT_EQ(lines_.size(), 2u);
  EXPECT_EQ(verbose(Level::kInfo, 2), Level::kTrace);
  EXPECT_EQ(verbose(Level::kInfo, 9), Level::kTrace);
}

TEST_F(LogTest, RepeatsWithinTheWindowAreCountedNotWritten) {
  configure_with(Format::kText);
  for (int i = 0; i < 5; ++i) warn("NVML events not supported", {{"gpu", "GPU-1"}});
  warn("NVML events not supported", {{"gpu", "GPU-2"}});  // other fields: another line
  EXPECT_EQ(lines_.size(), 2u);
  now_ += milliseconds(10000);
  warn("NVML events not supported", {{"gpu", "GPU-1"}});
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_NE(lines_[2].find(" repeated=4"), std::string::npos) << lines_[2];
  // The window restarts at the line written.
  warn("NVML events not supported", {{"gpu", "GPU-1"}});
  EXPECT_EQ(lines_.size(), 3u);
}

TEST(LogFlags, ParseFormatAndLevelNameTheFlagAndValue) {
  EXPECT_EQ(*parse_format("json"), Format::kJson);
  EXPECT_EQ(*parse_format("text"), Format::kText);
  const Result<Format> bad = parse_format("xml\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "--log-format=\"xml\\n\": expected text or json");
  EXPECT_EQ(*parse_level("debug"), Level::kDebug);
  EXPECT_FALSE(parse_level("loud").is_ok());
}

}  // namespace
}  // namespace tessera::log
