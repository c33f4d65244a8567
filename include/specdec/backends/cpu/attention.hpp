#pragma once
// Causal attention of a block of consecutive queries of one head, reading
// the cached keys and values once per block rather than once per query as
// the per-query kernel of vector_ops.hpp does: for wide passes (prompt
// prefill) as two matrix products (scores = K q, out = V^T p) on the blocked
// kernel of gemm.hpp; for narrow ones (verification) as the per-query
// kernel's own arithmetic over blocks of rows (attend_consecutive), bitwise
// its results.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "specdec/backends/cpu/aligned_vector.hpp"
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
    thread_local AlignedVector<float> scores, inverse_totals;
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

namespace detail {

#if SPECDEC_X86
// Rows of keys and values read from memory once for every query of a task:
// 64 rows of a 64-wide head are 16 KiB, which stay in L1 while each query
// goes over them.
inline constexpr std::size_t kAttentionRowBlock = 64;

// attend_runs_avx2 over one run [0, first_visible + i) for each query i of
// a block of consecutive queries, with the loops over rows cut into blocks
// that every query visits in turn. Each query's scores, softmax and weighted
// sums are the same operations in the same order as attend_runs_avx2's, so
// its output is bitwise what that kernel gives it alone.
SPECDEC_AVX2_TARGET inline void attend_consecutive_avx2(const float* q, std::size_t q_stride, std::size_t queries,
                                                        std::size_t first_visible, const float* keys, const float* values,
                                                        std::size_t stride, std::size_t head_dim, float scale,
                                                        float* scores, float* out, std::size_t out_stride) {
    const std::size_t widest = first_visible + queries - 1;  // rows the last query sees; scores row stride
    thread_local AlignedVector<float> max_scores, inverse_totals, sums;
    max_scores.assign(queries, -INFINITY);
    inverse_totals.resize(queries);
    for (std::size_t b0 = 0; b0 < widest; b0 += kAttentionRowBlock) {
        for (std::size_t query = 0; query < queries; ++query) {
            const float* qi = q + query * q_stride;
            float* row_scores = scores + query * widest;
            const std::size_t end = std::min(b0 + kAttentionRowBlock, first_visible + query);
            float max_score = max_scores[query];
            for (std::size_t j = b0; j < end; ++j) {
                row_scores[j] = attention_score_avx2(qi, keys + j * stride, head_dim, scale);
                max_score = std::max(max_score, row_scores[j]);
            }
            max_scores[query] = max_score;
        }
    }
    for (std::size_t query = 0; query < queries; ++query)
        inverse_totals[query] = exponentiate_scores_avx2(scores + query * widest, first_visible + query, max_scores[query]);
    // Weighted sums in slices of 64 dimensions: each query's 8 accumulators
    // wait in `sums` between row blocks, which leaves their chains of FMAs
    // over the rows as they are in one pass.
    for (std::size_t d0 = 0; d0 < head_dim; d0 += 64) {
        const std::size_t slices = std::min<std::size_t>(8, (head_dim - d0) / 8);
        sums.assign(queries * 64, 0.0f);
        for (std::size_t b0 = 0; b0 < widest; b0 += kAttentionRowBlock) {
            for (std::size_t query = 0; query < queries; ++query) {
                const std::size_t end = std::min(b0 + kAttentionRowBlock, first_visible + query);
                if (end <= b0) continue;
                float* held = sums.data() + query * 64;
                __m256 acc[8];
                for (std::size_t s = 0; s < slices; ++s) acc[s] = _mm256_loadu_ps(held + 8 * s);
                add_weighted_rows_avx2(acc, slices, scores + query * widest + b0, values + b0 * stride + d0, stride, end - b0);
                for (std::size_t s = 0; s < slices; ++s) _mm256_storeu_ps(held + 8 * s, acc[s]);
            }
        }
        for (std::size_t query = 0; query < queries; ++query) {
            const __m256 normaliser = _mm256_set1_ps(inverse_totals[query]);
            const float* held = sums.data() + query * 64;
            float* o = out + query * out_stride + d0;
            for (std::size_t s = 0; s < slices; ++s) _mm256_storeu_ps(o + 8 * s, _mm256_mul_ps(_mm256_loadu_ps(held + 8 * s), normaliser));
        }
    }
}
#endif

}  // namespace detail

// Causal attention of consecutive queries of one head over one cache: query
// i (at q + i * q_stride) over the rows [0, first_visible + i), into out +
// i * out_stride. Each query's output is bitwise attend()'s for it alone;
// with AVX2 the rows are read once for all the queries (in blocks that stay
// in L1) instead of once per query, which is what a verification pass over
// a long context spends its attention time on. `scores` is scratch of at
// least queries x (first_visible + queries - 1) floats.
inline void attend_consecutive(const float* q, std::size_t q_stride, std::size_t queries, std::size_t first_visible,
                               const float* keys, const float* values, std::size_t stride, std::size_t head_dim,
                               float scale, float* scores, float* out, std::size_t out_stride) {
    if (queries == 0) return;
#if SPECDEC_X86
    if (platform::avx2_available() && head_dim % 8 == 0) {
        return detail::attend_consecutive_avx2(q, q_stride, queries, first_visible, keys, values, stride, head_dim, scale,
                                               scores, out, out_stride);
    }
#endif
    for (std::size_t i = 0; i < queries; ++i)
        attend(q + i * q_stride, keys, values, stride, first_visible + i, head_dim, scale, scores, out + i * out_stride);
}

}  // namespace specdec::cpu
