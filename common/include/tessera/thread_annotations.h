// Clang's thread-safety annotations (-Wthread-safety), as macros: under clang they expand to the
// attributes, elsewhere to nothing. https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
#pragma once

#if defined(__clang__)
#define TESSERA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TESSERA_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (a capability); `name` appears in the analysis' messages.
#define TESSERA_CAPABILITY(name) TESSERA_THREAD_ANNOTATION(capability(name))
// An RAII type that holds a capability for its lifetime.
#define TESSERA_SCOPED_CAPABILITY TESSERA_THREAD_ANNOTATION(scoped_lockable)
// Data read or written only with the lock held.
#define TESSERA_GUARDED_BY(lock) TESSERA_THREAD_ANNOTATION(guarded_by(lock))
// A function called only with the locks held.
#define TESSERA_REQUIRES(...) TESSERA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// A function that takes / gives back the locks.
#define TESSERA_ACQUIRE(...) TESSERA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TESSERA_RELEASE(...) TESSERA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// A function called only without the locks held (it takes them).
#define TESSERA_EXCLUDES(...) TESSERA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// Lock order: this lock is taken only after the named ones (-Wthread-safety-beta checks it).
#define TESSERA_ACQUIRED_AFTER(...) TESSERA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// A function that checks at run time that the lock is held (the analysis then assumes it is).
#define TESSERA_ASSERT_CAPABILITY(x) TESSERA_THREAD_ANNOTATION(assert_capability(x))
// Turns the analysis off for one function (what it does cannot be expressed).
#define TESSERA_NO_THREAD_SAFETY_ANALYSIS TESSERA_THREAD_ANNOTATION(no_thread_safety_analysis)
