#include "tessera/flags/log_flags.h"

#include "tessera/log.h"

namespace tessera::flags {

void add_log_flags(CLI::App& app, std::string& format, int& verbosity,
                   const std::string& format_env) {
  app.add_option("--log-format", format,
                 "text (one line per record) or json (one JSON object per line, with fields such "
                 "as claim and share)")
      ->envname(format_env)
      ->check(CLI::Validator(
          [](const std::string& value) { return log::parse_format(value).status().message(); },
          "text|json", "log format"))
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbosity, "More detail in the log: -v debug, -vv trace");
}

}  // namespace tessera::flags
