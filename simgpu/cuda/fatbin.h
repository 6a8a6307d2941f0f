// What the simulator reads from a CUDA fat binary: the names of the kernels it holds. Kernels do
// not run on the simulator, so names (for cuModuleGetFunction, cuLibraryGetKernel and the wave
// times in SIMGPU_KERNEL_US) are all it needs.
//
// Layout (public: the toolkit's fatbinary_section.h names the wrapper and header magics; the
// entry header as vosen/ZLUDA cuda_types/src/dark_api.rs describes it, MIT or Apache-2.0): a
// 16-byte header (magic 0xBA55ED50, version 1, header size, size of what follows), then entries,
// each a header (kind 1 PTX or 2 ELF, its header size, payload size, flags with the compression
// bits) and its payload. ELF entries hold the kernels as global functions marked as entry points.
#pragma once

#include <elf.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace simgpu::driver {

inline constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1u;

struct ImageGlobal {
  std::string name;
  uint64_t size = 0;
};

struct ElfSymbols {
  std::vector<std::string> kernels;
  std::vector<ImageGlobal> globals;  // __device__ and __constant__ variables
};

struct FatbinContents {
  std::vector<std::string> kernels;  // from every readable entry, without repeats
  std::vector<ImageGlobal> globals;
  // Some entry could not be read (damaged: cut short, or its payload does not decompress to the
  // size it states): kernels it holds are not in the list.
  bool unreadable_entries = false;
  size_t total_bytes = 0;  // the header and every entry
};

// Reads the fat binary at `image` (its 16-byte header first); nullopt when it is not one. Where it
// holds ELF images for `preferred_sm` (90: sm_90) only those are read, else every entry.
// Compressed entries are decompressed: zstd (nvcc 12.4+, NVIDIA's libraries) and LZ4 raw blocks
// (earlier nvcc, cuFFT 12's PTX).
std::optional<FatbinContents> read_fatbin(const void* image, unsigned preferred_sm = 90);

// Kernel names in PTX text (its `.entry` directives).
std::vector<std::string> ptx_entry_names(std::string_view ptx);

// Entry-point functions and variables in a CUDA ELF image of `size` bytes; nullopt when it is
// not ELF64.
std::optional<ElfSymbols> elf_symbols(const uint8_t* image, size_t size);

// "_Z8burn_fmaPfi" -> "burn_fma": the identifier of an Itanium-mangled name, else the name.
std::string kernel_base_name(const std::string& name);

}  // namespace simgpu::driver
