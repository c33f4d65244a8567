#pragma once
// std::vector storage that starts on a cache line.
//
// The kernels read activations, packed operands and cached keys with 32-byte
// (AVX2) or 64-byte (AVX-512) loads at multiples of that size from a buffer's
// start. malloc aligns to 16 bytes only, so a buffer that happens to start 16
// bytes into a line splits every other 32-byte load, and every 64-byte one,
// across two lines. Which buffers do depends on the order of allocations, so
// two identical models in one process (or one model in two processes) could
// run the same passes at different speeds. Starting every such buffer on a
// line makes a pass's speed independent of where its buffers landed.
#include <cstddef>
#include <new>
#include <vector>

namespace specdec::cpu {

inline constexpr std::size_t kCacheLineBytes = 64;

// `bytes` of uninitialised storage starting on a cache line (its pages are
// touched only as they are written); freed by release_cache_lines.
[[nodiscard]] inline void* allocate_cache_lines(std::size_t bytes) {
    return ::operator new(bytes, std::align_val_t{kCacheLineBytes});
}
inline void release_cache_lines(void* p) noexcept { ::operator delete(p, std::align_val_t{kCacheLineBytes}); }

template <class T>
struct CacheLineAllocator {
    using value_type = T;

    CacheLineAllocator() noexcept = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}

    [[nodiscard]] T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(allocate_cache_lines(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t) noexcept { release_cache_lines(p); }

    template <class U>
    bool operator==(const CacheLineAllocator<U>&) const noexcept {
        return true;
    }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace specdec::cpu
