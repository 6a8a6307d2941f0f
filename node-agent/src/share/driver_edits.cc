#include "share/driver_edits.h"

#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::agent {
namespace fs = std::filesystem;

namespace {

constexpr char kToolkitKind[] = "nvidia.com/gpu";

#if defined(__aarch64__)
constexpr char kMultiarchDir[] = "/usr/lib/aarch64-linux-gnu";
constexpr char kMultiarchLibDir[] = "/lib/aarch64-linux-gnu";
#else
constexpr char kMultiarchDir[] = "/usr/lib/x86_64-linux-gnu";
constexpr char kMultiarchLibDir[] = "/lib/x86_64-linux-gnu";
#endif

// Where distributions and the driver's installer put the libraries, as container paths (searched
// in this order under the driver root; the first holding libcuda is the driver's).
const std::vector<std::string>& library_dirs() {
  static const std::vector<std::string> dirs = {kMultiarchDir, "/usr/lib64", "/lib64",
                                                kMultiarchLibDir, "/usr/lib"};
  return dirs;
}

// The driver's compute and management libraries (what nvidia-ctk mounts for compute and utility),
// with the soname number the loader asks for ("" = loaded by its versioned name only).
struct DriverLibrary {
  const char* base;
  const char* soname_number;
};
constexpr DriverLibrary kDriverLibraries[] = {
    {"libcuda", "1"},
    {"libcudadebugger", "1"},
    {"libnvidia-ml", "1"},
    {"libnvidia-ptxjitcompiler", "1"},
    {"libnvidia-nvvm", "4"},
    {"libnvidia-gpucomp", ""},
    {"libnvidia-allocator", "1"},
    {"libnvidia-cfg", "1"},
    {"libnvidia-opencl", "1"},
    {"libnvidia-pkcs11", ""},
    {"libnvidia-pkcs11-openssl3", ""},
};

constexpr const char* kDriverBinaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                           "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

const std::vector<std::string> kReadOnlyBind = {"ro", "nosuid", "nodev", "bind"};

std::string normalized_root(const std::string& root) {
  std::string r = fs::path(root).lexically_normal().string();
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r.empty() ? "/" : r;
}

// <root><container path>: where a file of the container's view lies on the host.
std::string host_path(const std::string& root, const std::string& container_path) {
  return root == "/" ? container_path : root + container_path;
}

bool exists_no_follow(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0;
}

// The regular file `container_path` names under `root`, following symlinks as a loader in a
// container rooted there would (absolute targets are relative to the root). Its container path,
// or nullopt when it is missing, dangles, or is not a regular file.
std::optional<std::string> resolve_in_root(const std::string& root, std::string container_path) {
  for (int hops = 0; hops < 16; ++hops) {
    const std::string host = host_path(root, container_path);
    struct stat info {};
    if (lstat(host.c_str(), &info) != 0) return std::nullopt;
    if (S_ISREG(info.st_mode)) return container_path;
    if (!S_ISLNK(info.st_mode)) return std::nullopt;
    std::error_code ec;
    const fs::path target = fs::read_symlink(host, ec);
    if (ec) return std::nullopt;
    const fs::path next =
        target.is_absolute() ? target : fs::path(container_path).parent_path() / target;
    container_path = next.lexically_normal().string();
  }
  return std::nullopt;
}

// "535.129.03" from ".../libcuda.so.535.129.03"; "" for a soname (".so.1") or anything else.
std::string version_of(const std::string& file_name, const std::string& base) {
  const std::string prefix = base + ".so.";
  if (file_name.rfind(prefix, 0) != 0) return "";
  const std::string suffix = file_name.substr(prefix.size());
  if (suffix.find('.') == std::string::npos) return "";
  if (suffix.find_first_not_of("0123456789.") != std::string::npos) return "";
  return suffix;
}

// The driver's version in a library folder: libcuda.so.1's target, else the one versioned
// libcuda there. "" when the folder has only an unversioned libcuda.so.1 (a simulator's).
std::string driver_version_in(const std::string& root, const std::string& dir) {
  if (const auto target = resolve_in_root(root, dir + "/libcuda.so.1"))
    return version_of(fs::path(*target).filename().string(), "libcuda");
  std::vector<std::string> versions;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(host_path(root, dir), ec)) {
    const std::string version = version_of(item.path().filename().string(), "libcuda");
    if (!version.empty() && resolve_in_root(root, dir + "/" + item.path().filename().string()))
      versions.push_back(version);
  }
  std::sort(versions.begin(), versions.end());
  return versions.empty() ? "" : versions.back();
}

bool has_libcuda(const std::string& root, const std::string& dir) {
  return resolve_in_root(root, dir + "/libcuda.so.1").has_value() ||
         !driver_version_in(root, dir).empty();
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// N from "/dev/nvidia<N>", else nullopt.
std::optional<unsigned> gpu_node_minor(const std::string& path) {
  static const std::string prefix = "/dev/nvidia";
  if (path.rfind(prefix, 0) != 0 || path.size() == prefix.size() || path.size() > prefix.size() + 6)
    return std::nullopt;
  const std::string digits = path.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return static_cast<unsigned>(std::stoul(digits));
}

// Adds one toolkit spec's GPU devices; false when the file is not a toolkit spec.
bool add_toolkit_devices(const YAML::Node& spec, ContainerDriver& driver) {
  if (!spec.IsMap() || !spec["kind"] || !spec["kind"].IsScalar() ||
      spec["kind"].as<std::string>() != kToolkitKind)
    return false;
  const YAML::Node devices = spec["devices"];
  if (!devices || !devices.IsSequence()) return false;
  bool found = false;
  for (const auto& device : devices) {
    if (!device.IsMap() || !device["name"] || !device["name"].IsScalar()) continue;
    const std::string name = device["name"].as<std::string>();
    const std::string id = std::string(kToolkitKind) + "=" + name;
    if (name == "all" || name.find(':') != std::string::npos) continue;  // every GPU; MIG
    if (name.rfind("GPU-", 0) == 0) {
      driver.toolkit_by_uuid.emplace(name, id);
      found = true;
      continue;
    }
    // Index-named ("0", "gpu0"): the device whose one GPU node is /dev/nvidia<minor>. (A const
    // YAML node's [] throws on a missing or scalar parent: each step is checked first.)
    const YAML::Node edits = device["containerEdits"];
    if (!edits || !edits.IsMap()) continue;
    const YAML::Node nodes = edits["deviceNodes"];
    if (!nodes || !nodes.IsSequence()) continue;
    for (const auto& node : nodes) {
      if (!node.IsMap() || !node["path"] || !node["path"].IsScalar()) continue;
      if (const auto minor = gpu_node_minor(node["path"].as<std::string>())) {
        driver.toolkit_by_minor.emplace(*minor, id);
        found = true;
      }
    }
  }
  return found;
}

}  // namespace

std::optional<DriverMode> parse_driver_mode(const std::string& text) {
  if (text == "auto") return DriverMode::kAuto;
  if (text == "toolkit") return DriverMode::kToolkit;
  if (text == "driver-root") return DriverMode::kDriverRoot;
  return std::nullopt;
}

const char* to_string(DriverMode mode) {
  switch (mode) {
    case DriverMode::kAuto:
      return "auto";
    case DriverMode::kToolkit:
      return "toolkit";
    case DriverMode::kDriverRoot:
      return "driver-root";
  }
  return "auto";
}

Result<std::string> toolkit_device_id(const ContainerDriver& driver, const std::string& uuid,
                                      unsigned minor) {
  if (const auto it = driver.toolkit_by_uuid.find(uuid); it != driver.toolkit_by_uuid.end())
    return it->second;
  if (const auto it = driver.toolkit_by_minor.find(minor); it != driver.toolkit_by_minor.end())
    return it->second;
  return not_found("the NVIDIA Container Toolkit's CDI spec (" + driver.toolkit_spec +
                   ") has no device for GPU " + uuid + " (/dev/nvidia" + std::to_string(minor) +
                   "): regenerate it with nvidia-ctk cdi generate");
}

Result<std::optional<ContainerDriver>> read_toolkit_specs(const std::vector<std::string>& dirs) {
  ContainerDriver driver;
  std::vector<std::string> read;
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& item : fs::directory_iterator(dir, ec)) {
      const std::string ext = item.path().extension().string();
      if (ext == ".yaml" || ext == ".yml" || ext == ".json") files.push_back(item.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find(kToolkitKind) == std::string::npos) continue;  // not NVIDIA's
      YAML::Node spec;
      try {
        spec = YAML::Load(text.str());  // JSON is YAML too
      } catch (const YAML::Exception& e) {
        return invalid_argument("cannot parse the CDI spec " + file.string() + ": " + e.what());
      }
      try {
        if (add_toolkit_devices(spec, driver)) read.push_back(file.string());
      } catch (const YAML::Exception& e) {
        return invalid_argument("unexpected content in the CDI spec " + file.string() + ": " +
                                e.what());
      }
    }
  }
  if (read.empty()) return std::optional<ContainerDriver>();
  driver.toolkit_spec = join(read, ", ");
  return std::optional<ContainerDriver>(std::move(driver));
}

Result<ContainerDriver> discover_driver_root(const std::string& driver_root) {
  const std::string root = normalized_root(driver_root);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return not_found("driver root " + root + " is not a folder (--driver-root)");
  ContainerDriver driver;
  driver.driver_root = root;

  std::string lib_dir;
  std::vector<std::string> searched;
  for (const auto& dir : library_dirs()) {
    searched.push_back(host_path(root, dir));
    if (has_libcuda(root, dir)) {
      lib_dir = dir;
      break;
    }
  }
  if (lib_dir.empty())
    return not_found("driver root " + root + ": no libcuda.so.1 or libcuda.so.<version> in " +
                     join(searched, ", ") +
                     " (is the NVIDIA driver installed there? see --driver-root)");
  driver.driver_version = driver_version_in(root, lib_dir);

  for (const auto& library : kDriverLibraries) {
    const std::string base = lib_dir + "/" + library.base + ".so.";
    std::optional<std::string> versioned;
    if (!driver.driver_version.empty())
      versioned = resolve_in_root(root, base + driver.driver_version);
    if (versioned)
      driver.mounts.push_back(
          {host_path(root, *versioned), base + driver.driver_version, kReadOnlyBind});
    if (*library.soname_number == '\0') continue;
    // The soname is what the loader looks for: the file it points to, mounted under that name (a
    // link would dangle in the container unless its target were mounted too).
    const std::string soname = base + library.soname_number;
    std::optional<std::string> target = resolve_in_root(root, soname);
    if (!target) target = versioned;
    if (target) driver.mounts.push_back({host_path(root, *target), soname, kReadOnlyBind});
  }

  for (const char* binary : kDriverBinaries) {
    for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin"}) {
      const std::string path = std::string(dir) + "/" + binary;
      if (const auto target = resolve_in_root(root, path)) {
        driver.mounts.push_back(
            {host_path(root, *target), std::string("/usr/bin/") + binary, kReadOnlyBind});
        break;
      }
    }
  }

  // The GPU Operator's driver container may create the nodes under its root; else the host's.
  driver.host_dev_dir =
      root != "/" && exists_no_follow(host_path(root, "/dev/nvidiactl")) ? root + "/dev" : "/dev";
  for (const char* node : kControlNodes) {
    const std::string host = driver.host_dev_dir + "/" + node;
    if (!exists_no_follow(host)) continue;
    driver.device_nodes.push_back(
        {std::string("/dev/") + node, driver.host_dev_dir == "/dev" ? "" : host});
  }
  return driver;
}

Result<ContainerDriver> discover_container_driver(const DriverOptions& options) {
  if (options.mode != DriverMode::kDriverRoot) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<ContainerDriver> toolkit,
                             read_toolkit_specs(options.toolkit_spec_dirs));
    if (toolkit) return std::move(*toolkit);
    if (options.mode == DriverMode::kToolkit)
      return not_found(
          "no NVIDIA Container Toolkit CDI spec (kind nvidia.com/gpu) with a GPU "
          "device in " +
          join(options.toolkit_spec_dirs, ", ") +
          " (--driver-mode=toolkit; run nvidia-ctk cdi generate)");
  }
  Result<ContainerDriver> root = discover_driver_root(options.driver_root);
  if (!root.is_ok() && options.mode == DriverMode::kAuto)
    return Status(root.status().code(),
                  "no NVIDIA Container Toolkit CDI spec (kind nvidia.com/gpu) in " +
                      join(options.toolkit_spec_dirs, ", ") + ", and " + root.status().message());
  return root;
}

std::string describe(const ContainerDriver& driver) {
  if (driver.uses_toolkit())
    return "the NVIDIA Container Toolkit's CDI devices (" + driver.toolkit_spec + ")";
  if (driver.uses_driver_root())
    return "driver root " + driver.driver_root +
           (driver.driver_version.empty() ? "" : " (driver " + driver.driver_version + ")") + ": " +
           std::to_string(driver.mounts.size()) + " files, " +
           std::to_string(driver.device_nodes.size()) + " control nodes";
  return "none";
}

}  // namespace tessera::agent
