// The --tree rows of specdec-bench on toy models with the tree pass: the
// option parsing, the interleaved runs (greedy rows reproduce the
// autoregressive tokens), the prediction from measured acceptance, and the
// table and JSON that report them.
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../../benchmarks/bench_options.hpp"
#include "../../benchmarks/bench_runner.hpp"
#include "../../benchmarks/report_json.hpp"
#include "../../benchmarks/report_table.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::test::ToyLM;

namespace {

// The toy pair of the tree rows and the costs their predictions read.
struct TreeBenchPair {
    ToyLM target{{.vocab = 16, .seed = 21, .sharpness = 1.0}};
    ToyLM draft{{.vocab = 16, .seed = 21, .sharpness = 1.0, .noise_seed = 4, .noise = 0.5}};
    std::vector<Token> prompt{1, 2, 3};
    specdec::bench::CostMeasurement costs = [] {
        specdec::bench::CostMeasurement c;
        c.target_step_seconds = 1.0;
        c.draft_step_seconds = 0.1;
        return c;
    }();
};

// Tree rows alone (no chain rows) through the runner, a fixed shape's
// prediction from the pair's costs. learn_first: an auto row first learns on
// an untimed generation, as in specdec-bench.
std::vector<specdec::bench::TreeResult> tree_rows(TreeBenchPair& pair, const std::vector<std::string>& trees,
                                                  const std::vector<double>& temperatures, std::size_t new_tokens,
                                                  std::size_t repetitions, bool learn_first,
                                                  const std::vector<specdec::bench::TreeAutoVariant>& variants = {}) {
    specdec::bench::RunSettings settings;
    settings.draft_tokens.clear();
    settings.trees = trees;
    settings.tree_max_nodes = 12;
    settings.tree_auto_variants = variants;
    settings.temperatures = temperatures;
    settings.new_tokens = new_tokens;
    settings.repetitions = repetitions;
    settings.seed = 7;
    settings.learn_auto_first = learn_first;
    auto rows = specdec::bench::run_rows(pair.draft, pair.target, pair.prompt, settings).trees;
    specdec::bench::apply_tree_costs(rows, pair.costs, true);
    return rows;
}

}  // namespace

TEST_CASE("the tree option takes auto and shapes, and refuses a malformed shape", "[bench][cli][tree]") {
    const std::vector<std::string_view> arguments{"--tree", "auto,3x2x1,4", "--tree-max-nodes", "12"};
    const auto options = specdec::bench::parse_options(arguments);
    CHECK(options.trees == std::vector<std::string>{"auto", "3x2x1", "4"});
    CHECK(options.tree_max_nodes == 12);
    const std::vector<std::string_view> bad{"--tree", "3x0"};
    CHECK_THROWS_AS(specdec::bench::parse_options(bad), specdec::bench::UsageError);
    CHECK(specdec::bench::parse_options(std::vector<std::string_view>{}).trees.empty());
}

TEST_CASE("a tree auto variant adds an auto:NAME row after the --tree rows with its settings", "[bench][cli][tree]") {
    // The variant's row follows the --tree rows whichever flag comes first.
    const std::vector<std::string_view> arguments{"--tree-auto-variant", "norival:max_rival_every=16,realised_decay=0",
                                                  "--tree", "auto,2x1"};
    const auto options = specdec::bench::parse_options(arguments);
    CHECK(options.trees == std::vector<std::string>{"auto", "2x1", "auto:norival"});
    REQUIRE(options.tree_auto_variants.size() == 1);
    CHECK(options.tree_auto_variants[0].options.max_rival_every == 16);
    CHECK(options.tree_auto_variants[0].options.realised_decay == 0.0);
    CHECK_FALSE(options.tree_auto_variants[0].max_nodes_given);

    const std::vector<std::vector<std::string_view>> bad{
        {"--tree-auto-variant", "a"},
        {"--tree-auto-variant", ":decay=0.5"},
        {"--tree-auto-variant", "a:decay"},
        {"--tree-auto-variant", "a:no_such_setting=1"},
        {"--tree-auto-variant", "a:decay=0"},             // AutoTree's own check: decay in (0, 1]
        {"--tree-auto-variant", "a:realised_decay=1"},    // [0, 1)
        {"--tree-auto-variant", "a:deeper_chain_every=0"},
        {"--tree-auto-variant", "a:decay=0.5", "--tree-auto-variant", "a:decay=0.9"},
    };
    for (const auto& flags : bad) {
        std::string joined;
        for (const std::string_view a : flags) joined += std::string(a) + " ";
        INFO(joined);
        CHECK_THROWS_AS(specdec::bench::parse_options(flags), specdec::bench::UsageError);
    }
}

TEST_CASE("an auto variant's row runs AutoTree with its settings and is reported against auto", "[bench][tree]") {
    TreeBenchPair pair;
    // A variant that can only draft chains of one: its rows show it.
    specdec::bench::TreeAutoVariant shallow{"shallow", {}};
    shallow.options.max_depth = 1;
    shallow.options.max_nodes = 1;
    shallow.max_nodes_given = true;
    shallow.options.warmup_steps = 0;
    shallow.options.explore_every = 0;  // explorations would try wider trees
    const std::vector<specdec::bench::TreeAutoVariant> variants{shallow};
    // Cold (no learning generation first), so that the measured steps hold the warm-up.
    const auto rows = tree_rows(pair, {"auto", "auto:shallow"}, {0.0}, 40, 2, false, variants);
    REQUIRE(rows.size() == 2);
    CHECK(rows[1].label == "auto:shallow");
    // Whether any node but the first child of the root was ever tested: the
    // default's warm-up tree (2x2x1) tests one in its first step; the
    // variant's trees hold one node.
    const auto tested_beyond_first = [](const specdec::bench::TreeResult& row) {
        const auto& tested = row.speculative.tested_at_depth_rank;
        for (std::size_t d = 0; d < tested.size(); ++d)
            for (std::size_t r = 0; r < tested[d].size(); ++r)
                if ((d > 0 || r > 0) && tested[d][r] > 0) return true;
        return false;
    };
    CHECK(tested_beyond_first(rows[0]));
    CHECK_FALSE(tested_beyond_first(rows[1]));
    CHECK(rows[1].nodes_per_pass() <= 1.0);
    CHECK(rows[1].greedy_match == std::optional<bool>(true));

    specdec::bench::BenchReport report;
    report.trees = rows;
    std::ostringstream table;
    specdec::bench::print_tree_table(table, report);
    CHECK(table.str().find("auto:shallow / auto at T=0: ") != std::string::npos);
    // A row naming no variant is an error, not a default AutoTree.
    CHECK_THROWS_AS(tree_rows(pair, {"auto:missing"}, {0.0}, 8, 1, true), specdec::Error);
}

TEST_CASE("tree rows run interleaved with autoregressive decoding and report shape, nodes, speedup and prediction", "[bench][tree]") {
    TreeBenchPair pair;
    pair.costs.verified_tokens = {10};  // 3x2: 9 nodes and the pending token
    pair.costs.verification_seconds = {1.2};
    const auto rows = tree_rows(pair, {"auto", "3x2"}, {0.0, 1.0}, 40, 2, true);
    REQUIRE(rows.size() == 4);
    for (const auto& row : rows) {
        INFO(row.label << " T " << row.temperature);
        CHECK(row.speculative.generated_tokens == 80);
        CHECK(row.autoregressive.generated_tokens == 80);
        CHECK(row.speedup_per_repetition.size() == 2);
        CHECK(row.tokens_per_pass() > 1.0);
        CHECK(row.predicted_speedup > 0.0);
        if (row.temperature == 0.0) CHECK(row.greedy_match == std::optional<bool>(true));
    }
    CHECK(rows[1].shape == "3x2");
    CHECK(rows[1].nodes_per_pass() == Approx(9.0).margin(1.0));
    // The prediction from acceptance by rank: E / (passes * c + v_9) with the measured a(d, r).
    const auto& fixed = rows[1];
    double expected = 1.0;
    const double a00 = fixed.acceptance(0, 0), a01 = fixed.acceptance(0, 1), a02 = fixed.acceptance(0, 2);
    const double a10 = fixed.acceptance(1, 0), a11 = fixed.acceptance(1, 1);
    const double root[3] = {a00, (1 - a00) * a01, (1 - a00) * (1 - a01) * a02};
    for (const double r : root) expected += r + r * a10 + r * (1 - a10) * a11;
    const double passes = static_cast<double>(fixed.speculative.draft_forward_passes) / fixed.speculative.target_forward_passes;
    CHECK(fixed.predicted_speedup == Approx(expected / (passes * 0.1 + 1.2)).epsilon(1e-9));

    specdec::bench::BenchReport report;
    report.trees = rows;
    std::ostringstream table;
    specdec::bench::print_tree_table(table, report);
    CHECK(table.str().find("best tree at T=0: ") != std::string::npos);
    CHECK(table.str().find("3x2") != std::string::npos);
    const auto json = specdec::bench::report_to_json(report);
    REQUIRE(json["trees"].size() == 4);
    CHECK(json["trees"][1]["shape"] == "3x2");
    CHECK(json["trees"][1]["acceptance_by_depth_and_rank"].size() == 2);
}

TEST_CASE("tree rows run in the chain rows' rounds, as many as they, and come back apart from them", "[bench][tree]") {
    TreeBenchPair pair;
    specdec::bench::RunSettings settings;
    settings.draft_tokens = {1, 2};
    settings.auto_length = true;
    settings.trees = {"auto", "2x1"};
    settings.tree_max_nodes = 12;
    settings.temperatures = {0.0, 1.0};
    settings.new_tokens = 24;
    settings.repetitions = 3;
    settings.seed = 11;
    const specdec::bench::RowResults results = specdec::bench::run_rows(pair.draft, pair.target, pair.prompt, settings);
    REQUIRE(results.chains.size() == 6);  // k = 1, 2 and auto at each temperature
    REQUIRE(results.trees.size() == 4);
    for (const auto& chain : results.chains) CHECK(chain.speedup_per_repetition.size() == 3);
    const std::vector<std::string> labels{"auto", "2x1", "auto", "2x1"};
    for (std::size_t i = 0; i < results.trees.size(); ++i) {
        const auto& tree = results.trees[i];
        INFO(tree.label << " T " << tree.temperature);
        CHECK(tree.label == labels[i]);
        CHECK(tree.temperature == (i < 2 ? 0.0 : 1.0));
        CHECK(tree.repetitions == 3);
        CHECK(tree.speedup_per_repetition.size() == 3);
        CHECK(tree.speculative.generated_tokens == 72);
        // One autoregressive run per round serves the chains and trees of its temperature.
        CHECK(tree.autoregressive.generated_tokens == results.chains[i < 2 ? 0 : 3].autoregressive.generated_tokens);
        if (tree.temperature == 0.0) CHECK(tree.greedy_match == std::optional<bool>(true));
    }
    CHECK(results.trees[1].shape == "2x1");
    CHECK_FALSE(results.trees[0].shape.empty());
    // The chain-only entry point leaves the trees out.
    CHECK(specdec::bench::run_configurations(pair.draft, pair.target, pair.prompt, settings).size() == 6);
}
