// A container image's own LD_PRELOAD library: says it was loaded, and that its dependency (which
// only the image's LD_LIBRARY_PATH leads to) was found. The agent's CDI spec must leave both
// settings as the image has them.
#include <cstdio>

extern "C" const char* tessera_test_image_dependency();

__attribute__((constructor)) static void announce_image_preload() {
  std::fprintf(stderr, "image LD_PRELOAD loaded; %s\n", tessera_test_image_dependency());
}
