// The dependency of the image's LD_PRELOAD library, installed where only the image's
// LD_LIBRARY_PATH leads.
extern "C" const char* tessera_test_image_dependency() {
  return "its dependency was found through the image's LD_LIBRARY_PATH";
}
