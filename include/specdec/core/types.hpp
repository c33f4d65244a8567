#pragma once
// Token ids and the non-owning logits view that models hand to the decoder.
// Kept free of the CPU kernels and of CUDA so that an adapter needs neither.
#include <cstddef>
#include <cstdint>
#include <span>

namespace specdec {

using Token = std::int32_t;

// `rows` logits rows of `vocab` floats each, row i starting at data + i * row_stride.
// A view returned by a model's forward() stays valid until the next call that
// mutates that model (forward or truncate).
struct LogitsView {
    const float* data = nullptr;
    std::size_t rows = 0;
    std::size_t vocab = 0;
    std::size_t row_stride = 0;  // in floats; equal to vocab for dense storage

    [[nodiscard]] std::span<const float> row(std::size_t i) const { return {data + i * row_stride, vocab}; }
    [[nodiscard]] std::span<const float> last_row() const { return row(rows - 1); }
};

// Convenience for adapters whose logits live in one dense row-major buffer.
[[nodiscard]] inline LogitsView dense_logits(std::span<const float> buffer, std::size_t rows, std::size_t vocab) {
    return LogitsView{buffer.data(), rows, vocab, vocab};
}

}  // namespace specdec
