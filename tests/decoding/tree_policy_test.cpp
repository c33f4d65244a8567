// Tree shapes chosen from costs and acceptance: the optimiser (the chain is a
// special case), AutoTree learning online from a fixed injected cost model,
// and by exact enumeration that more siblings never lower acceptance under
// recursive rejection sampling without replacement, which stays exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::TreeShape;
using specdec::test::ToyLM;

namespace {

// The chain's expected tokens per cost, computed directly.
double chain_rate(double alpha, std::size_t k, const specdec::TreeCosts& costs) {
    double expected = 1.0, survive = 1.0;
    for (std::size_t i = 0; i < k; ++i) {
        survive *= alpha;
        expected += survive;
    }
    return expected / (costs.target_pass(k + 1) + static_cast<double>(k) * costs.draft_pass + costs.per_step);
}

// One AutoTree shared by every decoder of a test, fed a fixed cost model
// instead of wall-clock times (a target pass over n tokens costs
// target_pass(n), a draft pass 0.05), so that its choices do not depend on the
// machine's load.
// branching_penalty: seconds a step with siblings costs beyond its passes (a
// cost the optimiser's prices do not see).
struct FixedCostAutoTree {
    specdec::AutoTree* policy;
    std::function<double(std::size_t)> target_pass;
    double branching_penalty = 0.0;
    std::size_t branching_steps = 0, steps = 0;
    TreeShape plan(std::size_t max_depth, std::uint64_t position) { return policy->plan(max_depth, position); }
    void observe(specdec::TreeStepOutcome outcome) {
        outcome.draft_seconds = 0.05 * static_cast<double>(outcome.draft_passes);
        outcome.target_seconds = target_pass(outcome.target_width);
        outcome.acceptance_seconds = 0.0;
        outcome.total_seconds = outcome.draft_seconds + outcome.target_seconds;
        ++steps;
        if (outcome.nodes > outcome.depth) {
            outcome.total_seconds += branching_penalty;
            ++branching_steps;
        }
        policy->observe(outcome);
    }
};

}  // namespace

TEST_CASE("the optimiser returns the best chain when only first-ranked siblings are ever accepted", "[tree][policy]") {
    for (const double alpha : {0.5, 0.8, 0.95}) {
        for (const double slope : {0.0, 0.1, 0.4}) {
            const specdec::TreeCosts costs{[slope](std::size_t n) { return 1.0 + slope * static_cast<double>(n - 1); }, 0.1, 0.0};
            const auto acceptance = [alpha](std::size_t, std::size_t rank) { return rank == 0 ? alpha : 0.0; };
            const specdec::TreePlan plan = specdec::optimise_tree(acceptance, costs, 12, 8);
            double best = 1.0 / costs.target_pass(1);
            std::size_t best_k = 0;
            for (std::size_t k = 1; k <= 8; ++k)
                if (chain_rate(alpha, k, costs) > best) {
                    best = chain_rate(alpha, k, costs);
                    best_k = k;
                }
            INFO("alpha " << alpha << " slope " << slope << ": optimiser " << plan.shape.describe() << " rate "
                          << plan.rate() << ", best chain " << best_k << " rate " << best);
            CHECK(plan.shape.is_chain());
            CHECK(plan.shape.size() == best_k);
            CHECK(plan.rate() == Approx(best).epsilon(1e-12));
        }
    }
}

TEST_CASE("the optimiser grows a bushy tree when wide passes are cheap and a narrow one when they are dear", "[tree][policy]") {
    // Conditional acceptance of the first child 0.6, of later siblings 0.35.
    const auto acceptance = [](std::size_t, std::size_t rank) { return rank == 0 ? 0.6 : 0.35; };
    const specdec::TreeCosts flat{[](std::size_t) { return 1.0; }, 0.05, 0.0};
    const specdec::TreePlan wide = specdec::optimise_tree(acceptance, flat, 32, 6);
    INFO("flat cost: " << wide.shape.describe() << " E " << wide.expected_tokens << " rate " << wide.rate());
    CHECK(wide.shape.size() == 32);
    CHECK(!wide.shape.is_chain());
    CHECK(wide.rate() > chain_rate(0.6, 6, flat));
    // Expected tokens: 1 + the sum over nodes of their acceptance probabilities.
    double expected = 1.0;
    std::vector<double> value(wide.shape.size());
    for (std::size_t i = 0; i < wide.shape.size(); ++i) {
        const std::size_t r = wide.shape.rank_of(i);
        double v = r == 0 ? 0.6 : 0.35;
        for (std::size_t s = 0; s < r; ++s) v *= s == 0 ? 0.4 : 0.65;
        const std::int32_t parent = wide.shape.parent(i);
        value[i] = v * (parent < 0 ? 1.0 : value[static_cast<std::size_t>(parent)]);
        expected += value[i];
    }
    CHECK(wide.expected_tokens == Approx(expected).epsilon(1e-12));

    const specdec::TreeCosts steep{[](std::size_t n) { return 1.0 + 0.3 * static_cast<double>(n - 1); }, 0.05, 0.0};
    const specdec::TreePlan narrow = specdec::optimise_tree(acceptance, steep, 32, 6);
    INFO("steep cost: " << narrow.shape.describe() << " rate " << narrow.rate());
    CHECK(narrow.shape.size() < 6);
    // Nothing pays when every extra token costs more than it can bring.
    const specdec::TreeCosts prohibitive{[](std::size_t n) { return static_cast<double>(n); }, 0.5, 0.0};
    CHECK(specdec::optimise_tree(acceptance, prohibitive, 32, 6).shape.empty());
}

TEST_CASE("AutoTree learns a tree on cheap wide passes and a short chain on dear ones, from a fixed cost model", "[tree][policy]") {
    // Thirty seeded runs a case: on cheap passes the second-ranked sibling
    // (accepted about a third of the times it is tested) is worth a node in
    // most runs' estimates, never on dear ones.
    struct Case {
        std::function<double(std::size_t)> target_pass;
        bool expect_branching;
    };
    const std::vector<Case> cases{{[](std::size_t n) { return 1.0 + 0.01 * static_cast<double>(n); }, true},
                                  {[](std::size_t n) { return 1.0 + 0.6 * static_cast<double>(n - 1); }, false}};
    constexpr std::uint64_t kRuns = 30;
    for (const Case& c : cases) {
        std::size_t branching_plans = 0;
        for (std::uint64_t seed = 1; seed <= kRuns; ++seed) {
            specdec::AutoTree policy({.max_nodes = 16, .max_depth = 6});
            ToyLM target({.vocab = 12, .seed = 21, .sharpness = 1.0});
            ToyLM draft({.vocab = 12, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = 0.9});
            specdec::TreeSpeculativeDecoder<ToyLM, ToyLM, specdec::RecursiveRejection, FixedCostAutoTree> decoder(
                specdec::target(target), specdec::draft(draft),
                {.sampling = {.temperature = 1.0}, .seed = seed, .max_new_tokens = 400},
                FixedCostAutoTree{&policy, c.target_pass});
            (void)decoder.generate(std::vector<Token>{1, 2});
            const specdec::TreePlan plan = policy.current_plan();
            INFO("seed " << seed << ", steps " << policy.steps_observed() << ", plan " << plan.shape.describe()
                         << ", a(0,0) " << policy.acceptance_at(0, 0) << ", a(0,1) " << policy.acceptance_at(0, 1));
            CHECK(policy.steps_observed() > 50);
            branching_plans += plan.shape.is_chain() ? 0 : 1;
            if (!c.expect_branching) CHECK(plan.shape.size() <= 2);
        }
        INFO("branching plans: " << branching_plans << " of " << kRuns);
        if (c.expect_branching) CHECK(branching_plans >= 2 * kRuns / 3);
        else CHECK(branching_plans == 0);
    }
}

namespace {

// A toy pair decoded under `policy` with cheap wide passes (the optimiser's
// prices favour a bushy tree) and branching steps 1.5 dearer than their
// price: `generations` runs of 400 tokens from the prompts {1, 2}, {2, 2},
// ...; returns the cost model with its step counts.
FixedCostAutoTree run_dear_branching(specdec::AutoTree& policy, std::size_t generations) {
    const auto cheap = [](std::size_t n) { return 1.0 + 0.01 * static_cast<double>(n); };
    ToyLM target({.vocab = 12, .seed = 21, .sharpness = 1.0});
    ToyLM draft({.vocab = 12, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = 0.9});
    specdec::TreeSpeculativeDecoder<ToyLM, ToyLM, specdec::RecursiveRejection, FixedCostAutoTree> decoder(
        specdec::target(target), specdec::draft(draft), {.sampling = {.temperature = 1.0}, .seed = 7, .max_new_tokens = 400},
        FixedCostAutoTree{&policy, cheap, 1.5});
    for (std::size_t first = 1; first <= generations; ++first)
        (void)decoder.generate(std::vector<Token>{static_cast<Token>(first), 2});
    return decoder.policy();
}

}  // namespace

TEST_CASE("AutoTree drafts its best chain while branching steps cost more than their price says", "[tree][policy]") {
    // Cheap wide passes: the optimiser's prices favour a bushy tree (the case
    // above). A branching step costs 1.5 more than its passes, which the
    // prices never see: the correction from realised seconds must turn the
    // policy to chains, and with the correction off it keeps drafting trees.
    for (const double realised_decay : {0.9, 0.0}) {
        specdec::AutoTree policy({.max_nodes = 16, .max_depth = 6, .realised_decay = realised_decay});
        const FixedCostAutoTree costs = run_dear_branching(policy, 1);
        INFO("realised_decay " << realised_decay << ": " << costs.branching_steps << " branching steps of " << costs.steps
                               << ", plan " << policy.current_plan().shape.describe());
        REQUIRE(costs.steps > 50);
        if (realised_decay > 0.0) {
            CHECK(policy.tree_cost_correction() > 1.5 * policy.chain_cost_correction());
            CHECK(policy.trees_trail_chains());
            CHECK(policy.current_plan().shape.is_chain());
            // Branching only in the warm-up, the explorations and the rival's
            // steps: one in 16 each at first, then the rival at doubling
            // intervals (16, 32, 64, ...) and no tree explorations.
            CHECK(costs.branching_steps <= 2 + 2 * (costs.steps / 64 + 1) + 6);
        } else {
            CHECK_FALSE(policy.trees_trail_chains());
            CHECK_FALSE(policy.current_plan().shape.is_chain());
            CHECK(costs.branching_steps > costs.steps / 2);
        }
    }
    CHECK_THROWS_WITH(specdec::AutoTree({.realised_decay = 1.0}), Catch::Matchers::Contains("realised_decay"));
}

TEST_CASE("AutoTree tries a trailing tree ever more rarely (max_rival_every), and as often as it explores without "
          "the back-off",
          "[tree][policy]") {
    std::size_t branching[2] = {0, 0}, steps[2] = {0, 0};
    for (const std::size_t max_rival_every : {std::size_t{256}, std::size_t{16}}) {
        specdec::AutoTree policy({.max_nodes = 16, .max_depth = 6, .max_rival_every = max_rival_every});
        const FixedCostAutoTree costs = run_dear_branching(policy, 5);
        const std::size_t i = max_rival_every == 16 ? 1 : 0;
        branching[i] = costs.branching_steps;
        steps[i] = costs.steps;
        CHECK(policy.trees_trail_chains());
    }
    INFO("branching steps of all: backing off " << branching[0] << " of " << steps[0] << ", every 16 steps "
                                                << branching[1] << " of " << steps[1]);
    REQUIRE(steps[0] > 400);
    REQUIRE(steps[1] > 400);
    // Without the back-off one rival in 16 steps; with it rivals 16, 32, 64,
    // ... steps apart, the sequence starting again whenever the tree's price
    // drifts back ahead and a tree plan runs (and shows it trails).
    CHECK(branching[1] >= steps[1] / 16 - 2);
    CHECK(branching[0] <= branching[1] / 2);
}

TEST_CASE("AutoTree stays exact: its shapes depend only on earlier steps", "[tree][policy][exactness]") {
    ToyLM target({.vocab = 3, .seed = 5, .sharpness = 1.2});
    ToyLM draft({.vocab = 3, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.6});
    specdec::AutoTree policy({.max_nodes = 8, .max_depth = 2, .warmup_steps = 2});
    const specdec::SamplingOptions sampling{.temperature = 1.0};
    const specdec::test::ExactnessSetup setup{.name = "AutoTree, 3-token sequences",
                                              .prompt = {1, 2},
                                              .vocab = 3,
                                              .length = 3,
                                              .draft_tokens = 2,
                                              .samples = 20000,
                                              .target = specdec::test::reference_conditional(target, sampling)};
    const auto cheap = [](std::size_t n) { return 1.0 + 0.01 * static_cast<double>(n); };
    const auto report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        specdec::TreeSpeculativeDecoder<ToyLM, ToyLM, specdec::RecursiveRejection, FixedCostAutoTree> decoder(
            specdec::target(target), specdec::draft(draft), {.sampling = sampling, .seed = seed, .max_new_tokens = 3},
            FixedCostAutoTree{&policy, cheap});
        return specdec::test::sampled_run(decoder.generate(setup.prompt));
    });
    specdec::test::check_exact(report, 2);
}

namespace {

using Distribution = std::vector<double>;

// One node, n children drawn without replacement from q, verified by
// recursive rejection sampling; the uniforms and the draws are integrated
// exactly. Returns the distribution of the emitted token and P(some child accepted).
struct NodeOutcome {
    Distribution emitted;
    double accept = 0.0;
};

void recurse(const Distribution& p_residual, const Distribution& q_left, std::size_t children_left, double reach,
             NodeOutcome& out) {
    double q_mass = 0.0;
    for (const double v : q_left) q_mass += v;
    if (children_left == 0 || q_mass <= 1e-15) {
        for (std::size_t x = 0; x < p_residual.size(); ++x) out.emitted[x] += reach * p_residual[x];
        return;
    }
    for (std::size_t x = 0; x < q_left.size(); ++x) {
        if (q_left[x] <= 0.0) continue;
        const double draw = q_left[x] / q_mass;  // d_j(x): also the probability of drawing x
        const double accept = std::min(1.0, p_residual[x] / draw);
        out.emitted[x] += reach * draw * accept;
        out.accept += reach * draw * accept;
        Distribution t(p_residual.size());
        double mass = 0.0;
        for (std::size_t y = 0; y < t.size(); ++y) {
            t[y] = std::max(p_residual[y] - q_left[y] / q_mass, 0.0);
            mass += t[y];
        }
        if (mass <= 0.0) continue;  // rejection has probability 0 here
        for (double& v : t) v /= mass;
        Distribution rest = q_left;
        rest[x] = 0.0;
        recurse(t, rest, children_left - 1, reach * draw * (1.0 - accept), out);
    }
}

Distribution random_distribution(std::size_t vocab, std::uint64_t seed, double scale) {
    Distribution d(vocab);
    double total = 0.0;
    for (std::size_t v = 0; v < vocab; ++v) {
        const double u = specdec::counter_uniform(seed, 7, specdec::RandomPurpose::draft_sample, static_cast<std::uint32_t>(v));
        d[v] = std::exp(scale * (u - 0.5) * 4.0);
        total += d[v];
    }
    for (double& x : d) x /= total;
    return d;
}

}  // namespace

TEST_CASE("by exact enumeration: recursive rejection without replacement is exact and more siblings never accept less", "[tree][exactness]") {
    double largest_gain = 0.0;
    for (const std::size_t vocab : {2, 3, 4, 5}) {
        for (std::uint64_t seed = 1; seed <= 6; ++seed) {
            const Distribution p = random_distribution(vocab, seed, 1.0 + 0.3 * seed);
            const Distribution q = random_distribution(vocab, seed + 1000, 1.0);
            double previous = 0.0;
            for (std::size_t n = 1; n <= vocab; ++n) {
                NodeOutcome out{Distribution(vocab, 0.0), 0.0};
                recurse(p, q, n, 1.0, out);
                double tv = 0.0;
                for (std::size_t x = 0; x < vocab; ++x) tv += 0.5 * std::abs(out.emitted[x] - p[x]);
                INFO("V " << vocab << " seed " << seed << " n " << n << ": acceptance " << out.accept << " TV " << tv);
                CHECK(tv < 1e-12);
                CHECK(out.accept >= previous - 1e-12);
                if (n == 1) {
                    double overlap = 0.0;  // the chain: sum_x min(p, q)
                    for (std::size_t x = 0; x < vocab; ++x) overlap += std::min(p[x], q[x]);
                    CHECK(out.accept == Approx(overlap).epsilon(1e-12));
                } else {
                    largest_gain = std::max(largest_gain, out.accept - previous);
                }
                // Cover property: as many siblings as q has tokens always accept one.
                if (n == vocab) CHECK(out.accept == Approx(1.0).epsilon(1e-12));
                previous = out.accept;
            }
        }
    }
    INFO("largest gain of one more sibling " << largest_gain);
    CHECK(largest_gain > 0.05);
}

TEST_CASE("AutoTree values a pass wider than any it has timed as compute-bound, not as free", "[tree][policy]") {
    // Target passes over 2 to 6 tokens all timed at 10 ms (a plateau, or the
    // widest widths pooled by the monotone fit), every first-ranked draft
    // accepted, 0.5 ms a draft pass. Extending the flat line, every wider
    // tree would cost 10 ms too, and the optimiser would fill the node cap.
    // Valued at the steepest a pass can grow past the widest timed width,
    // V(n) = V(6) n / 6, it drafts the tree that bound makes best.
    specdec::AutoTree policy({.max_nodes = 24, .max_depth = 8});
    for (std::size_t step = 0; step < 61; ++step) {
        (void)policy.plan(8, 100 + step);
        specdec::TreeStepOutcome outcome;
        outcome.depth = outcome.nodes = outcome.accepted = outcome.draft_passes = 1 + step % 5;
        outcome.target_width = outcome.nodes + 1;
        outcome.tested.assign(outcome.depth, std::vector<std::size_t>{1});
        outcome.accepted_at.assign(outcome.depth, std::vector<std::size_t>{1});
        outcome.draft_seconds = 0.5e-3 * static_cast<double>(outcome.draft_passes);
        outcome.target_seconds = 10e-3;
        outcome.total_seconds = outcome.draft_seconds + outcome.target_seconds;
        policy.observe(outcome);
    }
    const specdec::TreeCosts bounded{[](std::size_t n) { return 10e-3 * std::max(1.0, static_cast<double>(n) / 6.0); },
                                     0.5e-3, 0.0};
    const auto acceptance = [&](std::size_t d, std::size_t r) { return policy.acceptance_at(d, r); };
    const specdec::TreePlan expected = specdec::optimise_tree(acceptance, bounded, 24, 8);
    const specdec::TreePlan plan = policy.current_plan();
    INFO("plan " << plan.shape.describe() << " (" << plan.shape.size() << " nodes), under the bound "
                 << expected.shape.describe() << " (" << expected.shape.size() << " nodes)");
    REQUIRE(expected.shape.size() < 24);
    CHECK(plan.shape.size() < 24);
    CHECK(plan.shape.size() == expected.shape.size());
    CHECK(plan.rate() == Approx(expected.rate()).epsilon(1e-6));
}
