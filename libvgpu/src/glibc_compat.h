// libvgpu loads into arbitrary containers, so it must not need a newer glibc than 2.17. glibc 2.34
// moved the dl* functions into libc under new default versions; reference the versions every
// x86_64 glibc has (GLIBC_2.2.5; libdl.so.2 provides them before 2.34, libc.so.6 after). On
// aarch64 the oldest version is GLIBC_2.17 and nothing needs pinning. Include this header in
// every translation unit that calls a dl* function; tests/libvgpu/check_shim_library.py fails the
// build if any GLIBC_2.18+ version is referenced.
#pragma once

#include <dlfcn.h>

#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
// The compute meter's thread (compute/gate.cc): libpthread.so.0 before 2.34, libc.so.6 after.
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_attr_init,pthread_attr_init@GLIBC_2.2.5");
__asm__(".symver pthread_attr_destroy,pthread_attr_destroy@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setdetachstate,pthread_attr_setdetachstate@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.2.5");
// The per-thread call counters (hooks.cc): a key whose destructor frees a thread's block.
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
#endif
