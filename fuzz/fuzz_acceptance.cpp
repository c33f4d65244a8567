// The acceptance rules and the sampling transforms on arbitrary input: logits
// rows (finite, -inf, +inf, NaN, huge, subnormal), sampling options (valid and
// not), draft lengths, point-mass and sampled drafts, and raw probability rows
// handed straight to the rule.
//
// Properties: nothing but specdec::Error escapes; a processed row is a
// distribution (finite, non-negative, sums to ~1) or the row held NaN / +inf /
// only -inf and an Error was thrown; the rule never accepts more drafts than
// were proposed and its next token is inside the vocabulary with positive
// target probability; raw rows holding a NaN, an infinity or a negative value
// are an Error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz_support.hpp"
#include "specdec/specdec.hpp"

namespace {

using specdec::Token;

constexpr float kInf = std::numeric_limits<float>::infinity();

// One value from one byte: mostly ordinary logits, sometimes the values that break arithmetic.
float value_from(std::uint8_t code) {
    static const float specials[16] = {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf, -kInf, -kInf,
                                       std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::denorm_min(), 0.0f, -0.0f, 1e30f, -1e30f,
                                       88.7f, -103.0f, 1e-30f, -1.0f};
    if (code >= 240) return specials[code - 240];
    return (static_cast<float>(code) - 120.0f) / 8.0f;
}

double option_from(std::uint8_t code, const double* table, std::size_t size) { return table[code % size]; }

bool has_nan_or_positive_infinity(std::span<const float> row) {
    for (const float v : row)
        if (std::isnan(v) || v == kInf) return true;
    return false;
}

bool all_negative_infinity(std::span<const float> row) {
    for (const float v : row)
        if (v != -kInf) return false;
    return true;
}

void check_distribution(std::span<const float> q) {
    double total = 0.0;
    for (const float v : q) {
        SPECDEC_FUZZ_ASSERT(std::isfinite(v) && v >= 0.0f);
        total += v;
    }
    SPECDEC_FUZZ_ASSERT(std::fabs(total - 1.0) < 1e-3);
}

bool valid_probabilities(std::span<const float> values) {
    for (const float v : values)
        if (!(v >= 0.0f && v <= std::numeric_limits<float>::max())) return false;
    return true;
}

// logits_to_distribution with its contract checked.
bool process(std::span<const float> logits, const specdec::SamplingOptions& options, std::span<float> out) {
    try {
        specdec::logits_to_distribution(logits, options, out, "fuzzed model", 7);
    } catch (const specdec::Error&) {
        SPECDEC_FUZZ_ASSERT(has_nan_or_positive_infinity(logits) || all_negative_infinity(logits));
        return false;
    }
    SPECDEC_FUZZ_ASSERT(!has_nan_or_positive_infinity(logits) && !all_negative_infinity(logits));
    check_distribution(out);
    return true;
}

void check_verdict(const specdec::AcceptanceResult& verdict, std::size_t k, const specdec::DistributionRows& p) {
    SPECDEC_FUZZ_ASSERT(verdict.accepted <= k);
    SPECDEC_FUZZ_ASSERT(verdict.next_token >= 0 && static_cast<std::size_t>(verdict.next_token) < p.vocab);
    SPECDEC_FUZZ_ASSERT(p.row(verdict.accepted)[static_cast<std::size_t>(verdict.next_token)] > 0.0f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    specdec::fuzz::ByteReader in(data, size);
    const std::size_t vocab = 1 + in.byte() % 24;
    const std::size_t k = in.byte() % 6;
    static const double temperatures[] = {1.0, 0.0, 0.5, 2.0, 1e-30, 1e30, -1.0, std::nan(""), INFINITY, 0.7};
    static const double top_ps[] = {1.0, 0.9, 0.5, 1e-9, 0.0, 1.5, std::nan(""), 0.99};
    static const double min_ps[] = {0.0, 0.05, 0.5, 1.0, -0.1, 2.0, std::nan(""), 1e-9};
    specdec::SamplingOptions options;
    options.temperature = option_from(in.byte(), temperatures, std::size(temperatures));
    options.top_k = in.byte() % (vocab + 3);
    options.top_p = option_from(in.byte(), top_ps, std::size(top_ps));
    options.min_p = option_from(in.byte(), min_ps, std::size(min_ps));
    const std::uint8_t mode = in.byte();
    const bool point_mass = (mode & 1) != 0;
    const bool raw_rows = (mode & 2) != 0;
    const std::uint64_t position = in.u32();
    const specdec::CounterRng rng{in.u32()};

    std::vector<float> target_logits((k + 1) * vocab), draft_logits(k * vocab);
    for (float& v : target_logits) v = value_from(in.byte());
    for (float& v : draft_logits) v = value_from(in.byte());
    std::vector<Token> fuzzed_tokens(k);
    for (Token& t : fuzzed_tokens) t = static_cast<Token>(static_cast<std::int8_t>(in.byte()));

    try {
        specdec::validate(options);
    } catch (const specdec::Error&) {
        // Invalid options are rejected before any row is processed.
        SPECDEC_FUZZ_ASSERT(!(std::isfinite(options.temperature) && options.temperature >= 0.0 &&
                              options.top_p > 0.0 && options.top_p <= 1.0 && options.min_p >= 0.0 &&
                              options.min_p <= 1.0));
        return 0;
    }

    // Raw probability rows straight into the rule: anything not a probability is an Error.
    if (raw_rows) {
        specdec::DraftProposal draft;
        draft.tokens = fuzzed_tokens;
        if (!point_mass) {
            draft.vocab = vocab;
            draft.probabilities = draft_logits;
        }
        const specdec::DistributionRows p{target_logits.data(), k + 1, vocab};
        bool in_range = true;
        for (const Token t : fuzzed_tokens) in_range &= t >= 0 && static_cast<std::size_t>(t) < vocab;
        try {
            const auto verdict = specdec::accept_rejection_sampling(draft, p, rng, position);
            SPECDEC_FUZZ_ASSERT(in_range && valid_probabilities(target_logits));
            SPECDEC_FUZZ_ASSERT(point_mass || valid_probabilities(draft_logits));
            check_verdict(verdict, k, p);
        } catch (const specdec::Error&) {
        }
        return 0;
    }

    // Logits -> processed distributions -> drafts drawn from q -> the rule, as the decoder does it.
    std::vector<float> p((k + 1) * vocab);
    for (std::size_t i = 0; i <= k; ++i) {
        if (!process({target_logits.data() + i * vocab, vocab}, options, {p.data() + i * vocab, vocab})) return 0;
    }
    specdec::DraftProposal draft;
    if (point_mass) {
        draft.tokens = fuzzed_tokens;
    } else {
        draft.vocab = vocab;
        draft.probabilities.resize(k * vocab);
        for (std::size_t i = 0; i < k; ++i) {
            std::span<float> q{draft.probabilities.data() + i * vocab, vocab};
            if (!process({draft_logits.data() + i * vocab, vocab}, options, q)) return 0;
            const Token token = specdec::sample_from_distribution(q, rng.uniform(position + i, specdec::RandomPurpose::draft_sample));
            SPECDEC_FUZZ_ASSERT(token >= 0 && static_cast<std::size_t>(token) < vocab && q[static_cast<std::size_t>(token)] > 0.0f);
            draft.tokens.push_back(token);
        }
    }
    const specdec::DistributionRows rows{p.data(), k + 1, vocab};
    if (options.greedy()) {
        std::vector<Token> argmax(k + 1);
        for (std::size_t i = 0; i <= k; ++i) argmax[i] = specdec::greedy_token(rows.row(i));
        const auto verdict = specdec::accept_greedy(draft.tokens, argmax);
        SPECDEC_FUZZ_ASSERT(verdict.accepted <= k && verdict.next_token == argmax[verdict.accepted]);
        return 0;
    }
    bool in_range = true;
    for (const Token t : draft.tokens) in_range &= t >= 0 && static_cast<std::size_t>(t) < vocab;
    try {
        check_verdict(specdec::accept_rejection_sampling(draft, rows, rng, position), k, rows);
        SPECDEC_FUZZ_ASSERT(in_range);
    } catch (const specdec::Error&) {
        SPECDEC_FUZZ_ASSERT(!in_range);
    }
    return 0;
}
