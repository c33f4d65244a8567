#pragma once
// Causal attention of a block of consecutive queries of one head as two
// matrix products (scores = K q, out = V^T p) on the blocked kernel of
// gemm.hpp, for wide passes (prompt prefill): the per-query kernel of
// vector_ops.hpp reads every cached key and value once per query, this reads
// them once per block of queries.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "specdec/backends/cpu/gemm.hpp"
#include "specdec/platform/x86.hpp"
#include "specdec/backends/cpu/vector_ops.hpp"

namespace specdec::cpu {

namespace detail {

#if SPECDEC_X86
// p[j] = exp((p[j] - max_score) * scale) for the whole 8-value slices; adds
// them to total and returns how many values it did.
SPECDEC_AVX2_TARGET inline std::size_t softmax_exp_avx2(float* p, std::size_t count, float max_score, float scale, float& total) {
    const __m256 max_vector = _mm256_set1_ps(max_score), scale_vector = _mm256_set1_ps(scale);
    __m256 sums = _mm256_setzero_ps();
    std::size_t j = 0;
    for (; j + 8 <= count; j += 8) {
        const __m256 e = exp_nonpositive_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p + j), max_vector), scale_vector));
        _mm256_storeu_ps(p + j, e);
        sums = _mm256_add_ps(sums, e);
    }
    total += platform::horizontal_sum(sums);
    return j;
}
#endif

// p[j] = exp((p[j] - max) * scale) for j < count, unnormalised (scale > 0, so
// the largest score gives the largest weight); returns 1 / their sum.
inline float softmax_weights(float* p, std::size_t count, float scale) {
    float max_score = -INFINITY;
    for (std::size_t j = 0; j < count; ++j) max_score = std::max(max_score, p[j]);
    float total = 0.0f;
    std::size_t j = 0;
#if SPECDEC_X86
    if (platform::avx2_available()) j = softmax_exp_avx2(p, count, max_score, scale, total);
#endif
    for (; j < count; ++j) {
        p[j] = std::exp((p[j] - max_score) * scale);
        total += p[j];
    }
    return 1.0f / total;
}

}  // namespace detail

// Queries i in [0, queries) (query i at q + i * q_stride, at position
// first_position + i) attend to the cached rows [0, first_position + i]
// (row j of keys and values at + j * kv_stride): out[i * out_stride ..] =
// softmax(K q_i * scale) V. Single-threaded: one task of a parallel section.
inline void attend_block(const float* q, std::size_t q_stride, std::size_t queries, std::size_t first_position,
                         const float* keys, const float* values, std::size_t kv_stride, std::size_t head_dim, float scale,
                         float* out, std::size_t out_stride) {
    const std::size_t positions = first_position + queries;
    thread_local detail::PackedColumns packed;
    thread_local std::vector<float> scores, inverse_totals;
    if (scores.size() < queries * positions) scores.resize(queries * positions);
    if (inverse_totals.size() < queries) inverse_totals.resize(queries);

    // scores[i][j] = k_j . q_i, then the causal softmax weights of each row
    // (zeros past the query's position), left unnormalised: the output rows
    // are divided by their sums instead, head_dim values a row rather than
    // `positions`.
    detail::pack_columns(q, q_stride, queries, head_dim, packed);
    detail::gemm_sliced(packed, scores.data(), positions, false, [&](std::size_t k0, std::size_t depth, detail::PackedRows& rows) {
        detail::pack_rows(keys, kv_stride, positions, k0, depth, rows);
    });
    for (std::size_t i = 0; i < queries; ++i) {
        float* row = scores.data() + i * positions;
        const std::size_t visible = first_position + i + 1;
        inverse_totals[i] = detail::softmax_weights(row, visible, scale);
        std::fill(row + visible, row + positions, 0.0f);
    }
    // out[i][d] = sum_j v_j[d] p_i[j] / total_i: V^T as the row operand, which the
    // cache already holds k-major (value d of position j at values + j * kv_stride + d).
    detail::pack_columns(scores.data(), positions, queries, positions, packed);
    detail::gemm_sliced(packed, out, out_stride, false, [&](std::size_t k0, std::size_t depth, detail::PackedRows& rows) {
        detail::pack_rows_transposed(values, kv_stride, head_dim, k0, depth, rows);
    });
    for (std::size_t i = 0; i < queries; ++i) {
        float* row = out + i * out_stride;
        for (std::size_t d = 0; d < head_dim; ++d) row[d] *= inverse_totals[i];
    }
}

}  // namespace specdec::cpu
