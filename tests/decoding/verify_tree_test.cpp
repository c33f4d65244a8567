// The tree verify-only entry point (decoding/verify_tree.hpp), driven the way
// an engine that drafts token trees by itself drives it: its own tree drafter
// (sibling groups drawn without replacement from a draft model's processed
// rows, with the tree_draft stream) and nothing of specdec's decoding but
// verify_tree. Exactness through the sequence chi-square harness down to the
// tree's last depth, with a negative control the same statistic catches (an
// engine that draws siblings with replacement and reports them as drawn
// without); equality with
// TreeSpeculativeDecoder seed for seed (the same drafter plugged into it);
// greedy equality with autoregressive decoding; bad input.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

namespace verify_tree_test {

using specdec::CounterRng;
using specdec::RandomPurpose;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::TreeProposal;
using specdec::TreeShape;
using specdec::TreeVerifyResult;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessSetup;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::SampledRun;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

ToyLMOptions target_options(std::size_t vocab) { return {.vocab = vocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions draft_options(std::size_t vocab, double noise = 0.5) {
    return {.vocab = vocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = noise};
}

// The engine's tree drafter: node i of the shape is the rank_of(i)-th draw,
// without replacement, from the draft model's processed row after its
// parent's path (one q row per sibling group), with the uniform
// rng.uniform(history length, tree_draft, i); at T = 0 the rank_of(i)-th best
// token of the draft's row, a point mass. A TreeDrafter too, so that
// TreeSpeculativeDecoder can run the same drafts. The lying engine draws every
// sibling from the whole q (with replacement) but reports them as drawn
// without replacement.
struct EngineTreeDrafter {
    const ToyLM* draft;
    bool with_replacement = false;

    TreeProposal propose_tree(const specdec::TreeDraftRequest& request) const {
        const TreeShape& shape = request.shape;
        const std::size_t vocab = draft->vocab_size();
        const bool greedy = request.sampling.greedy();
        TreeProposal tree;
        tree.vocab = greedy ? 0 : vocab;
        std::vector<std::int32_t> group_row(shape.size() + 1, -1);  // per parent (+1): its q row
        std::vector<std::vector<float>> group_logits(shape.size() + 1);
        std::vector<std::vector<Token>> drawn(shape.size() + 1);      // per parent: siblings drawn so far
        for (std::size_t i = 0; i < shape.size(); ++i) {
            const std::int32_t parent = shape.parent(i);
            const auto slot = static_cast<std::size_t>(parent + 1);
            if (group_logits[slot].empty()) {
                std::vector<Token> prefix(request.history.begin(), request.history.end());
                std::vector<Token> tail;
                for (std::int32_t n = parent; n >= 0; n = shape.parent(static_cast<std::size_t>(n)))
                    tail.push_back(tree.tokens[static_cast<std::size_t>(n)]);
                prefix.insert(prefix.end(), tail.rbegin(), tail.rend());
                group_logits[slot] = draft->logits_after(prefix);
                if (!greedy) {
                    group_row[slot] = static_cast<std::int32_t>(tree.probabilities.size() / vocab);
                    tree.probabilities.resize(tree.probabilities.size() + vocab);
                    specdec::logits_to_distribution(group_logits[slot], request.sampling,
                                                    {tree.probabilities.data() + tree.probabilities.size() - vocab, vocab},
                                                    "engine draft");
                }
            }
            const auto taken = [&](std::size_t t) {
                return std::find(drawn[slot].begin(), drawn[slot].end(), static_cast<Token>(t)) != drawn[slot].end();
            };
            Token token = -1;
            if (greedy) {
                for (std::size_t t = 0; t < vocab; ++t)
                    if (!taken(t) && (token < 0 || group_logits[slot][t] > group_logits[slot][static_cast<std::size_t>(token)]))
                        token = static_cast<Token>(t);
            } else {
                const float* q = tree.probabilities.data() + static_cast<std::size_t>(group_row[slot]) * vocab;
                double remaining = 0.0;
                for (std::size_t t = 0; t < vocab; ++t)
                    if (with_replacement || !taken(t)) remaining += q[t];
                const double u =
                    request.rng.uniform(request.history.size(), RandomPurpose::tree_draft, static_cast<std::uint32_t>(i));
                double cumulative = 0.0;
                for (std::size_t t = 0; t < vocab && remaining > 0.0; ++t) {
                    if ((!with_replacement && taken(t)) || q[t] <= 0.0f) continue;
                    token = static_cast<Token>(t);
                    cumulative += q[t] / remaining;
                    if (u < cumulative) break;
                }
            }
            if (token < 0) throw specdec::Error("engine drafter: a sibling group larger than q's support");
            drawn[slot].push_back(token);
            tree.tokens.push_back(token);
            tree.parents.push_back(parent);
            tree.distribution_of.push_back(group_row[slot]);
        }
        if (greedy) tree.distribution_of.clear();
        return tree;
    }
    void reset() {}
};

// The engine: a loop of its own around verify_tree (the model overload),
// generating `length` tokens; the tree shrinks near the end as the decoder's
// does (no deeper than the tokens still wanted allow, minus the next token).
SampledRun engine_generate(ToyLM& target, const EngineTreeDrafter& drafter, const TreeShape& shape,
                           const SamplingOptions& sampling, std::uint64_t seed, const std::vector<Token>& prompt,
                           std::size_t length) {
    const CounterRng rng{seed};
    std::vector<Token> sequence = prompt;
    std::vector<Token> pending = prompt;
    SampledRun run;
    run.proposed_at_position.assign(shape.depth(), 0);
    run.accepted_at_position.assign(shape.depth(), 0);
    target.truncate(0);
    while (run.tokens.size() < length) {
        const TreeShape step_shape = shape.truncated(length - run.tokens.size() - 1);
        const TreeProposal tree = step_shape.empty() ? TreeProposal{}
                                                     : drafter.propose_tree({sequence, step_shape, sampling, rng});
        const TreeVerifyResult verdict = specdec::verify_tree(target, pending, tree, sampling, rng);
        for (std::size_t i = 0; i < tree.size(); ++i) {
            std::size_t depth = 1;
            for (std::int32_t n = tree.parents[i]; n >= 0; n = tree.parents[static_cast<std::size_t>(n)]) ++depth;
            ++run.proposed_at_position[depth - 1];
        }
        for (std::size_t d = 0; d < verdict.path.size(); ++d) ++run.accepted_at_position[d];
        for (const Token token : verdict.tokens) {
            if (run.tokens.size() == length) break;
            run.tokens.push_back(token);
            sequence.push_back(token);
        }
        pending = {verdict.next_token};
    }
    return run;
}

constexpr std::size_t kSamples = 20000;

}  // namespace verify_tree_test

using namespace verify_tree_test;

TEST_CASE("verify-tree: an engine drafting token trees by itself is exact through verify_tree, down to the last depth; "
          "siblings drawn with replacement are caught",
          "[exactness][verify-only][tree]") {
    constexpr std::size_t kVocab = 3;
    const std::vector<Token> prompt{1, 2};
    // Three siblings first (the whole vocabulary), where drawing them with
    // replacement shows most; the draft further from the target than elsewhere.
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 1.3}}) {
        const TreeShape shape = TreeShape::from_branching({3, 2, 1});
        const std::size_t depth = shape.depth();
        ToyLM target(target_options(kVocab));
        const ToyLM draft(draft_options(kVocab, 0.8));
        const auto setup = [&](const std::string& name) {
            return ExactnessSetup{.name = name + ", T " + std::to_string(sampling.temperature) + " top_k " +
                                          std::to_string(sampling.top_k),
                                  .prompt = prompt,
                                  .vocab = kVocab,
                                  .length = depth + 1,
                                  .draft_tokens = depth,
                                  .samples = kSamples,
                                  .target = reference_conditional(target, sampling)};
        };
        const EngineTreeDrafter honest{&draft};
        check_exact(run_exactness(setup("verify_tree, engine tree 3x2x1"),
                                  [&](std::uint64_t seed) {
                                      return engine_generate(target, honest, shape, sampling, seed, prompt, depth + 1);
                                  }),
                    depth);
        const EngineTreeDrafter lying{&draft, true};
        check_caught(run_exactness(setup("negative control: siblings drawn with replacement, reported as without"),
                                   [&](std::uint64_t seed) {
                                       return engine_generate(target, lying, shape, sampling, seed, prompt, depth + 1);
                                   }),
                     depth);
    }
}

TEST_CASE("verify-tree: the same rows, tree and seed give TreeSpeculativeDecoder's tokens; at T = 0 the target's greedy "
          "tokens",
          "[verify-only][tree]") {
    constexpr std::size_t kVocab = 6;
    const std::vector<Token> prompt{1, 4, 2};
    const ToyLM draft(draft_options(kVocab));
    const EngineTreeDrafter drafter{&draft};
    for (const TreeShape& shape : {TreeShape::from_branching({3, 2, 1}), TreeShape::from_branching({2, 1, 1, 1})}) {
        for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.0}}) {
            INFO("tree " << shape.describe() << ", T " << sampling.temperature);
            ToyLM engine_target(target_options(kVocab)), decoder_target(target_options(kVocab));
            for (std::uint64_t seed = 1; seed <= 100; ++seed) {
                EngineTreeDrafter plugged = drafter;
                specdec::TreeSpeculativeDecoder<ToyLM, EngineTreeDrafter> decoder(
                    specdec::target(decoder_target), specdec::draft(plugged),
                    specdec::DecodingOptions{.sampling = sampling, .seed = seed, .max_new_tokens = 12}, shape);
                const std::vector<Token> expected = decoder.generate(prompt).tokens;
                CHECK(engine_generate(engine_target, drafter, shape, sampling, seed, prompt, 12).tokens == expected);
            }
            if (sampling.greedy()) {
                ToyLM plain_target(target_options(kVocab));
                specdec::AutoregressiveDecoder<ToyLM> plain(plain_target, specdec::DecodingOptions{.sampling = sampling, .max_new_tokens = 12});
                CHECK(engine_generate(engine_target, drafter, shape, sampling, 7, prompt, 12).tokens ==
                      plain.generate(prompt).tokens);
            }
        }
    }
}

TEST_CASE("verify-tree: bad input is refused with a clear error, the cache unchanged", "[verify-only][tree][errors]") {
    constexpr std::size_t kVocab = 4;
    ToyLM target(target_options(kVocab));
    const SamplingOptions sampling{.temperature = 1.0};
    const CounterRng rng{3};
    TreeProposal tree;
    tree.tokens = {1, 2, 3};
    tree.parents = {-1, -1, 0};
    std::vector<float> rows(4 * kVocab, 0.5f);
    // Rows for another number of nodes.
    CHECK_THROWS_WITH(specdec::verify_tree(specdec::dense_logits(rows, 3, kVocab), tree, sampling, rng, 2),
                      Catch::Contains("expected 4 rows"));
    // A parent that is not an earlier node.
    TreeProposal not_a_tree = tree;
    not_a_tree.parents = {-1, 2, 0};
    CHECK_THROWS_WITH(specdec::verify_tree(specdec::dense_logits(rows, 4, kVocab), not_a_tree, sampling, rng, 2),
                      Catch::Contains("expected -1 (a child of the committed sequence) or an earlier node"));
    // A NaN logit in a row the rule reads.
    rows[1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH(specdec::verify_tree(specdec::dense_logits(rows, 4, kVocab), tree, sampling, rng, 2),
                      Catch::Contains("NaN"));
    // Penalties read the history, which verify_tree does not see.
    CHECK_THROWS_WITH(specdec::verify_tree(specdec::dense_logits(rows, 4, kVocab), tree,
                                           SamplingOptions{.temperature = 1.0, .repeat_penalty = 1.3}, rng, 2),
                      Catch::Contains("adjust_logits"));
    // The model overload: no pending token, a pending id outside the vocabulary.
    (void)target.forward(std::vector<Token>{1, 2});
    CHECK_THROWS_WITH(specdec::verify_tree(target, std::span<const Token>{}, tree, sampling, rng), Catch::Contains("no pending token"));
    CHECK_THROWS_WITH(specdec::verify_tree(target, std::vector<Token>{9}, tree, sampling, rng), Catch::Contains("outside the vocabulary"));
    CHECK(target.cached_tokens() == 2);
}
