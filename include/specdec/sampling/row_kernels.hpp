#pragma once
// The per-row passes of sampling, each one sweep over a vocabulary-wide row:
// the checked maximum, the first index of a value (the argmax), exp-and-sum
// (optionally writing the exponentials), a scale, the check that a row holds
// probabilities, and the block sums that let inverse-CDF sampling skip most
// of a row, of the row itself or of a rejection residual max(w p - q, 0).
// A k-draft step at temperature > 0 runs them on up to 2k + 1 rows, so they
// are vectorised: AVX2 where the running CPU has it (chosen at run time, the
// library is built without -march), a portable scalar twin otherwise.
// SPECDEC_DISABLE_SIMD (environment) forces the scalar twins.
//
// The maximum itself always gets exp(0) = 1, without the product: at a
// temperature so small that 1 / T overflows to inf, 0 * inf would be NaN (the
// T -> 0 limit is the uniform distribution over the tied maxima, which this
// gives).
//
// Both twins compute the same function up to float rounding (the sums are
// accumulated in a different order). Within one process every caller goes
// through the same twin, so a probability computed alone (row_probability)
// is bitwise the value the full row would hold.
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <span>

#include "specdec/platform/x86.hpp"
#include "specdec/sampling/fast_exp.hpp"

namespace specdec::detail {

// Result of the checked maximum: NaN or +inf anywhere makes `bad` true.
struct RowMax {
    float max = -std::numeric_limits<float>::infinity();
    bool bad = false;
};

// (x - max) * inverse_temperature, and exactly 0 at the maximum (see above).
inline float scaled_difference(float difference, float inverse_temperature) {
    return difference == 0.0f ? 0.0f : difference * inverse_temperature;
}

// Elements per block of block_sums(); sampling scans blocks first, then one block.
inline constexpr std::size_t kSampleBlock = 64;

#if SPECDEC_X86
// exp_nonpositive on 8 lanes: the same range reduction and polynomial.
SPECDEC_AVX2_TARGET inline __m256 exp_nonpositive8(__m256 x) {
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    const __m256 clamped = _mm256_blendv_ps(_mm256_set1_ps(-87.0f), x, ok);
    const __m256 n = _mm256_floor_ps(
        _mm256_add_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
    const __m256 r = _mm256_add_ps(_mm256_sub_ps(clamped, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f))),
                                   _mm256_mul_ps(n, _mm256_set1_ps(2.12194440e-4f)));
    __m256 poly = _mm256_set1_ps(1.9875691500e-4f);
    poly = _mm256_add_ps(_mm256_mul_ps(poly, r), _mm256_set1_ps(1.3981999507e-3f));
    poly = _mm256_add_ps(_mm256_mul_ps(poly, r), _mm256_set1_ps(8.3334519073e-3f));
    poly = _mm256_add_ps(_mm256_mul_ps(poly, r), _mm256_set1_ps(4.1665795894e-2f));
    poly = _mm256_add_ps(_mm256_mul_ps(poly, r), _mm256_set1_ps(1.6666665459e-1f));
    poly = _mm256_add_ps(_mm256_mul_ps(poly, r), _mm256_set1_ps(5.0000001201e-1f));
    const __m256 e_r =
        _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(poly, r), r), r), _mm256_set1_ps(1.0f));
    const __m256i exponent =
        _mm256_slli_epi32(_mm256_cvttps_epi32(_mm256_add_ps(n, _mm256_set1_ps(127.0f))), 23);
    return _mm256_and_ps(_mm256_mul_ps(e_r, _mm256_castsi256_ps(exponent)), ok);
}

SPECDEC_AVX2_TARGET inline RowMax row_max_avx2(const float* x, std::size_t n) {
    const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 bad = _mm256_setzero_ps();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
        best = _mm256_max_ps(best, v);
    }
    RowMax result{platform::horizontal_max(best), _mm256_movemask_ps(bad) != 0};
    for (; i < n; ++i) {
        const float v = x[i];
        result.bad |= (v != v) | (v == std::numeric_limits<float>::infinity());
        result.max = v > result.max ? v : result.max;
    }
    return result;
}

// (x - max) * inverse_temperature, and exactly 0 where x is the maximum.
SPECDEC_AVX2_TARGET inline __m256 scaled8(__m256 difference, __m256 inverse_temperature) {
    const __m256 at_max = _mm256_cmp_ps(difference, _mm256_setzero_ps(), _CMP_EQ_OQ);
    return _mm256_andnot_ps(at_max, _mm256_mul_ps(difference, inverse_temperature));
}

SPECDEC_AVX2_TARGET inline float exp_one_avx2(float x) { return _mm256_cvtss_f32(exp_nonpositive8(_mm256_set1_ps(x))); }

template <bool Write>
SPECDEC_AVX2_TARGET inline float exp_sum_avx2(const float* x, std::size_t n, float max, float inverse_temperature,
                                               float* out) {
    const __m256 m = _mm256_set1_ps(max), t = _mm256_set1_ps(inverse_temperature);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 e0 = exp_nonpositive8(scaled8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), t));
        const __m256 e1 = exp_nonpositive8(scaled8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m), t));
        if constexpr (Write) {
            _mm256_storeu_ps(out + i, e0);
            _mm256_storeu_ps(out + i + 8, e1);
        }
        sum0 = _mm256_add_ps(sum0, e0);
        sum1 = _mm256_add_ps(sum1, e1);
    }
    float total = platform::horizontal_sum_folded(_mm256_add_ps(sum0, sum1));
    for (; i < n; ++i) {
        const float e = exp_one_avx2(scaled_difference(x[i] - max, inverse_temperature));
        if constexpr (Write) out[i] = e;
        total += e;
    }
    return total;
}

SPECDEC_AVX2_TARGET inline void scale_avx2(float* x, std::size_t n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), s));
    for (; i < n; ++i) x[i] *= scale;
}

// Index of the first element equal to value (n if none).
SPECDEC_AVX2_TARGET inline std::size_t first_equal_avx2(const float* x, std::size_t n, float value) {
    const __m256 v = _mm256_set1_ps(value);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), v, _CMP_EQ_OQ));
        if (mask != 0) return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
    }
    for (; i < n; ++i)
        if (x[i] == value) return i;
    return n;
}

// Whether every element is finite and non-negative (NaN fails both compares).
SPECDEC_AVX2_TARGET inline bool all_probabilities_avx2(const float* x, std::size_t n) {
    const __m256 zero = _mm256_setzero_ps(), largest = _mm256_set1_ps(std::numeric_limits<float>::max());
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ), _mm256_cmp_ps(v, largest, _CMP_LE_OQ)));
    }
    bool valid = _mm256_movemask_ps(ok) == 0xff;
    for (; i < n; ++i) valid &= x[i] >= 0.0f && x[i] <= std::numeric_limits<float>::max();
    return valid;
}

// Sums of each kSampleBlock-element block of the residual max(w p - q, 0), in double;
// q == nullptr reads as 0. `sums` may be null (only the total is wanted).
SPECDEC_AVX2_TARGET inline double residual_sums_avx2(const float* p, const float* q, std::size_t n, double w,
                                                       double* sums) {
    const __m256d weight = _mm256_set1_pd(w), zero = _mm256_setzero_pd();
    double total = 0.0;
    std::size_t b = 0;
    for (std::size_t start = 0; start < n; start += kSampleBlock, ++b) {
        const std::size_t end = start + kSampleBlock < n ? start + kSampleBlock : n;
        __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
        std::size_t i = start;
        for (; i + 8 <= end; i += 8) {
            const __m256 pv = _mm256_loadu_ps(p + i);
            const __m256 qv = q ? _mm256_loadu_ps(q + i) : _mm256_setzero_ps();
            const __m256d r0 = _mm256_sub_pd(_mm256_mul_pd(weight, _mm256_cvtps_pd(_mm256_castps256_ps128(pv))),
                                             _mm256_cvtps_pd(_mm256_castps256_ps128(qv)));
            const __m256d r1 = _mm256_sub_pd(_mm256_mul_pd(weight, _mm256_cvtps_pd(_mm256_extractf128_ps(pv, 1))),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(qv, 1)));
            acc0 = _mm256_add_pd(acc0, _mm256_max_pd(r0, zero));
            acc1 = _mm256_add_pd(acc1, _mm256_max_pd(r1, zero));
        }
        double sum = platform::horizontal_sum(_mm256_add_pd(acc0, acc1));
        for (; i < end; ++i) {
            const double r = w * static_cast<double>(p[i]) - (q ? static_cast<double>(q[i]) : 0.0);
            sum += r > 0.0 ? r : 0.0;
        }
        if (sums) sums[b] = sum;
        total += sum;
    }
    return total;
}
#endif

inline RowMax row_max_scalar(const float* x, std::size_t n) {
    RowMax result;
    for (std::size_t i = 0; i < n; ++i) {
        const float v = x[i];
        result.bad |= (v != v) | (v == std::numeric_limits<float>::infinity());
        result.max = v > result.max ? v : result.max;
    }
    return result;
}

template <bool Write>
inline float exp_sum_scalar(const float* x, std::size_t n, float max, float inverse_temperature, float* out) {
    float total = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
        const float e = exp_nonpositive(scaled_difference(x[i] - max, inverse_temperature));
        if constexpr (Write) out[i] = e;
        total += e;
    }
    return total;
}

inline std::size_t first_equal_scalar(const float* x, std::size_t n, float value) {
    for (std::size_t i = 0; i < n; ++i)
        if (x[i] == value) return i;
    return n;
}

inline bool all_probabilities_scalar(const float* x, std::size_t n) {
    bool valid = true;
    for (std::size_t i = 0; i < n; ++i) valid &= x[i] >= 0.0f && x[i] <= std::numeric_limits<float>::max();
    return valid;
}

inline double residual_sums_scalar(const float* p, const float* q, std::size_t n, double w, double* sums) {
    double total = 0.0;
    std::size_t b = 0;
    for (std::size_t start = 0; start < n; start += kSampleBlock, ++b) {
        const std::size_t end = start + kSampleBlock < n ? start + kSampleBlock : n;
        double sum = 0.0;
        for (std::size_t i = start; i < end; ++i) {
            const double r = w * static_cast<double>(p[i]) - (q ? static_cast<double>(q[i]) : 0.0);
            sum += r > 0.0 ? r : 0.0;
        }
        if (sums) sums[b] = sum;
        total += sum;
    }
    return total;
}

// Maximum of a row and whether it holds NaN or +inf.
inline RowMax row_max(std::span<const float> x) {
#if SPECDEC_X86
    if (platform::avx2_available()) return row_max_avx2(x.data(), x.size());
#endif
    return row_max_scalar(x.data(), x.size());
}

// sum_i exp((x_i - max) * inverse_temperature); with `out`, also writes each term.
inline float exp_sum(std::span<const float> x, float max, float inverse_temperature, float* out = nullptr) {
#if SPECDEC_X86
    if (platform::avx2_available())
        return out ? exp_sum_avx2<true>(x.data(), x.size(), max, inverse_temperature, out)
                   : exp_sum_avx2<false>(x.data(), x.size(), max, inverse_temperature, nullptr);
#endif
    return out ? exp_sum_scalar<true>(x.data(), x.size(), max, inverse_temperature, out)
               : exp_sum_scalar<false>(x.data(), x.size(), max, inverse_temperature, nullptr);
}

// One term of exp_sum, bitwise the value exp_sum writes for that element.
inline float exp_term(float x, float max, float inverse_temperature) {
#if SPECDEC_X86
    if (platform::avx2_available()) return exp_one_avx2(scaled_difference(x - max, inverse_temperature));
#endif
    return exp_nonpositive(scaled_difference(x - max, inverse_temperature));
}

inline void scale_row(std::span<float> x, float scale) {
#if SPECDEC_X86
    if (platform::avx2_available()) return scale_avx2(x.data(), x.size(), scale);
#endif
    for (float& v : x) v *= scale;
}


// Index of the first element equal to `value`; x.size() if there is none.
inline std::size_t first_equal(std::span<const float> x, float value) {
#if SPECDEC_X86
    if (platform::avx2_available()) return first_equal_avx2(x.data(), x.size(), value);
#endif
    return first_equal_scalar(x.data(), x.size(), value);
}

// Whether every element is a probability: finite and non-negative.
inline bool all_probabilities(std::span<const float> x) {
#if SPECDEC_X86
    if (platform::avx2_available()) return all_probabilities_avx2(x.data(), x.size());
#endif
    return all_probabilities_scalar(x.data(), x.size());
}

// The residual max(w p - q, 0) of two rows of p.size() values (q null: 0),
// summed in double: per kSampleBlock-element block into `sums` when given,
// and in all (returned).
inline double residual_sums(std::span<const float> p, const float* q, double w, double* sums = nullptr) {
#if SPECDEC_X86
    if (platform::avx2_available()) return residual_sums_avx2(p.data(), q, p.size(), w, sums);
#endif
    return residual_sums_scalar(p.data(), q, p.size(), w, sums);
}

// Writes ceil(n / kSampleBlock) block sums (in double, negative entries as 0)
// and returns their total: the residual with w = 1 and q = 0.
inline double block_sums(std::span<const float> x, double* sums) { return residual_sums(x, nullptr, 1.0, sums); }

}  // namespace specdec::detail
