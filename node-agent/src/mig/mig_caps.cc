#include "mig/mig_caps.h"

#include <sstream>

#include "files/atomic_file.h"

namespace tessera::agent {
namespace {

std::optional<unsigned> parse_number(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return static_cast<unsigned>(std::stoul(text));
}

std::string trimmed(std::string text) {
  text.erase(0, text.find_first_not_of(" \t"));
  text.erase(text.find_last_not_of(" \t\r") + 1);
  return text;
}

}  // namespace

Result<unsigned> parse_caps_minor(const std::string& text, const std::string& source) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || trimmed(line.substr(0, colon)) != "DeviceFileMinor") continue;
    const std::string value = trimmed(line.substr(colon + 1));
    if (const auto minor = parse_number(value)) return *minor;
    return invalid_argument(source + ": DeviceFileMinor: expected a number, got \"" + value + "\"");
  }
  return invalid_argument(source + ": no DeviceFileMinor line");
}

Result<unsigned> parse_caps_major(const std::string& text, const std::string& source) {
  std::istringstream lines(text);
  std::string line;
  bool character = false;
  while (std::getline(lines, line)) {
    const std::string entry = trimmed(line);
    if (entry == "Character devices:") character = true;
    if (entry == "Block devices:") character = false;
    if (!character) continue;
    const size_t space = entry.find(' ');
    if (space == std::string::npos || trimmed(entry.substr(space + 1)) != "nvidia-caps") continue;
    if (const auto major = parse_number(entry.substr(0, space))) return *major;
  }
  return not_found(source + ": no character device nvidia-caps (is the NVIDIA driver loaded?)");
}

Result<MigCapsNodes> read_mig_caps(const std::string& proc_root, unsigned parent_minor,
                                   unsigned gi_id, unsigned ci_id) {
  const std::string gi_file = proc_root + "/driver/nvidia/capabilities/gpu" +
                              std::to_string(parent_minor) + "/mig/gi" + std::to_string(gi_id) +
                              "/access";
  const std::string ci_file = proc_root + "/driver/nvidia/capabilities/gpu" +
                              std::to_string(parent_minor) + "/mig/gi" + std::to_string(gi_id) +
                              "/ci" + std::to_string(ci_id) + "/access";
  const std::string devices_file = proc_root + "/devices";
  MigCapsNodes nodes;
  for (const auto& [file, minor] :
       {std::pair{gi_file, &nodes.gi_minor}, {ci_file, &nodes.ci_minor}}) {
    const std::optional<std::string> text = read_file(file);
    if (!text) return not_found("cannot read " + file + " (the MIG instance's capability)");
    TESSERA_ASSIGN_OR_RETURN(*minor, parse_caps_minor(*text, file));
  }
  const std::optional<std::string> devices = read_file(devices_file);
  if (!devices) return not_found("cannot read " + devices_file);
  TESSERA_ASSIGN_OR_RETURN(nodes.major, parse_caps_major(*devices, devices_file));
  return nodes;
}

std::string caps_node_path(unsigned minor) {
  return "/dev/nvidia-caps/nvidia-cap" + std::to_string(minor);
}

}  // namespace tessera::agent
