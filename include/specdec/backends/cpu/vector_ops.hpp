#pragma once
// Short float vector primitives of the transformer (dot, axpy, RMSNorm,
// SwiGLU gate, RoPE rotation), with AVX2 versions chosen at run time.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "specdec/platform/x86.hpp"

namespace specdec::cpu {

namespace detail {
#if SPECDEC_X86
SPECDEC_AVX2_TARGET inline float dot_avx2(const float* a, const float* b, std::size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = platform::horizontal_sum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

SPECDEC_AVX2_TARGET inline void axpy_avx2(float alpha, const float* x, float* y, std::size_t n) {
    const __m256 a = _mm256_set1_ps(alpha);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif
}  // namespace detail

[[nodiscard]] inline float dot(const float* a, const float* b, std::size_t n) {
#if SPECDEC_X86
    if (platform::avx2_available()) return detail::dot_avx2(a, b, n);
#endif
    float sum = 0.0f;
    for (std::size_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, std::size_t n) {
#if SPECDEC_X86
    if (platform::avx2_available()) return detail::axpy_avx2(alpha, x, y, n);
#endif
    for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// out = x / sqrt(mean(x^2) + eps) * weight
inline void rms_norm(const float* x, const float* weight, std::size_t n, float eps, float* out) {
    const float mean_square = dot(x, x, n) / static_cast<float>(n);
    const float scale = 1.0f / std::sqrt(mean_square + eps);
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// Rotates the first 2 * pairs values of one head by the angles whose cosines
// and sines are given, pairing adjacent values (x[2i], x[2i+1]): llama.cpp's
// "normal" RoPE layout used by GGUF llama models.
inline void rope_rotate(float* head, const float* cosines, const float* sines, std::size_t pairs) {
    for (std::size_t i = 0; i < pairs; ++i) {
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * cosines[i] - b * sines[i];
        head[2 * i + 1] = a * sines[i] + b * cosines[i];
    }
}

// The same rotation on the pairs (head[i], head[i + pairs]) (llama.cpp's "neox" RoPE).
inline void rope_rotate_halves(float* head, const float* cosines, const float* sines, std::size_t pairs) {
    for (std::size_t i = 0; i < pairs; ++i) {
        const float a = head[i], b = head[i + pairs];
        head[i] = a * cosines[i] - b * sines[i];
        head[i + pairs] = a * sines[i] + b * cosines[i];
    }
}

// A run of consecutive rows [first, first + count) of a head's keys and values.
struct RowRun {
    std::size_t first = 0, count = 0;
};

namespace detail {

// Rows of keys and values visited by one query: the runs in order, row j of
// run r at + (runs[r].first + j) * stride. One run [0, positions) is causal
// attention over a cache; a tree node visits the cache and its ancestors.
template <class Visit>
inline void for_each_row(const RowRun* runs, std::size_t run_count, Visit visit) {
    std::size_t t = 0;
    for (std::size_t r = 0; r < run_count; ++r) {
        for (std::size_t j = runs[r].first, end = runs[r].first + runs[r].count; j < end; ++j) visit(t++, j);
    }
}

inline void attend_runs_scalar(const float* q, const float* keys, const float* values, std::size_t stride, const RowRun* runs,
                               std::size_t run_count, std::size_t head_dim, float scale, float* scores, float* out) {
    float max_score = -INFINITY;
    std::size_t positions = 0;
    for_each_row(runs, run_count, [&](std::size_t t, std::size_t j) {
        float s = 0.0f;
        for (std::size_t i = 0; i < head_dim; ++i) s += q[i] * keys[j * stride + i];
        scores[t] = s * scale;
        max_score = std::max(max_score, scores[t]);
        positions = t + 1;
    });
    float total = 0.0f;
    for (std::size_t t = 0; t < positions; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        total += scores[t];
    }
    std::fill(out, out + head_dim, 0.0f);
    for_each_row(runs, run_count, [&](std::size_t t, std::size_t j) {
        const float weight = scores[t] / total;
        for (std::size_t i = 0; i < head_dim; ++i) out[i] += weight * values[j * stride + i];
    });
}

inline void attend_scalar(const float* q, const float* keys, const float* values, std::size_t stride, std::size_t positions,
                          std::size_t head_dim, float scale, float* scores, float* out) {
    const RowRun all{0, positions};
    attend_runs_scalar(q, keys, values, stride, &all, 1, head_dim, scale, scores, out);
}

#if SPECDEC_X86
// e^x for x <= 0 (softmax arguments after subtracting the maximum): range
// reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6 Taylor polynomial;
// relative error ~2e-7, far below what the logits tolerance needs.
SPECDEC_AVX2_TARGET inline __m256 exp_nonpositive_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);  // ln2 split in a high and a low part
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i exponent = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), exponent));
}

// The three steps of one query's attention, shared by every kernel that
// must give a query bitwise the same output (attend_runs_avx2 here,
// attend_consecutive_avx2 in attention.hpp).

// q . k * scale over head_dim values (a multiple of 8), as two chains of FMAs.
SPECDEC_AVX2_TARGET __attribute__((always_inline)) inline float attention_score_avx2(const float* q, const float* k,
                                                                                     std::size_t head_dim, float scale) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    std::size_t i = 0;
    for (; i + 16 <= head_dim; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    }
    if (i < head_dim) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    return platform::horizontal_sum(_mm256_add_ps(a0, a1)) * scale;
}

// scores[j] = exp(scores[j] - max_score) for j < positions; returns 1 / their sum.
SPECDEC_AVX2_TARGET inline float exponentiate_scores_avx2(float* scores, std::size_t positions, float max_score) {
    const __m256 max_vector = _mm256_set1_ps(max_score);
    __m256 total_vector = _mm256_setzero_ps();
    std::size_t j = 0;
    for (; j + 8 <= positions; j += 8) {
        const __m256 e = exp_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), max_vector));
        _mm256_storeu_ps(scores + j, e);
        total_vector = _mm256_add_ps(total_vector, e);
    }
    float total = platform::horizontal_sum(total_vector);
    for (; j < positions; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        total += scores[j];
    }
    return 1.0f / total;
}

// acc[s] += weights[p] * rows[p * stride + 8 s ..] for p < count, in order:
// `slices` 8-value slices (at most 8) of a 64-dimension block of values.
SPECDEC_AVX2_TARGET __attribute__((always_inline)) inline void add_weighted_rows_avx2(
    __m256 (&acc)[8], std::size_t slices, const float* weights, const float* rows, std::size_t stride, std::size_t count) {
    if (slices == 8) {
        for (std::size_t p = 0; p < count; ++p) {
            const __m256 weight = _mm256_set1_ps(weights[p]);
            const float* v = rows + p * stride;
#pragma GCC unroll 8
            for (int s = 0; s < 8; ++s) acc[s] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(v + 8 * s), acc[s]);
        }
    } else {
        for (std::size_t p = 0; p < count; ++p) {
            const __m256 weight = _mm256_set1_ps(weights[p]);
            const float* v = rows + p * stride;
            for (std::size_t s = 0; s < slices; ++s) acc[s] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(v + 8 * s), acc[s]);
        }
    }
}

// One query head against the cached keys/values of `runs` (see
// for_each_row): scores, softmax and the weighted sum of values in one pass
// over the rows, with no call per position. head_dim must be a multiple of 8.
SPECDEC_AVX2_TARGET inline void attend_runs_avx2(const float* q, const float* keys, const float* values, std::size_t stride,
                                                 const RowRun* runs, std::size_t run_count, std::size_t head_dim, float scale,
                                                 float* scores, float* out) {
    float max_score = -INFINITY;
    std::size_t positions = 0;
    for (std::size_t r = 0; r < run_count; ++r) {
        for (std::size_t j = runs[r].first, end = runs[r].first + runs[r].count; j < end; ++j) {
            scores[positions] = attention_score_avx2(q, keys + j * stride, head_dim, scale);
            max_score = std::max(max_score, scores[positions]);
            ++positions;
        }
    }
    const float inverse_total = exponentiate_scores_avx2(scores, positions, max_score);
    // Weighted sum in slices of 64 dimensions held in 8 registers.
    for (std::size_t d0 = 0; d0 < head_dim; d0 += 64) {
        const std::size_t slices = std::min<std::size_t>(8, (head_dim - d0) / 8);
        __m256 acc[8];
        for (int s = 0; s < 8; ++s) acc[s] = _mm256_setzero_ps();
        const float* weights = scores;
        for (std::size_t r = 0; r < run_count; ++r) {
            add_weighted_rows_avx2(acc, slices, weights, values + runs[r].first * stride + d0, stride, runs[r].count);
            weights += runs[r].count;
        }
        const __m256 normaliser = _mm256_set1_ps(inverse_total);
        for (std::size_t s = 0; s < slices; ++s) _mm256_storeu_ps(out + d0 + 8 * s, _mm256_mul_ps(acc[s], normaliser));
    }
}
#endif

}  // namespace detail

// Softmax attention of one query head over the rows of `runs`, in order (row
// j of keys and values at + j * stride): softmax(q . k_j * scale) weighted
// sum of v_j into out[head_dim]. `scores` is scratch of at least as many
// floats as the runs hold rows, and the runs hold at least one row.
inline void attend_runs(const float* q, const float* keys, const float* values, std::size_t stride, const RowRun* runs,
                        std::size_t run_count, std::size_t head_dim, float scale, float* scores, float* out) {
#if SPECDEC_X86
    if (platform::avx2_available() && head_dim % 8 == 0) {
        return detail::attend_runs_avx2(q, keys, values, stride, runs, run_count, head_dim, scale, scores, out);
    }
#endif
    detail::attend_runs_scalar(q, keys, values, stride, runs, run_count, head_dim, scale, scores, out);
}

// Causal softmax attention of one query head over the cached rows [0,
// positions) (row j of keys and values at + j * stride). `scores` is scratch
// of at least `positions` floats.
inline void attend(const float* q, const float* keys, const float* values, std::size_t stride, std::size_t positions,
                   std::size_t head_dim, float scale, float* scores, float* out) {
    const RowRun all{0, positions};
    attend_runs(q, keys, values, stride, &all, 1, head_dim, scale, scores, out);
}

namespace detail {
#if SPECDEC_X86
// gate = silu(gate) * up for the whole 8-value slices; returns how many
// values it did. silu(g) = g sigmoid(g), with the exponential taken of -|g|
// (never overflows): sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below.
SPECDEC_AVX2_TARGET inline std::size_t swiglu_avx2(float* gate, const float* up, std::size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign_bit = _mm256_set1_ps(-0.0f);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_nonpositive_avx2(_mm256_or_ps(g, sign_bit));
        const __m256 inverse = _mm256_div_ps(one, _mm256_add_ps(one, e));
        const __m256 sigmoid = _mm256_blendv_ps(inverse, _mm256_mul_ps(e, inverse), g);  // by the sign of g
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + i)));
    }
    return i;
}
#endif
}  // namespace detail

// gate = silu(gate) * up, the SwiGLU activation. Value i of a row always
// takes the same path (vector slices, then the scalar tail), so a row's
// result does not depend on the rows passed with it when called per row.
inline void swiglu(float* gate, const float* up, std::size_t n) {
    std::size_t i = 0;
#if SPECDEC_X86
    if (platform::avx2_available()) i = detail::swiglu_avx2(gate, up, n);
#endif
    for (; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace specdec::cpu
