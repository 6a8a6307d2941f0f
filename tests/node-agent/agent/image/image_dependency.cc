// The dependency of the image's LD_PRELOAD library, installed where only the image's
// LD_LIBRARY_PATH leads.
// Exported: the build hides symbols by default.
extern "C" __attribute__((visibility("default"))) const char* tessera_test_image_dependency() {
  return "its dependency was found through the image's LD_LIBRARY_PATH";
}
