#include "tessera/flags/listen_address.h"

#include <gtest/gtest.h>

#include "tessera/flags/log_flags.h"

namespace tessera::flags {
namespace {

TEST(ListenAddress, HostPortEveryAddressAndBracketedV6) {
  Result<ListenAddress> any = parse_listen_address(":8443", "--listen");
  ASSERT_TRUE(any.is_ok());
  EXPECT_EQ(any->host, "0.0.0.0");
  EXPECT_EQ(any->port, 8443);
  Result<ListenAddress> v6 = parse_listen_address("[::1]:0", "--listen");
  ASSERT_TRUE(v6.is_ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  Result<ListenAddress> host = parse_listen_address("10.0.0.1:65535", "--metrics-address");
  ASSERT_TRUE(host.is_ok());
  EXPECT_EQ(host->host, "10.0.0.1");
  EXPECT_EQ(host->port, 65535);
}

TEST(ListenAddress, BadInputNamesTheFlagAndTheValue) {
  EXPECT_EQ(parse_listen_address("8443", "--listen").status(),
            invalid_argument("--listen 8443: no :port"));
  for (const char* bad : {":", ":65536", ":94a4", "host:-1", "host:", "host:99999", ":123456"})
    EXPECT_EQ(
        parse_listen_address(bad, "--metrics-address").status(),
        invalid_argument(std::string("--metrics-address ") + bad + ": the port must be 0..65535"))
        << bad;
}

TEST(ListenAddress, CliCheckAllowsEmptyOnlyWhenAsked) {
  for (bool allow_empty : {true, false}) {
    CLI::App app;
    std::string address;
    app.add_option("--metrics-address", address)
        ->check(listen_address_check("--metrics-address", allow_empty));
    EXPECT_NO_THROW(app.parse(std::vector<std::string>{"[::1]:9464", "--metrics-address"}));
    EXPECT_EQ(address, "[::1]:9464");
    if (allow_empty) {
      EXPECT_NO_THROW(app.parse(std::vector<std::string>{"", "--metrics-address"}));
    } else {
      EXPECT_THROW(app.parse(std::vector<std::string>{"", "--metrics-address"}),
                   CLI::ValidationError);
    }
    try {
      app.parse(std::vector<std::string>{"9464", "--metrics-address"});
      ADD_FAILURE() << "9464 was accepted";
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("--metrics-address 9464: no :port"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LogFlags, FormatFromFlagOrEnvironmentAndCountedVerbosity) {
  CLI::App app;
  std::string format = "text";
  int verbosity = 0;
  add_log_flags(app, format, verbosity, "TESSERA_TEST_LOG_FORMAT");
  app.parse(std::vector<std::string>{"-v", "-v", "json", "--log-format"});
  EXPECT_EQ(format, "json");
  EXPECT_EQ(verbosity, 2);
  EXPECT_THROW(app.parse(std::vector<std::string>{"yaml", "--log-format"}), CLI::ValidationError);

  CLI::App from_env;
  std::string env_format = "text";
  int env_verbosity = 0;
  add_log_flags(from_env, env_format, env_verbosity, "TESSERA_TEST_LOG_FORMAT");
  ASSERT_EQ(setenv("TESSERA_TEST_LOG_FORMAT", "json", 1), 0);
  from_env.parse(std::vector<std::string>{});
  unsetenv("TESSERA_TEST_LOG_FORMAT");
  EXPECT_EQ(env_format, "json");
  EXPECT_EQ(env_verbosity, 0);
}

}  // namespace
}  // namespace tessera::flags
