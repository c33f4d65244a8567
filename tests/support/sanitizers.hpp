#pragma once
// Whether this test binary runs under ThreadSanitizer (scripts/test.sh's race
// check, which runs the model tests ~10x slower): the few exhaustive sweeps
// then run a subset of their sizes (the smallest and the widest); every size
// runs in the plain and AddressSanitizer builds.
namespace specdec::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

}  // namespace specdec::test
