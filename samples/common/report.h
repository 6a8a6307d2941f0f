// Results are one JSON line on stdout, with the same keys on the simulator and on a real GPU, so
// tests and the demo read them the same way. Errors go to stderr with a non-zero exit.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string_view>

namespace tessera::samples {

class Driver;
struct DeviceInfo;

using Json = nlohmann::ordered_json;

// The keys every sample starts with: sample, device, device_index, driver_version, resolve.
Json report_header(std::string_view sample, const Driver& driver, const DeviceInfo& device);

// Writes the report as one line and flushes, so a reader sees it even if the process is killed.
void print_report(const Json& report);

// Runs a sample's body; an exception becomes "<sample>: <message>" on stderr and exit status 1.
int run_sample(std::string_view sample, const std::function<void()>& body);

}  // namespace tessera::samples
