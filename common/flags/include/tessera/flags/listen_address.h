// The address a daemon listens on, as its flag gives it: the agent's --metrics-address and the
// webhook's --listen.
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "tessera/status.h"

namespace tessera::flags {

struct ListenAddress {
  std::string host;  // "0.0.0.0" for ":port"
  int port = 0;      // 0: any free port (tests)
};

// "host:port", ":port" (every address) or "[v6]:port". kInvalidArgument naming `flag` and the
// value: "--listen 8443: no :port".
Result<ListenAddress> parse_listen_address(const std::string& address, std::string_view flag);

// A CLI11 check of such a flag, with parse_listen_address's message; `allow_empty`: "" means none.
CLI::Validator listen_address_check(std::string flag, bool allow_empty);

}  // namespace tessera::flags
