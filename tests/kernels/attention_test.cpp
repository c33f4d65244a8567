// The narrow passes' attention (cpu::attend_consecutive): the queries of a
// verification over one cache, keys and values read once for all of them,
// must give each query bitwise what the per-query kernel gives it alone
// (greedy speculative decoding relies on a verification row being the
// one-token pass's row).
#include <cmath>
#include <cstring>
#include <vector>

#include "specdec/backends/cpu/attention.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/platform/x86.hpp"
#include "support/catch.hpp"

namespace {

struct AttentionInputs {
    std::size_t head_dim, queries, first_visible, stride, q_stride;
    std::vector<float> q, keys, values;

    AttentionInputs(std::size_t head_dim_, std::size_t queries_, std::size_t first_visible_)
        : head_dim(head_dim_), queries(queries_), first_visible(first_visible_), stride(head_dim_ + 8),
          q_stride(3 * head_dim_) {
        const std::size_t rows = first_visible + queries - 1;
        q.resize(queries * q_stride);
        keys.resize(rows * stride);
        values.resize(rows * stride);
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = specdec::detail::synthetic_normal(31, i);
        for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = 2.0f * specdec::detail::synthetic_normal(32, i);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = specdec::detail::synthetic_normal(33, i);
    }
    [[nodiscard]] float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

    // Every query through attend(), alone: rows [0, first_visible + i).
    [[nodiscard]] std::vector<float> one_by_one() const {
        std::vector<float> out(queries * q_stride, -1.0f), scores(first_visible + queries);
        for (std::size_t i = 0; i < queries; ++i)
            specdec::cpu::attend(&q[i * q_stride], keys.data(), values.data(), stride, first_visible + i, head_dim, scale(),
                                 scores.data(), &out[i * q_stride]);
        return out;
    }
    [[nodiscard]] std::vector<float> together(std::size_t visible) const {
        std::vector<float> out(queries * q_stride, -1.0f), scores(queries * (visible + queries));
        specdec::cpu::attend_consecutive(q.data(), q_stride, queries, visible, keys.data(), values.data(), stride, head_dim,
                                         scale(), scores.data(), out.data(), q_stride);
        return out;
    }
};

}  // namespace

TEST_CASE("attention of consecutive queries gives each query bitwise its own per-query result", "[attention]") {
    // Head sizes with and without a 16-value tail and a partial 64-value
    // slice; caches shorter and longer than one row block (64), ending
    // inside one.
    const std::size_t head_dim = GENERATE(std::size_t{8}, std::size_t{24}, std::size_t{64}, std::size_t{72}, std::size_t{128});
    const std::size_t first_visible = GENERATE(std::size_t{1}, std::size_t{5}, std::size_t{64}, std::size_t{70}, std::size_t{300});
    for (std::size_t queries = 1; queries <= 9; ++queries) {
        INFO("head_dim " << head_dim << ", first query sees " << first_visible << " rows, " << queries << " queries");
        const AttentionInputs inputs(head_dim, queries, first_visible);
        const std::vector<float> alone = inputs.one_by_one(), joint = inputs.together(first_visible);
        // Untouched gaps between output rows stay -1 in both.
        CHECK(std::memcmp(alone.data(), joint.data(), alone.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("negative control: the same comparison catches a query that sees one row too few", "[attention]") {
    // The causal mask is what a joint pass over rows could get wrong: with
    // every query seeing one row too few, each must differ from its own
    // result, and the comparison above must see it.
    const AttentionInputs inputs(64, 5, 40);
    const std::vector<float> alone = inputs.one_by_one(), shifted = inputs.together(39);
    CHECK(std::memcmp(alone.data(), shifted.data(), alone.size() * sizeof(float)) != 0);
    for (std::size_t i = 0; i < inputs.queries; ++i) {
        INFO("query " << i);
        CHECK(std::memcmp(&alone[i * inputs.q_stride], &shifted[i * inputs.q_stride], inputs.head_dim * sizeof(float)) != 0);
    }
}
