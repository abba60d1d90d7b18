// Clang's thread-safety annotations (-Wthread-safety), as abseil and leveldb
// spell them: which mutex guards a member, which a function needs held or
// must not hold. Under clang the compiler checks every access and every lock;
// under gcc they expand to nothing. See base/mutex.h for the annotated mutex
// they are used with (std::mutex is not annotated in libstdc++).
// The names carry a SHMK_ prefix, as abseil's carry ABSL_: gRPC's headers pull
// in abseil's internal header, which defines the bare GUARDED_BY, REQUIRES, ...
#pragma once

#if defined(__clang__)
#define SHMK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SHMK_THREAD_ANNOTATION(x)  // no-op: gcc has no thread-safety analysis
#endif

// A class that is a lock (a mutex): SHMK_CAPABILITY("mutex").
#define SHMK_CAPABILITY(x) SHMK_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a capability for its lifetime.
#define SHMK_SCOPED_CAPABILITY SHMK_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only with `x` held.
#define SHMK_GUARDED_BY(x) SHMK_THREAD_ANNOTATION(guarded_by(x))
// A pointer member whose pointee is read or written only with `x` held.
#define SHMK_PT_GUARDED_BY(x) SHMK_THREAD_ANNOTATION(pt_guarded_by(x))
// Locks that must be taken before (after) this one.
#define SHMK_ACQUIRED_BEFORE(...) SHMK_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define SHMK_ACQUIRED_AFTER(...) SHMK_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// A function callable only with the capabilities held (exclusively).
#define SHMK_REQUIRES(...) SHMK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// A function callable only with the capabilities NOT held (it takes them).
#define SHMK_EXCLUDES(...) SHMK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that takes (gives back) the capabilities.
#define SHMK_ACQUIRE(...) SHMK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SHMK_RELEASE(...) SHMK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// A function that asserts (at run time) that the capability is held.
#define SHMK_ASSERT_CAPABILITY(x) SHMK_THREAD_ANNOTATION(assert_capability(x))
// A function returning a reference to the capability.
#define SHMK_RETURN_CAPABILITY(x) SHMK_THREAD_ANNOTATION(lock_returned(x))
// Turns the analysis off for one function: say why where it is used.
#define SHMK_NO_THREAD_SAFETY_ANALYSIS SHMK_THREAD_ANNOTATION(no_thread_safety_analysis)
