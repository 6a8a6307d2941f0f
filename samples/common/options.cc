#include "options.h"

#include <functional>
#include <string_view>

#include "tessera/quantity.h"

namespace tessera::samples {
namespace {

uint64_t parse_quantity_or_throw(const std::string& name, const std::string& text) {
  const std::optional<uint64_t> bytes = parse_byte_quantity(text);
  if (!bytes) {
    throw CLI::ValidationError(name, "'" + text + "' is not a byte quantity (e.g. 4Gi, 512Mi)");
  }
  return *bytes;
}

CLI::Option* add_quantity_option(CLI::App& app, const std::string& name,
                                 std::function<void(uint64_t)> store,
                                 const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [name, store](const std::string& text) { store(parse_quantity_or_throw(name, text)); },
          description)
      ->type_name("QUANTITY");
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& options) {
  app.add_option("--device", options.device, "Device ordinal")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  const std::string proc_address(resolve_name(Resolve::kProcAddress));
  const std::string dlsym(resolve_name(Resolve::kDlsym));
  app.add_option_function<std::string>(
         "--resolve",
         [&options, dlsym](const std::string& mode) {
           options.resolve = mode == dlsym ? Resolve::kDlsym : Resolve::kProcAddress;
         },
         "How driver entry points are found: " + proc_address +
             " (cuGetProcAddress_v2, as cudart does) or " + dlsym +
             " (dlsym of the versioned symbol, as PyTorch's lazy stubs do)")
      ->check(CLI::IsMember({proc_address, dlsym}))
      ->default_str(proc_address);
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  return std::nullopt;
}

CLI::Option* add_quantity_option(CLI::App& app, const std::string& name, uint64_t& bytes,
                                 const std::string& description) {
  return add_quantity_option(
      app, name, [&bytes](uint64_t value) { bytes = value; }, description);
}

CLI::Option* add_quantity_option(CLI::App& app, const std::string& name,
                                 std::optional<uint64_t>& bytes, const std::string& description) {
  return add_quantity_option(
      app, name, [&bytes](uint64_t value) { bytes = value; }, description);
}

}  // namespace tessera::samples
