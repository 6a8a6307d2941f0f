// The log flags every daemon takes: --log-format text|json (with an environment variable) and
// -v/--verbose, counted.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tessera::flags {

// Adds --log-format into `format` (checked by log::parse_format, read from `format_env` when the
// flag is absent) and -v,--verbose counted into `verbosity` (-v debug, -vv trace).
void add_log_flags(CLI::App& app, std::string& format, int& verbosity,
                   const std::string& format_env);

}  // namespace tessera::flags
