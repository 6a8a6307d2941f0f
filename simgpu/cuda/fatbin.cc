#include "fatbin.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <string_view>

namespace simgpu::driver {
namespace {

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t entries_size;  // what follows the header
};

struct EntryHeader {
  uint16_t kind;  // 1 PTX, 2 ELF
  uint16_t version;
  uint32_t header_size;
  uint32_t payload_size;  // the bytes that follow the header (padding included)
  uint32_t reserved0;
  uint32_t compressed_size;  // of the payload, when compressed
  uint32_t reserved1[2];
  uint32_t sm_version;  // 90 for sm_90
  uint32_t reserved2[2];
  uint64_t flags;
  uint64_t reserved3;
  uint64_t uncompressed_size;  // when compressed
};
static_assert(sizeof(EntryHeader) == 64 && offsetof(EntryHeader, flags) == 40);

constexpr uint16_t kEntryPtx = 1;
constexpr uint16_t kEntryElf = 2;
constexpr uint64_t kCompressedLz4 = 0x2000;
constexpr uint64_t kCompressedZstd = 0x8000;
// The ELF symbol's st_other bit that marks a kernel (an entry point) in a CUDA image.
constexpr unsigned char kCudaEntryOther = 0x10;
// A fat binary is far smaller than this; a header claiming more is not one.
constexpr uint64_t kMaxFatbinBytes = 1ull << 34;
// No kernel image is larger; a header claiming more is refused rather than allocated.
constexpr uint64_t kMaxEntryBytes = 1ull << 30;

// The payload of a compressed entry (zstd: nvcc since CUDA 12.4; LZ4 raw blocks: earlier nvcc,
// and the PTX inside cuFFT 12), or nullopt when it does not decompress to its size.
std::optional<std::vector<uint8_t>> decompress(const EntryHeader& entry, const uint8_t* payload) {
  if (entry.compressed_size == 0 || entry.compressed_size > entry.payload_size ||
      entry.uncompressed_size == 0 || entry.uncompressed_size > kMaxEntryBytes) {
    return std::nullopt;
  }
  std::vector<uint8_t> out(entry.uncompressed_size);
  if (entry.flags & kCompressedZstd) {
    const size_t got = ZSTD_decompress(out.data(), out.size(), payload, entry.compressed_size);
    if (ZSTD_isError(got) || got != out.size()) return std::nullopt;
    return out;
  }
  const int got = LZ4_decompress_safe(
      reinterpret_cast<const char*>(payload), reinterpret_cast<char*>(out.data()),
      static_cast<int>(entry.compressed_size), static_cast<int>(out.size()));
  if (got < 0 || static_cast<size_t>(got) != out.size()) return std::nullopt;
  return out;
}

template <typename T>
bool read_at(const uint8_t* base, size_t size, size_t offset, T& out) {
  if (offset > size || size - offset < sizeof(T)) return false;
  std::memcpy(&out, base + offset, sizeof(T));
  return true;
}

void add_unique(std::vector<std::string>& names, std::string name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
}

}  // namespace

std::vector<std::string> ptx_entry_names(std::string_view ptx) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string_view::npos) {
    pos += 6;
    if (pos < ptx.size() && ptx[pos] != ' ' && ptx[pos] != '\t') continue;
    while (pos < ptx.size() && (ptx[pos] == ' ' || ptx[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < ptx.size() && ptx[end] != '(' && ptx[end] != ' ' && ptx[end] != '\n' &&
           ptx[end] != '\t' && ptx[end] != '\r') {
      ++end;
    }
    if (end > pos) add_unique(names, std::string(ptx.substr(pos, end - pos)));
    pos = end;
  }
  return names;
}

std::optional<ElfSymbols> elf_symbols(const uint8_t* image, size_t size) {
  Elf64_Ehdr header;
  if (!read_at(image, size, 0, header) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr)) {
    return std::nullopt;
  }
  ElfSymbols found;
  for (unsigned i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr symbols;
    if (!read_at(image, size, header.e_shoff + i * sizeof(Elf64_Shdr), symbols)) break;
    if (symbols.sh_type != SHT_SYMTAB || symbols.sh_entsize != sizeof(Elf64_Sym)) continue;
    Elf64_Shdr strings;
    if (!read_at(image, size, header.e_shoff + symbols.sh_link * sizeof(Elf64_Shdr), strings) ||
        strings.sh_offset > size || strings.sh_size > size - strings.sh_offset) {
      continue;
    }
    const std::string_view table(reinterpret_cast<const char*>(image) + strings.sh_offset,
                                 strings.sh_size);
    for (uint64_t offset = 0; offset + sizeof(Elf64_Sym) <= symbols.sh_size;
         offset += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol;
      if (!read_at(image, size, symbols.sh_offset + offset, symbol)) break;
      if (symbol.st_name >= table.size()) continue;
      const std::string_view rest = table.substr(symbol.st_name);
      std::string name(rest.substr(0, rest.find('\0')));
      if (ELF64_ST_TYPE(symbol.st_info) == STT_FUNC && (symbol.st_other & kCudaEntryOther)) {
        add_unique(found.kernels, std::move(name));
      } else if (ELF64_ST_TYPE(symbol.st_info) == STT_OBJECT && symbol.st_size > 0 &&
                 std::none_of(found.globals.begin(), found.globals.end(),
                              [&](const ImageGlobal& g) { return g.name == name; })) {
        found.globals.push_back({std::move(name), symbol.st_size});
      }
    }
  }
  return found;
}

std::optional<FatbinContents> read_fatbin(const void* image, unsigned preferred_sm) {
  if (!image) return std::nullopt;
  FatbinHeader header;
  std::memcpy(&header, image, sizeof header);
  if (header.magic != kFatbinMagic || header.header_size < sizeof header ||
      header.entries_size > kMaxFatbinBytes) {
    return std::nullopt;
  }
  const auto* base = static_cast<const uint8_t*>(image);
  const size_t total = header.header_size + header.entries_size;
  FatbinContents contents;
  contents.total_bytes = total;
  // The entries, and whether one is an ELF for the preferred architecture: then only those are
  // read (each architecture's image holds the same kernels; decompressing one is enough).
  struct Entry {
    EntryHeader header;
    const uint8_t* payload;
  };
  std::vector<Entry> entries;
  bool has_preferred_elf = false;
  for (size_t offset = header.header_size; offset < total;) {
    EntryHeader entry;
    if (!read_at(base, total, offset, entry) || entry.header_size < sizeof entry ||
        entry.header_size > total - offset ||
        entry.payload_size > total - offset - entry.header_size) {
      contents.unreadable_entries = true;
      break;
    }
    entries.push_back({entry, base + offset + entry.header_size});
    has_preferred_elf =
        has_preferred_elf || (entry.kind == kEntryElf && entry.sm_version == preferred_sm);
    offset += entry.header_size + entry.payload_size;
  }
  for (const Entry& entry : entries) {
    if (has_preferred_elf &&
        (entry.header.kind != kEntryElf || entry.header.sm_version != preferred_sm)) {
      continue;
    }
    const uint8_t* payload = entry.payload;
    size_t size = entry.header.payload_size;
    std::optional<std::vector<uint8_t>> inflated;
    if (entry.header.flags & (kCompressedZstd | kCompressedLz4)) {
      inflated = decompress(entry.header, payload);
      if (!inflated) {
        contents.unreadable_entries = true;
        continue;
      }
      payload = inflated->data();
      size = inflated->size();
    }
    if (entry.header.kind == kEntryElf) {
      if (auto symbols = elf_symbols(payload, size)) {
        for (std::string& name : symbols->kernels) add_unique(contents.kernels, std::move(name));
        for (ImageGlobal& global : symbols->globals) {
          if (std::none_of(contents.globals.begin(), contents.globals.end(),
                           [&](const ImageGlobal& g) { return g.name == global.name; })) {
            contents.globals.push_back(std::move(global));
          }
        }
      } else {
        contents.unreadable_entries = true;
      }
    } else if (entry.header.kind == kEntryPtx) {
      const auto* text = reinterpret_cast<const char*>(payload);
      for (std::string& name : ptx_entry_names(std::string_view(text, strnlen(text, size)))) {
        add_unique(contents.kernels, std::move(name));
      }
    }
  }
  return contents;
}

std::string kernel_base_name(const std::string& name) {
  if (name.size() < 3 || name[0] != '_' || name[1] != 'Z') return name;
  size_t pos = 2;
  if (name[pos] == 'N') return name;  // nested (a namespace or class first): kept whole
  size_t length = 0;
  size_t digits = pos;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) {
    length = length * 10 + static_cast<size_t>(name[digits] - '0');
    ++digits;
  }
  if (digits == pos || digits + length > name.size()) return name;
  return name.substr(digits, length);
}

}  // namespace simgpu::driver
