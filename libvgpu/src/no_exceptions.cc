// The shim is built without exceptions. A few libstdc++ headers still name the functions that
// throw on a broken precondition (std::string_view::substr out of range); linking those from the
// static libstdc++ would drag in the whole exception runtime, libgcc's unwinder and their newer
// glibc symbols. In the shim a broken precondition is a bug: report it and abort.
#include <cstdlib>

#include "os/system_calls.h"

namespace std {

__attribute__((visibility("hidden"), noreturn)) void __throw_out_of_range_fmt(const char*, ...) {
  static constexpr char kMessage[] = "tessera: fatal: out-of-range access inside libvgpu\n";
  [[maybe_unused]] ssize_t ignored = tessera::vgpu::os::write(2, kMessage, sizeof kMessage - 1);
  abort();
}

}  // namespace std
