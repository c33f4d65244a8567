// Tree decoding: greedy equivalence with autoregressive decoding, exactness of
// tree verification through the exactness harness (first token and whole
// 3-token sequences, several temperatures, filters and shapes, model and
// point-mass drafts), and negative controls that the same statistic must
// catch at p < 1e-6: siblings drawn with replacement but verified as if drawn
// without, and a residual that is not updated between siblings.
// Set SPECDEC_EXACTNESS_REPORT=1 to print every configuration's statistic.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_drafter.hpp"
#include "support/toy_models.hpp"

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::TreeShape;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessReport;
using specdec::test::ExactnessSetup;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::sampled_run;
using specdec::test::ToyDrafter;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

static_assert(specdec::TreeLM<ToyLM>);
static_assert(specdec::TreeDrafter<specdec::PromptLookupDrafter>);

namespace {

ToyLMOptions tree_target_options(std::size_t vocab) { return {.vocab = vocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions tree_draft_options(std::size_t vocab, double noise = 0.6) {
    return {.vocab = vocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = noise};
}

constexpr std::size_t kTreeSamples = 20000;

// A fresh tree decoder per seed, generating `length` tokens from `prompt`.
template <class Rule = specdec::RecursiveRejection, class Target, class Draft>
auto tree_runner(Target& target, Draft& draft, TreeShape shape, SamplingOptions sampling, std::size_t length,
                 const std::vector<Token>& prompt) {
    return [&target, &draft, shape, sampling, length, &prompt](std::uint64_t seed) {
        specdec::TreeSpeculativeDecoder<Target, Draft, Rule, specdec::FixedTree> decoder(
            specdec::target(target), specdec::draft(draft),
            DecodingOptions{.sampling = sampling, .seed = seed, .max_new_tokens = length}, shape);
        return sampled_run(decoder.generate(prompt));
    };
}

// The first token and the whole 3-token sequences of one configuration, through the harness.
struct TreeReports {
    ExactnessReport first, sequences;
};

template <class Run>
TreeReports tree_reports(const std::string& name, const std::vector<Token>& prompt, std::size_t vocab,
                         std::size_t depth, const specdec::test::Conditional& target, Run run) {
    const ExactnessSetup sequences{.name = name + ", 3-token sequences",
                                   .prompt = prompt,
                                   .vocab = vocab,
                                   .length = 3,
                                   .draft_tokens = std::min<std::size_t>(depth, 2),
                                   .samples = kTreeSamples,
                                   .target = target};
    ExactnessSetup first = sequences;
    first.name = name + ", first token";
    first.length = 1;
    first.draft_tokens = 0;
    first.first_seed = 1000000;
    return {run_exactness(first, run), run_exactness(sequences, run)};
}

// Recursive rejection sampling whose residual is not updated between
// siblings (every sibling is tested against p): the bug of control (ii).
struct ResidualNotUpdated {
    specdec::TreeVerdict operator()(const specdec::TreeProposal& tree, specdec::TreeDistributions& p,
                                    const specdec::detail::TreeIndex& index, const specdec::CounterRng& rng) const {
        specdec::TreeVerdict verdict;
        std::int32_t node = -1;
        while (true) {
            const auto row = p.row(node);
            const std::uint64_t position = p.position(node);
            const double v = rng.uniform(position, specdec::RandomPurpose::target_sample);
            const auto children = index.children(node);
            std::vector<double> q_left;
            double q_mass = 1.0;
            if (!children.empty() && !tree.point_mass(static_cast<std::size_t>(children[0]))) {
                const auto q = tree.q(static_cast<std::size_t>(children[0]));
                q_left.assign(q.begin(), q.end());
            }
            std::int32_t accepted = -1;
            for (const std::int32_t child : children) {
                const std::size_t x = static_cast<std::size_t>(tree.tokens[static_cast<std::size_t>(child)]);
                const double u = rng.uniform(position, specdec::RandomPurpose::tree_test, static_cast<std::uint32_t>(child));
                const double d_x = q_left.empty() ? 1.0 : q_left[x] / q_mass;
                if (d_x > 0.0 && u * d_x < row[x]) {
                    accepted = child;
                    break;
                }
                if (!q_left.empty()) {
                    q_mass -= q_left[x];
                    q_left[x] = 0.0;
                }
            }
            if (accepted < 0) {
                verdict.next_token = specdec::sample_from_distribution(row, v);
                return verdict;
            }
            verdict.path.push_back(accepted);
            node = accepted;
        }
    }
};

// The bonus token after a fully accepted path of depth >= 3 drawn from the
// target's row of the last node's parent instead of the last node's own: a
// bug at the deepest level only, invisible to sequences of 3 tokens.
struct BonusFromParentRowWhenDeep {
    specdec::TreeVerdict operator()(const specdec::TreeProposal& tree, specdec::TreeDistributions& p,
                                    const specdec::detail::TreeIndex& index, const specdec::CounterRng& rng) const {
        specdec::TreeVerdict verdict = specdec::RecursiveRejection{}(tree, p, index, rng);
        if (verdict.path.size() >= 3) {
            const std::int32_t last = verdict.path.back();
            const std::int32_t parent = tree.parents[static_cast<std::size_t>(last)];
            verdict.next_token = specdec::sample_from_distribution(
                p.row(parent), rng.uniform(p.position(last), specdec::RandomPurpose::target_sample));
        }
        return verdict;
    }
};

// A period-9 pattern over 3 tokens whose 1-gram "0" is followed by 1, 2 and 0
// at different places: prompt lookup proposes a tree with 3 root children.
const std::vector<Token> kTreeLookupPrompt{0, 1, 1, 2, 0, 2, 2, 1, 0, 0, 1, 1, 2, 0, 2, 2, 1, 0};

}  // namespace

TEST_CASE("tree shapes: branching, chains, parsing, truncation and invalid shapes", "[tree]") {
    const TreeShape tree = TreeShape::from_branching({3, 2, 1});
    CHECK(tree.size() == 15);
    CHECK(tree.depth() == 3);
    CHECK(tree.widths() == std::vector<std::size_t>{3, 6, 6});
    CHECK(tree.describe() == "3x2x1");
    CHECK(tree.rank_of(1) == 1);
    CHECK(tree.rank_of(4) == 1);
    CHECK(TreeShape::parse("3x2x1") == tree);
    CHECK(TreeShape::parse("4") == TreeShape::chain(4));
    CHECK(TreeShape::chain(4).describe() == "chain 4");
    CHECK(tree.truncated(2).size() == 9);
    CHECK(TreeShape({-1, -1, 0}).describe() == "3 nodes 2+1");
    CHECK(TreeShape::from_branching({4}).describe() == "4 nodes 4");
    CHECK_THROWS_WITH(TreeShape({-1, 1}), Catch::Contains("node 1 has parent 1"));
    CHECK_THROWS_WITH(TreeShape({-1, 0, -1}), Catch::Contains("expected the nodes breadth first"));
    CHECK_THROWS_WITH(TreeShape::parse("3x0"), Catch::Contains("invalid tree shape \"3x0\""));
    CHECK_THROWS_WITH(TreeShape::parse("x2"), Catch::Contains("expected children per depth"));
}

TEST_CASE("the toy model's tree pass scores every path as a chain and commits one path", "[tree]") {
    ToyLM model(tree_target_options(7)), reference(tree_target_options(7));
    const std::vector<Token> prompt{1, 2, 3};
    (void)model.forward(prompt);
    // Two calls of one pending tree: 3 root children, then two grandchildren.
    const std::vector<Token> first{4, 5, 6};
    const std::vector<std::int32_t> first_parents{-1, -1, -1};
    (void)model.forward_tree(first, first_parents);
    const std::vector<Token> second{0, 2};
    const std::vector<std::int32_t> second_parents{1, 1};
    const specdec::LogitsView rows = model.forward_tree(second, second_parents);
    CHECK(model.cached_tokens() == 3);
    const auto expected = reference.logits_after(std::vector<Token>{1, 2, 3, 5, 2});
    CHECK(std::equal(expected.begin(), expected.end(), rows.row(1).begin()));
    const std::vector<std::int32_t> path{1, 4};
    model.commit_tree(path);
    CHECK(model.cache() == std::vector<Token>{1, 2, 3, 5, 2});
}

TEST_CASE("greedy tree decoding equals greedy autoregressive decoding token for token", "[tree][exactness][greedy]") {
    const std::vector<std::vector<Token>> prompts{{1}, {3, 7, 7, 2}, {10, 20, 30, 40, 41, 42, 0}};
    const std::vector<TreeShape> shapes{TreeShape::chain(3), TreeShape::from_branching({3, 2, 1}),
                                        TreeShape::from_branching({4, 1, 1, 1}), TreeShape({-1, -1, 0, 0, 1, 2})};
    std::size_t accepted_beyond_rank0 = 0;
    for (const double noise : {0.3, 0.9}) {
        for (const auto& prompt : prompts) {
            ToyLM reference({.vocab = 50, .seed = 21, .sharpness = 1.0});
            specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 80});
            const auto expected = autoregressive.generate(prompt).tokens;
            for (const TreeShape& shape : shapes) {
                ToyLM target({.vocab = 50, .seed = 21, .sharpness = 1.0});
                ToyLM draft({.vocab = 50, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = noise});
                specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                                        {.sampling = {.temperature = 0.0}, .max_new_tokens = 80}, shape);
                const auto result = decoder.generate(prompt);
                INFO("noise " << noise << ", prompt length " << prompt.size() << ", shape " << shape.describe());
                REQUIRE(result.tokens == expected);
                CHECK(result.stats.draft_tokens_accepted > 0);
                CHECK(result.stats.target_forward_passes < expected.size());
                // One draft pass per depth: the catch-up pass and one tree pass per evaluated depth.
                CHECK(result.stats.draft_forward_passes <= result.stats.target_forward_passes * shape.depth());
                for (std::size_t d = 0; d < result.stats.accepted_at_depth_rank.size(); ++d)
                    for (std::size_t r = 1; r < result.stats.accepted_at_depth_rank[d].size(); ++r)
                        accepted_beyond_rank0 += result.stats.accepted_at_depth_rank[d][r];
            }
        }
    }
    // Siblings other than the draft's first choice were accepted too: the tree path ran.
    CHECK(accepted_beyond_rank0 > 0);
}

TEST_CASE("greedy tree decoding with prompt lookup equals autoregressive decoding", "[tree][exactness][greedy]") {
    ToyLM reference({.vocab = 8, .seed = 2});
    const std::vector<Token> prompt{1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2};
    specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 64});
    const auto expected = autoregressive.generate(prompt).tokens;
    ToyLM target({.vocab = 8, .seed = 2});
    specdec::PromptLookupDrafter drafter;
    specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(drafter),
                                            {.sampling = {.temperature = 0.0}, .max_new_tokens = 64},
                                            TreeShape::from_branching({3, 1, 1}));
    const auto result = decoder.generate(prompt);
    CHECK(result.tokens == expected);
    CHECK(result.stats.draft_tokens_proposed > 0);
    CHECK(result.stats.draft_forward_passes == 0);
}

TEST_CASE("prompt lookup proposes distinct continuations as one tree of point masses", "[tree]") {
    specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 2});
    const SamplingOptions sampling{};
    const specdec::CounterRng rng{1};
    const TreeShape shape = TreeShape::from_branching({3, 2});
    const std::vector<Token> history{5, 1, 2, 9, 1, 3, 9, 1, 2, 8, 1};
    const specdec::TreeProposal tree = drafter.propose_tree({history, shape, sampling, rng});
    // "1" was followed by 2 9, 3 9, 2 8: children 2 and 3 of the root, 9 and 8 under 2.
    CHECK(tree.tokens == std::vector<Token>{2, 8, 3, 9, 9});
    CHECK(tree.parents == std::vector<std::int32_t>{-1, 0, -1, 2, 0});
    CHECK(tree.distribution_of.empty());
}

TEST_CASE("tree verification is exact: first token and 3-token sequences, several temperatures, filters and shapes", "[tree][exactness]") {
    const std::vector<SamplingOptions> transforms{
        {.temperature = 1.0},
        {.temperature = 0.6},
        {.temperature = 1.3, .top_k = 3},
        {.temperature = 1.0, .top_p = 0.8},
        {.temperature = 0.9, .top_k = 3, .top_p = 0.9, .min_p = 0.05},
    };
    const std::vector<TreeShape> shapes{TreeShape::from_branching({3, 2}), TreeShape::from_branching({4, 1}),
                                        TreeShape({-1, -1, 0, 0, 1})};
    constexpr std::size_t kVocab = 4;
    std::size_t case_index = 0;
    for (const SamplingOptions& sampling : transforms) {
        const TreeShape& shape = shapes[case_index++ % shapes.size()];
        ToyLM target(tree_target_options(kVocab)), draft(tree_draft_options(kVocab));
        std::ostringstream name;
        name << "tree " << shape.describe() << ", T " << sampling.temperature << " top_k " << sampling.top_k
             << " top_p " << sampling.top_p << " min_p " << sampling.min_p;
        const std::vector<Token> prompt{1, 3};
        const auto reports = tree_reports(name.str(), prompt, kVocab, shape.depth(), reference_conditional(target, sampling),
                                          tree_runner(target, draft, shape, sampling, 3, prompt));
        check_exact(reports.first, 0);
        check_exact(reports.sequences, 2);
        // Siblings after the first were accepted at every depth that has
        // them: the without-replacement residual path ran.
        specdec::GenerationStats stats;
        for (std::uint64_t seed = 1; seed <= 300; ++seed) {
            specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                                    DecodingOptions{.sampling = sampling, .seed = seed, .max_new_tokens = 3}, shape);
            stats += decoder.generate(prompt).stats;
        }
        REQUIRE(stats.accepted_at_depth_rank.size() >= 2);
        for (std::size_t d = 0; d < 2; ++d) {
            bool has_later_siblings = false;
            for (std::size_t i = 0; i < shape.size(); ++i) has_later_siblings |= shape.depth_of(i) == d + 1 && shape.rank_of(i) > 0;
            if (!has_later_siblings) continue;
            const auto& row = stats.accepted_at_depth_rank[d];
            CHECK(std::accumulate(row.begin() + 1, row.end(), std::size_t{0}) > 0);
        }
    }
}

TEST_CASE("tree verification is exact with point-mass (prompt lookup) trees", "[tree][exactness]") {
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.7, .top_k = 2}}) {
        ToyLM target(tree_target_options(3));
        specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 1});
        const TreeShape shape = TreeShape::from_branching({3, 2});
        const auto reports = tree_reports("prompt lookup tree, T " + std::to_string(sampling.temperature), kTreeLookupPrompt, 3,
                                          2, reference_conditional(target, sampling),
                                          tree_runner(target, drafter, shape, sampling, 3, kTreeLookupPrompt));
        check_exact(reports.first, 0);
        check_exact(reports.sequences, 2);
    }
}

TEST_CASE("a toy tree drafter drawing siblings without replacement is exact", "[tree][exactness]") {
    ToyLM target(tree_target_options(3));
    const ToyLM draft_model(tree_draft_options(3, 0.8));
    ToyDrafter drafter(draft_model);
    const SamplingOptions sampling{.temperature = 1.0};
    const TreeShape shape = TreeShape::from_branching({3, 2});
    const std::vector<Token> prompt{1, 2};
    const auto reports = tree_reports("toy drafter, siblings without replacement", prompt, 3, 2,
                                      reference_conditional(target, sampling),
                                      tree_runner(target, drafter, shape, sampling, 3, prompt));
    check_exact(reports.first, 0);
    check_exact(reports.sequences, 2);
}

// The same drafter with one knob turned: control (i).
TEST_CASE("negative control (i): siblings drawn with replacement, verified as if without, are caught", "[tree][exactness][negative-control]") {
    ToyLM target(tree_target_options(3));
    const ToyLM draft_model(tree_draft_options(3, 0.8));
    ToyDrafter drafter(draft_model, {.siblings_with_replacement = true});
    const SamplingOptions sampling{.temperature = 1.0};
    const TreeShape shape = TreeShape::from_branching({3, 2});
    const std::vector<Token> prompt{1, 2};
    const auto reports = tree_reports("siblings with replacement", prompt, 3, 2, reference_conditional(target, sampling),
                                      tree_runner(target, drafter, shape, sampling, 3, prompt));
    check_caught(reports.first, 0);
    check_caught(reports.sequences, 2);
}

TEST_CASE("negative control (ii): a residual not updated between siblings is caught", "[tree][exactness][negative-control]") {
    ToyLM target(tree_target_options(3)), draft(tree_draft_options(3, 0.8));
    const SamplingOptions sampling{.temperature = 1.0};
    const TreeShape shape = TreeShape::from_branching({3, 2});
    const std::vector<Token> prompt{1, 2};
    const auto reports = tree_reports("residual not updated", prompt, 3, 2, reference_conditional(target, sampling),
                                      tree_runner<ResidualNotUpdated>(target, draft, shape, sampling, 3, prompt));
    check_caught(reports.first, 0);
    check_caught(reports.sequences, 2);
}

TEST_CASE("non-finite logits in a tree step name the model and the position", "[tree][errors]") {
    const std::vector<Token> prompt{1, 2};
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        ToyLM bad_target({.vocab = 10, .nan_at_position = 4}), draft({.vocab = 10});
        specdec::TreeSpeculativeDecoder with_bad_target(specdec::target(bad_target), specdec::draft(draft),
                                                        {.sampling = {.temperature = temperature}, .max_new_tokens = 20},
                                                        TreeShape::from_branching({2, 2}));
        CHECK_THROWS_WITH(with_bad_target.generate(prompt),
                          Catch::Contains("target model logits at position") && Catch::Contains("contain NaN"));
        // The draft evaluates the depth-2 nodes (position 3) because they have children.
        ToyLM target({.vocab = 10}), bad_draft({.vocab = 10, .nan_at_position = 3});
        specdec::TreeSpeculativeDecoder with_bad_draft(specdec::target(target), specdec::draft(bad_draft),
                                                       {.sampling = {.temperature = temperature}, .max_new_tokens = 20},
                                                       TreeShape::from_branching({2, 2, 2}));
        CHECK_THROWS_WITH(with_bad_draft.generate(prompt),
                          Catch::Contains("draft model logits at position") && Catch::Contains("contain NaN"));
    }
}

TEST_CASE("a tree drafter that proposes more than its shape, or a non-tree, is an error", "[tree][errors]") {
    struct Oversized {
        void reset() {}
        specdec::TreeProposal propose_tree(const specdec::TreeDraftRequest& request) {
            specdec::TreeProposal tree;
            for (std::size_t i = 0; i <= request.shape.size(); ++i) {
                tree.tokens.push_back(0);
                tree.parents.push_back(-1);
            }
            return tree;
        }
    };
    struct BadParent {
        void reset() {}
        specdec::TreeProposal propose_tree(const specdec::TreeDraftRequest&) {
            return specdec::TreeProposal{.tokens = {1, 2}, .parents = {-1, 1}};
        }
    };
    ToyLM target({.vocab = 10});
    Oversized oversized;
    specdec::TreeSpeculativeDecoder a(specdec::target(target), specdec::draft(oversized), {}, TreeShape::chain(2));
    CHECK_THROWS_WITH(a.generate(std::vector<Token>{1}), Catch::Contains("proposed 3 nodes of depth 1 when at most 2 nodes"));
    BadParent bad_parent;
    specdec::TreeSpeculativeDecoder b(specdec::target(target), specdec::draft(bad_parent), {}, TreeShape::chain(2));
    CHECK_THROWS_WITH(b.generate(std::vector<Token>{1}), Catch::Contains("tree draft node 1 has parent 1"));
}

TEST_CASE("tree steps respect max_new_tokens, stop tokens and the context", "[tree]") {
    ToyLM target({.vocab = 12, .seed = 3, .context = 12}), draft({.vocab = 12, .seed = 3, .noise_seed = 1, .noise = 0.2, .context = 12});
    specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                            {.sampling = {.temperature = 1.0}, .max_new_tokens = 100},
                                            TreeShape::from_branching({2, 2, 2}));
    const auto result = decoder.generate(std::vector<Token>{1, 2, 3});
    CHECK(result.stop_reason == specdec::StopReason::context_full);
    CHECK(decoder.sequence().size() == 13);
    ToyLM target2({.vocab = 12, .seed = 3}), draft2({.vocab = 12, .seed = 3, .noise_seed = 1, .noise = 0.2});
    specdec::TreeSpeculativeDecoder limited(specdec::target(target2), specdec::draft(draft2),
                                            {.sampling = {.temperature = 0.0}, .max_new_tokens = 7},
                                            TreeShape::from_branching({2, 2, 2}));
    const auto seven = limited.generate(std::vector<Token>{1, 2, 3}).tokens;
    CHECK(seven.size() == 7);
    // A stop token inside an accepted path ends the generation there.
    specdec::TreeSpeculativeDecoder stopping(specdec::target(target2), specdec::draft(draft2),
                                             {.sampling = {.temperature = 0.0}, .max_new_tokens = 7, .stop_tokens = {seven[3]}},
                                             TreeShape::from_branching({2, 2, 2}));
    const auto stopped = stopping.generate(std::vector<Token>{1, 2, 3});
    const auto first_stop = std::find(seven.begin(), seven.end(), seven[3]);
    CHECK(stopped.stop_reason == specdec::StopReason::stop_token);
    CHECK(stopped.tokens == std::vector<Token>(seven.begin(), first_stop + 1));
    // A draft whose context is smaller than the target's: its pending tree is kept within it.
    ToyLM target3({.vocab = 12, .seed = 3}), small_draft({.vocab = 12, .seed = 3, .noise_seed = 1, .noise = 0.2, .context = 9});
    specdec::TreeSpeculativeDecoder small(specdec::target(target3), specdec::draft(small_draft),
                                          {.sampling = {.temperature = 1.0}, .max_new_tokens = 12},
                                          TreeShape::from_branching({3, 3, 2}));
    CHECK(small.generate(std::vector<Token>{1, 2, 3}).tokens.size() == 12);
}

// Trees deeper than the 3-token sequences above reach: the whole sequence is
// one token longer than the tree, so the first step drafts every depth and a
// bug at the deepest level or in the bonus row after it changes what is
// counted (the harness fails a run that never reaches the deepest depth).
TEST_CASE("deep trees are exact down to their last depth: sequences one token longer than the tree", "[tree][exactness]") {
    struct Case {
        TreeShape shape;
        SamplingOptions sampling;
    };
    const std::vector<Case> cases{{TreeShape::from_branching({3, 1, 1}), {.temperature = 1.0}},
                                  {TreeShape::from_branching({2, 2, 1, 1}), {.temperature = 0.8, .top_k = 2}},
                                  {TreeShape::from_branching({1, 1, 1, 1}), {.temperature = 1.2, .top_p = 0.9}}};
    constexpr std::size_t kVocab = 3;
    for (const Case& c : cases) {
        ToyLM target(tree_target_options(kVocab)), draft(tree_draft_options(kVocab, 0.3));
        const std::size_t depth = c.shape.depth();
        const std::vector<Token> prompt{1, 2};
        const ExactnessSetup setup{.name = "deep tree " + c.shape.describe() + ", " + std::to_string(depth + 1) +
                                           "-token sequences, T " + std::to_string(c.sampling.temperature),
                                   .prompt = prompt,
                                   .vocab = kVocab,
                                   .length = depth + 1,
                                   .draft_tokens = depth,
                                   .samples = kTreeSamples,
                                   .target = reference_conditional(target, c.sampling)};
        check_exact(run_exactness(setup, tree_runner(target, draft, c.shape, c.sampling, depth + 1, prompt)), depth);
    }
}

TEST_CASE("a tree draft with forward_last (its catching up reads one row) is exact down to the last depth; a wrong "
          "bonus row in the same setup is caught",
          "[tree][exactness]") {
    // Depth 3 and 6-token sequences: after a fully accepted path another step
    // follows, whose catching up feeds two tokens through forward_last.
    const TreeShape shape = TreeShape::from_branching({2, 1, 1});
    const SamplingOptions sampling{.temperature = 1.0};
    constexpr std::size_t kVocab = 3, kLength = 6;
    ToyLM target(tree_target_options(kVocab));
    const std::vector<Token> prompt{1, 2};
    const auto setup = [&](std::string name) {
        return ExactnessSetup{.name = std::move(name),
                              .prompt = prompt,
                              .vocab = kVocab,
                              .length = kLength,
                              .draft_tokens = 3,
                              .samples = kTreeSamples,
                              .target = reference_conditional(target, sampling)};
    };
    specdec::test::LastRowToyLM draft(tree_draft_options(kVocab, 0.3));
    check_exact(run_exactness(setup("tree 2x1x1, forward_last draft"), tree_runner(target, draft, shape, sampling, kLength, prompt)),
                3);
    CHECK(draft.multi_token_last_row_calls > kTreeSamples / 10);  // two-token catch-ups were many

    specdec::test::LastRowToyLM control_draft(tree_draft_options(kVocab, 0.3));
    check_caught(run_exactness(setup("tree 2x1x1, forward_last draft, bonus from the parent's row"),
                               tree_runner<BonusFromParentRowWhenDeep>(target, control_draft, shape, sampling, kLength, prompt)),
                 3);
}

// The bonus token drawn from the parent's row once a depth-3 path is fully
// accepted: the statistic must reject it, down to the last depth.
void check_wrong_bonus_row_caught(const TreeShape& shape, const std::string& name) {
    const SamplingOptions sampling{.temperature = 1.0};
    constexpr std::size_t kVocab = 3;
    ToyLM target(tree_target_options(kVocab)), draft(tree_draft_options(kVocab, 0.3));
    const std::vector<Token> prompt{1, 2};
    const ExactnessSetup setup{.name = name,
                               .prompt = prompt,
                               .vocab = kVocab,
                               .length = 4,
                               .draft_tokens = 3,
                               .samples = kTreeSamples,
                               .target = reference_conditional(target, sampling)};
    check_caught(run_exactness(setup, tree_runner<BonusFromParentRowWhenDeep>(target, draft, shape, sampling, 4, prompt)), 3);
}

TEST_CASE("negative control (iii): a wrong bonus row after a fully accepted depth-3 path is caught", "[tree][exactness][negative-control]") {
    check_wrong_bonus_row_caught(TreeShape::from_branching({2, 1, 1}), "deep tree 2x1x1 with the bonus drawn from the parent's row");
}

TEST_CASE("negative control (iv): the same wrong bonus row on a chain-shaped tree (one causal pass) is caught",
          "[tree][exactness][negative-control]") {
    // A chain-shaped tree runs as a chain step (forward, then truncate): the
    // statistic must see a bug on that path too.
    check_wrong_bonus_row_caught(TreeShape::chain(3), "chain-shaped tree 1x1x1 with the bonus drawn from the parent's row");
}
