#include "tessera/shared_library.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tessera/unique_fd.h"

namespace tessera {
namespace {

#if defined(__x86_64__)
constexpr unsigned kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kHostMachine = EM_AARCH64;
#elif defined(__i386__)
constexpr unsigned kHostMachine = EM_386;
#else
#error "check_shared_library: add this architecture's ELF machine"
#endif
constexpr unsigned char kHostClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
constexpr unsigned char kHostData =
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;

Status unusable(const std::string& path, const std::string& why) {
  return failed_precondition(path + " " + why);
}

// Whether a 64-bit ELF's dynamic section carries DF_1_PIE: a position-independent executable is
// ET_DYN too, but ld.so refuses to preload it (and then only warns). Bounded reads of the program
// headers and of PT_DYNAMIC; a file whose headers cannot be read says nothing here.
bool is_pie_executable(int fd, const Elf64_Ehdr& header) {
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_phentsize != sizeof(Elf64_Phdr) ||
      header.e_phnum == 0 || header.e_phnum > 256)
    return false;
  Elf64_Phdr programs[256];
  const size_t bytes = sizeof(Elf64_Phdr) * header.e_phnum;
  if (pread(fd, programs, bytes, static_cast<off_t>(header.e_phoff)) != static_cast<ssize_t>(bytes))
    return false;
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    if (programs[i].p_type != PT_DYNAMIC) continue;
    Elf64_Dyn entries[512];
    const size_t size = std::min<uint64_t>(programs[i].p_filesz, sizeof entries);
    const ssize_t got = pread(fd, entries, size, static_cast<off_t>(programs[i].p_offset));
    if (got <= 0) return false;
    for (size_t e = 0; e < static_cast<size_t>(got) / sizeof(Elf64_Dyn); ++e) {
      if (entries[e].d_tag == DT_NULL) return false;
      if (entries[e].d_tag == DT_FLAGS_1) return (entries[e].d_un.d_val & DF_1_PIE) != 0;
    }
    return false;
  }
  return false;
}

}  // namespace

Status check_shared_library(const std::string& path) {
  const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return unusable(path, std::string("cannot be opened: ") + std::strerror(errno));
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode))
    return unusable(path, "is not a regular file");
  // Both headers begin with e_ident, e_type and e_machine at the same offsets.
  Elf64_Ehdr header{};
  const ssize_t got = pread(fd.get(), &header, sizeof(header), 0);
  if (got < static_cast<ssize_t>(EI_NIDENT + 4) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    return unusable(path, "is not an ELF shared library (no ELF header)");
  if (header.e_ident[EI_CLASS] != kHostClass)
    return unusable(path, std::string("is a ") +
                              (header.e_ident[EI_CLASS] == ELFCLASS32 ? "32" : "64") +
                              "-bit ELF file; this host loads " +
                              (kHostClass == ELFCLASS64 ? "64" : "32") + "-bit libraries");
  if (header.e_ident[EI_DATA] != kHostData)
    return unusable(path, "has the other byte order than this host");
  if (header.e_type != ET_DYN)
    return unusable(path, "is an ELF file of type " + std::to_string(header.e_type) +
                              (header.e_type == ET_EXEC  ? " (an executable)"
                               : header.e_type == ET_REL ? " (an object file)"
                                                         : "") +
                              ", not a shared library (ET_DYN)");
  if (header.e_machine != kHostMachine)
    return unusable(path, "is built for ELF machine " + std::to_string(header.e_machine) +
                              ", this host is machine " + std::to_string(kHostMachine));
  if (is_pie_executable(fd.get(), header))
    return unusable(path,
                    "is a position-independent executable (DF_1_PIE), not a shared library: the "
                    "loader cannot preload it");
  return Status::ok();
}

}  // namespace tessera
