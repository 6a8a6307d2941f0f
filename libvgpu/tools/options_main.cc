// tessera-vgpu-options: prints libvgpu's option table (--print) and the values the current
// environment gives, with any problem the shim would report. Exit status 1 if there is one.
#include <cstdlib>
#include <cstring>

#include "tessera/vgpu/options.h"

extern char** environ;

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--print") != 0) {
    tessera::vgpu::print_options(2, nullptr);
    return 2;
  }
  tessera::vgpu::Options options;
  tessera::vgpu::read_options([](const char* name) -> const char* { return std::getenv(name); },
                              &options, environ);
  tessera::vgpu::print_options(1, &options);
  return options.message_count > 0 ? 1 : 0;
}
