// The buffers the kernels stream with 32-byte loads start on a cache line,
// wherever the heap puts them: otherwise a pass's speed depends on the
// allocations before it (backends/cpu/aligned_vector.hpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "specdec/backends/cpu/aligned_vector.hpp"
#include "specdec/backends/cpu/gemm.hpp"
#include "specdec/backends/cpu/quant_matmul.hpp"
#include "specdec/models/kv_cache.hpp"
#include "support/catch.hpp"

namespace {

bool on_cache_line(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % specdec::cpu::kCacheLineBytes == 0; }

}  // namespace

TEST_CASE("aligned vectors start on a cache line at every size, between odd-sized allocations", "[model]") {
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::size_t> size(1, 300000);
    std::vector<std::unique_ptr<char[]>> clutter;  // shifts the heap by odd amounts between vectors
    std::size_t misaligned = 0;
    specdec::cpu::AlignedVector<float> grown;
    for (int i = 0; i < 400; ++i) {
        clutter.emplace_back(new char[1 + size(rng) % 97]);
        specdec::cpu::AlignedVector<float> floats(size(rng));
        specdec::cpu::AlignedVector<std::int8_t> bytes(size(rng) % 4096 + 1);
        grown.resize(grown.size() + size(rng) % 1000 + 1);  // reallocates now and then
        misaligned += !on_cache_line(floats.data()) + !on_cache_line(bytes.data()) + !on_cache_line(grown.data());
    }
    CHECK(misaligned == 0);
}

TEST_CASE("the KV cache, packed columns and quantised activations start on a cache line", "[model]") {
    for (const std::size_t capacity : {std::size_t{17}, std::size_t{256}, std::size_t{2048}}) {
        specdec::KvCache cache(2, capacity, 3, 64);
        CHECK(on_cache_line(cache.keys(0, 0, 0)));
        CHECK(on_cache_line(cache.values(1, 2, 0)));
    }
    const std::size_t columns = 5, depth = 96;
    std::vector<float> x(columns * depth + 3);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) - 6.0f;
    specdec::cpu::detail::PackedColumns packed;
    specdec::cpu::detail::pack_columns(x.data() + 3, depth, columns, depth, packed);
    CHECK(on_cache_line(packed.values.data()));
    specdec::cpu::Q8Activations quantized;
    specdec::cpu::quantize_activations(x.data() + 3, depth, columns, depth, quantized);
    CHECK(on_cache_line(quantized.values.data()));
    CHECK(on_cache_line(quantized.scales.data()));
    CHECK(on_cache_line(quantized.offset_sums.data()));
}
