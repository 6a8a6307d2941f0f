// Test doubles for what a node gives containers: a fake driver root (a folder laid out as the
// NVIDIA driver installs itself, with regular files standing in for the libraries, binaries and
// device nodes: discovery looks at names and links only), and a fake shim (an ELF header of this
// host's class and machine, type ET_DYN: all check_shim_library reads).
#pragma once

#include <elf.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "share/driver_edits.h"

namespace tessera::agent::testing {

inline constexpr char kFakeDriverVersion[] = "550.54.15";
inline constexpr char kFakeLibDir[] = "/usr/lib/x86_64-linux-gnu";

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// An ELF header: `elf_class` ELFCLASS64/32, `type` ET_DYN/ET_EXEC, `machine` EM_*.
inline std::string elf_header(unsigned char elf_class = ELFCLASS64, uint16_t type = ET_DYN,
                              uint16_t machine = EM_X86_64) {
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = elf_class;
  header.e_ident[EI_DATA] = ELFDATA2LSB;
  header.e_ident[EI_VERSION] = EV_CURRENT;
  header.e_type = type;
  header.e_machine = machine;
  header.e_version = EV_CURRENT;
  return std::string(reinterpret_cast<const char*>(&header), sizeof header);
}

// A file check_shim_library accepts, at `path`; returns the path.
inline std::string write_fake_shim(const std::filesystem::path& path) {
  write_text(path, elf_header());
  return path.string();
}

// The driver as the NVIDIA installer lays it out under `root`: versioned libraries with their
// soname links (and libcuda.so, the development link nothing mounts), the binaries, and the
// device nodes of one GPU (minor 0) and the control devices (regular files here).
inline void make_fake_driver_root(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  const fs::path lib = root / std::string(kFakeLibDir).substr(1);
  const std::string version = kFakeDriverVersion;
  for (const char* base : {"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm",
                           "libcudadebugger", "libnvidia-gpucomp"})
    write_text(lib / (std::string(base) + ".so." + version), "fake " + std::string(base));
  fs::create_symlink("libcuda.so." + version, lib / "libcuda.so.1");
  fs::create_symlink("libcuda.so.1", lib / "libcuda.so");
  fs::create_symlink("libnvidia-ml.so." + version, lib / "libnvidia-ml.so.1");
  fs::create_symlink("libnvidia-ptxjitcompiler.so." + version,
                     lib / "libnvidia-ptxjitcompiler.so.1");
  fs::create_symlink("libnvidia-nvvm.so." + version, lib / "libnvidia-nvvm.so.4");
  // An absolute link, as some packages ship them: relative to the root in the container's view.
  fs::create_symlink(std::string(kFakeLibDir) + "/libcudadebugger.so." + version,
                     lib / "libcudadebugger.so.1");
  // A leftover of an older driver: not this driver's, never mounted.
  write_text(lib / "libcuda.so.470.42.01", "old");
  for (const char* binary : {"nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"})
    write_text(root / "usr/bin" / binary, "#!/bin/sh\n");
  for (const char* node : {"nvidia0", "nvidiactl", "nvidia-uvm"})
    write_text(root / "dev" / node, "");
}

// make_fake_driver_root, then what discovery finds there.
inline ContainerDriver fake_container_driver(const std::filesystem::path& root) {
  make_fake_driver_root(root);
  Result<ContainerDriver> driver = discover_driver_root(root.string());
  if (!driver.is_ok()) {  // the double itself is broken: no test can mean anything
    std::fprintf(stderr, "fake driver root: %s\n", driver.status().message().c_str());
    std::abort();
  }
  return std::move(driver).value();
}

}  // namespace tessera::agent::testing
