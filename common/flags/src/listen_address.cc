#include "tessera/flags/listen_address.h"

namespace tessera::flags {

Result<ListenAddress> parse_listen_address(const std::string& address, std::string_view flag) {
  const std::string named = std::string(flag) + " " + address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return invalid_argument(named + ": no :port");
  ListenAddress out;
  out.host = address.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  if (out.host.empty()) out.host = "0.0.0.0";
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return invalid_argument(named + ": the port must be 0..65535");
  out.port = std::stoi(port);
  return out;
}

CLI::Validator listen_address_check(std::string flag, bool allow_empty) {
  return CLI::Validator(
      [flag = std::move(flag), allow_empty](const std::string& address) {
        if (allow_empty && address.empty()) return std::string();
        return parse_listen_address(address, flag).status().message();
      },
      "[HOST]:PORT", "listen address");
}

}  // namespace tessera::flags
