// Command-line pieces every sample shares, on CLI11: the device, how entry points are resolved,
// and byte quantities written the Kubernetes way ("4Gi", "512Mi", "1073741824").
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "common_options.h"

namespace tessera::samples {

void add_common_options(CLI::App& app, CommonOptions& options);

// Parses the command line into the app's options (what CLI11_PARSE does, as a value): the exit
// status when it ends the program (--help: 0; a usage error, printed: its code), else nullopt.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

// Adds an option that takes a byte quantity; a value that does not parse is a usage error.
CLI::Option* add_quantity_option(CLI::App& app, const std::string& name, uint64_t& bytes,
                                 const std::string& description);
CLI::Option* add_quantity_option(CLI::App& app, const std::string& name,
                                 std::optional<uint64_t>& bytes, const std::string& description);

}  // namespace tessera::samples
