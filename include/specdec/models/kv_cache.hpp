#pragma once
// Keys and values of every layer for positions [0, size()). Indexed by
// absolute position, so rolling back is only a smaller size(): truncate is
// O(1) and the next forward overwrites the discarded positions.
//
// Layout: [layer][kv head][position][head_dim] for keys, the same for values,
// so that attention streams one head's cached positions contiguously (the
// position-major alternative reads a 256-byte piece every kv_dim floats).
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "specdec/backends/cpu/aligned_vector.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

class KvCache {
public:
    KvCache() = default;
    KvCache(std::size_t layers, std::size_t capacity, std::size_t kv_heads, std::size_t head_dim)
        : capacity_(capacity), kv_heads_(kv_heads), head_dim_(head_dim),
          // Not zero-filled: pages are only touched as positions are written.
          data_(allocate(layers, capacity, kv_heads, head_dim)) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

    // head_dim floats for (layer, kv head, position); positions of one head are contiguous.
    [[nodiscard]] float* keys(std::size_t layer, std::size_t kv_head, std::size_t position) noexcept {
        return data_.get() + (((layer * 2) * kv_heads_ + kv_head) * capacity_ + position) * head_dim_;
    }
    [[nodiscard]] float* values(std::size_t layer, std::size_t kv_head, std::size_t position) noexcept {
        return data_.get() + (((layer * 2 + 1) * kv_heads_ + kv_head) * capacity_ + position) * head_dim_;
    }

    void set_size(std::size_t positions) {
        if (positions > capacity_) {
            throw Error("KV cache of " + std::to_string(capacity_) + " positions cannot hold " +
                        std::to_string(positions));
        }
        size_ = positions;
    }

private:
    // The floats of layers x 2 x kv_heads x capacity x head_dim, checked: a
    // context length from a hostile file must not wrap the size around (and
    // then be written past the end) or end the process with std::bad_alloc.
    static float* allocate(std::size_t layers, std::size_t capacity, std::size_t kv_heads, std::size_t head_dim) {
        std::size_t floats = 1;
        bool overflow = false;
        for (const std::size_t factor : {layers, std::size_t{2}, kv_heads, capacity, head_dim}) {
            overflow |= factor != 0 && floats > std::numeric_limits<std::size_t>::max() / sizeof(float) / factor;
            floats *= factor;
        }
        auto fail = [&](const char* problem) {
            throw Error("KV cache of " + std::to_string(capacity) + " positions x " + std::to_string(layers) + " layers x " +
                        std::to_string(kv_heads) + " kv heads x " + std::to_string(head_dim) + " values: " + problem +
                        "; expected a context that fits in memory (LlamaOptions::max_context caps it; each of LlamaOptions::sequences slots takes one such cache)");
        };
        if (overflow) fail("the size overflows");
        try {
            // On a cache line: attention reads each cached key and value with
            // 32-byte loads (see backends/cpu/aligned_vector.hpp).
            return static_cast<float*>(cpu::allocate_cache_lines(floats * sizeof(float)));
        } catch (const std::bad_alloc&) {
            fail("cannot allocate it");
        }
        return nullptr;  // unreachable
    }

    struct Release {
        void operator()(float* p) const noexcept { cpu::release_cache_lines(p); }
    };

    std::size_t capacity_ = 0, kv_heads_ = 0, head_dim_ = 0, size_ = 0;
    std::unique_ptr<float, Release> data_;
};

}  // namespace specdec
