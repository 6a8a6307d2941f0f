#include "report.h"

#include <exception>
#include <iostream>
#include <string>

#include "driver.h"

namespace tessera::samples {

Json report_header(std::string_view sample, const Driver& driver, const DeviceInfo& device) {
  Json report;
  report["sample"] = sample;
  report["device"] = device.name;
  report["device_index"] = device.ordinal;
  report["driver_version"] = driver.version();
  report["resolve"] = resolve_name(driver.resolve());
  return report;
}

void print_report(const Json& report) {
  std::cout << report.dump() << std::endl;
}

int run_sample(std::string_view sample, const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << sample << ": " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace tessera::samples
