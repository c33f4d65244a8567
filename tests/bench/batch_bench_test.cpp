// specdec-bench --batch: its flag and defaults, and a tiny sweep on the
// synthetic "tiny" pair with models of B cache slots, whose console report,
// JSON "batch" section and SVG are checked against what the sweep counted.
#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/catch.hpp"

#include "../../benchmarks/batch_bench.hpp"
#include "../../benchmarks/batch_report.hpp"
#include "../../benchmarks/bench_options.hpp"
#include "../../benchmarks/model_setup.hpp"

using namespace specdec;
using namespace specdec::bench;

namespace {

BenchOptions parse_batch_flags(std::vector<std::string_view> arguments) {
    return parse_options(std::span<const std::string_view>(arguments));
}

std::vector<std::string> batch_report_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);) lines.push_back(line);
    return lines;
}

// The tiny pair once, and models of any number of slots over its weights.
struct TinyBatchPair {
    std::shared_ptr<cpu::ThreadPool> pool = std::make_shared<cpu::ThreadPool>(1);
    LlamaModel target, draft;

    static SyntheticOptions options(const std::shared_ptr<cpu::ThreadPool>& pool) {
        SyntheticOptions o;
        o.size = "tiny";
        o.thread_pool = pool;
        o.max_context = 48;
        return o;
    }
    TinyBatchPair() : target(make_synthetic_target(options(pool))), draft(make_synthetic_draft(options(pool))) {}

    BatchModelFactory<LlamaModel, LlamaModel> factory() {
        return {[this](std::size_t slots) { return with_sequence_slots(target, slots, pool); },
                [this](std::size_t slots) { return with_sequence_slots(draft, slots, pool); }};
    }
};

BatchSettings tiny_settings() {
    BatchSettings settings;
    settings.batch_sizes = {1, 3};
    settings.fixed_lengths = {1, 2};
    settings.auto_max_draft_tokens = 3;
    settings.temperature = 0.0;
    settings.new_tokens = 6;
    settings.rounds = 2;
    settings.waves = 2;
    settings.min_requests = 3;  // B = 1 runs 3 requests, B = 3 runs 2 x 3
    settings.prompt_tokens = 5;
    settings.seed = 11;
    return settings;
}

BatchReport tiny_sweep(TinyBatchPair& pair, const BatchSettings& settings) {
    BatchReport report = run_batch_benchmark(
        pair.factory(), pair.target.vocab_size(), settings,
        [](std::uint64_t seed, std::size_t vocab, std::size_t tokens) { return seeded_token_prompt(seed, vocab, tokens); });
    report.machine = MachineInfo{"test cpu", 1, "cpu", ""};
    report.target = describe_llama(pair.target, true);
    report.draft = describe_llama(pair.draft, true);
    return report;
}

}  // namespace

TEST_CASE("the batch option takes positive batch sizes and sets the sweep's defaults", "[bench][cli][batch]") {
    const BenchOptions options = parse_batch_flags({"--batch", "8,1,2,2,32"});
    CHECK(options.batch_sizes == std::vector<std::size_t>{1, 2, 8, 32});
    CHECK(options.new_tokens == kBatchNewTokens);
    CHECK(options.repetitions == kBatchRounds);
    CHECK(options.temperatures == std::vector<double>{0.0});
    CHECK(options.time_budget_seconds == 0.0);
    CHECK(parse_batch_flags({}).batch_sizes.empty());  // not part of the default run

    const BenchOptions given = parse_batch_flags({"--batch=4", "--new-tokens", "10", "--repetitions", "3", "--temperature", "1",
                                      "--draft-tokens", "2,3"});
    const BatchSettings settings = batch_settings_of(given);
    CHECK(settings.batch_sizes == std::vector<std::size_t>{4});
    CHECK(settings.new_tokens == 10);
    CHECK(settings.rounds == 3);
    CHECK(settings.temperature == 1.0);
    CHECK(settings.fixed_lengths == std::vector<std::size_t>{2, 3});
    CHECK(settings.auto_max_draft_tokens == given.auto_max_draft_tokens);
    CHECK(settings.rule == specdec::ChosenRule::Kind::tokenwise);  // the default, whatever the single-sequence default
    CHECK(std::string(verification_name(settings)) == "tokenwise");
    CHECK(std::string(verification_name(batch_settings_of(options))) == "greedy");  // T = 0

    const BatchSettings block = batch_settings_of(parse_batch_flags({"--batch", "2", "--temperature", "0.7", "--rule", "block"}));
    CHECK(block.rule == specdec::ChosenRule::Kind::block);
    CHECK(std::string(verification_name(block)) == "block");
}

TEST_CASE("bad batch lists and setups the sweep cannot run are usage errors", "[bench][cli][batch]") {
    const std::vector<std::vector<std::string_view>> bad{
        {"--batch", "0"},
        {"--batch", "1,,2"},
        {"--batch", "two"},
        {"--batch", "1,-4"},
        {"--batch", "100000"},
        {"--batch"},
        {"--batch", "2", "--temperatures", "0,1"},
        {"--batch", "2", "--temperature", "1", "--rules", "tokenwise,block"},
        {"--batch", "2", "--tree", "auto"},
        {"--batch", "2", "--draft", "prompt-lookup"},
        {"--batch", "2", "--export-gguf", "."},
        {"--auto-variant", "a:decay=0.5"},  // without --batch
        {"--batch", "2", "--auto-variant", "a"},
        {"--batch", "2", "--auto-variant", ":decay=0.5"},
        {"--batch", "2", "--auto-variant", "a:"},
        {"--batch", "2", "--auto-variant", "a:decay"},
        {"--batch", "2", "--auto-variant", "a:no_such_setting=1"},
        {"--batch", "2", "--auto-variant", "a:decay=0"},
        {"--batch", "2", "--auto-variant", "a:decay=fast"},
        {"--batch", "2", "--auto-variant", "a:max_look_drafts=0"},
        {"--batch", "2", "--auto-variant", "a:warmup_steps=-1"},
        {"--batch", "2", "--auto-variant", "a:equal_lengths=2"},
        {"--batch", "2", "--auto-variant", "a:decay=0.5", "--auto-variant", "a:decay=0.9"},
    };
    for (const auto& arguments : bad) {
        std::string joined;
        for (const std::string_view a : arguments) joined += std::string(a) + " ";
        INFO(joined);
        CHECK_THROWS_AS(parse_batch_flags(arguments), UsageError);
    }
    try {
        (void)parse_batch_flags({"--batch", "1,0"});
        FAIL("no error");
    } catch (const UsageError& error) {
        CHECK(std::string(error.what()).find("--batch") != std::string::npos);
        CHECK(std::string(error.what()).find("too small") != std::string::npos);
    }
    CHECK(usage_text().find("--batch LIST") != std::string::npos);
    try {
        (void)parse_batch_flags({"--batch", "2", "--auto-variant", "a:draft_margn=1"});
        FAIL("no error");
    } catch (const UsageError& error) {
        CHECK(std::string(error.what()).find("unknown AutoBatchLength setting 'draft_margn'") != std::string::npos);
        CHECK(std::string(error.what()).find("draft_margin") != std::string::npos);  // the names it knows
    }
}

TEST_CASE("a tiny batch sweep counts the full-batch steps of every variant and reports them", "[bench][report][batch]") {
    TinyBatchPair pair;
    const BatchSettings settings = tiny_settings();
    const BatchReport report = tiny_sweep(pair, settings);

    REQUIRE(report.sizes.size() == 2);
    for (const BatchSizeResult& size : report.sizes) {
        INFO("B = " << size.batch);
        REQUIRE(size.variants.size() == 4);  // AR, k=1, k=2, auto
        CHECK(size.variants[0].kind == BatchVariantKind::autoregressive);
        CHECK(size.variants[1].label() == "k=1");
        CHECK(size.variants[2].label() == "k=2");
        CHECK(size.variants[3].label() == "auto<=3");
        for (const BatchVariantResult& v : size.variants) {
            INFO(v.label());
            CHECK(v.rounds == settings.rounds);
            CHECK(v.requests == settings.rounds * (size.batch == 1 ? 3 : settings.waves * size.batch));
            CHECK(v.steps > 0);
            CHECK(v.sequence_steps == v.steps * size.batch);  // only steps with every slot decoding
            CHECK(v.tokens >= v.sequence_steps);              // each request commits at least a token a step
            CHECK(v.seconds > 0.0);
            CHECK(v.tokens_per_second() > 0.0);
            CHECK(v.mean_latency_seconds() > 0.0);
            CHECK(v.predicted_tokens_per_second() > 0.0);
            CHECK(std::isfinite(v.efficiency()));
            CHECK(v.tokens_per_second_per_round.size() == settings.rounds);
            std::size_t counted = 0;
            for (const std::size_t c : v.length_counts) counted += c;
            CHECK(counted == v.sequence_steps);
            if (v.kind != BatchVariantKind::autoregressive) REQUIRE(v.greedy_match.has_value());
            if (v.greedy_match) CHECK(*v.greedy_match);  // T = 0: the same tokens as batched AR
        }
        const BatchVariantResult& ar = size.autoregressive();
        CHECK(ar.drafts == 0);
        CHECK(ar.tokens == ar.sequence_steps);  // one token per request per step
        CHECK(ar.target_tokens == ar.sequence_steps);
        CHECK(size.ratio_to_autoregressive(ar) == 1.0);
        // Fixed k drafts k a step except where a request's last tokens leave less room.
        const BatchVariantResult& k2 = size.variants[2];
        CHECK(k2.mean_draft_length() > 0.0);
        CHECK(k2.mean_draft_length() <= 2.0);
        CHECK(k2.target_tokens == k2.sequence_steps + k2.drafts);
        CHECK(k2.length_counts.size() <= 3);
    }
    CHECK(report.all_greedy_runs_match());

    // JSON: the "batch" section carries every variant at every batch size.
    const nlohmann::json json = nlohmann::json::parse(batch_report_to_json(report).dump());
    REQUIRE(json.contains("batch"));
    const nlohmann::json& batch = json["batch"];
    CHECK(batch["settings"]["batch_sizes"] == nlohmann::json::array({1, 3}));
    CHECK(batch["greedy_match"] == true);
    REQUIRE(batch["sizes"].size() == 2);
    for (std::size_t s = 0; s < 2; ++s) {
        const nlohmann::json& size = batch["sizes"][s];
        CHECK(size["batch"] == report.sizes[s].batch);
        REQUIRE(size["variants"].size() == 4);
        for (const char* key : {"auto_over_autoregressive", "best_fixed_over_autoregressive", "auto_over_best"}) {
            INFO(key);
            REQUIRE(size[key].is_number());
            CHECK(size[key].get<double>() > 0.0);
        }
        const nlohmann::json& automatic = size["variants"][3];
        CHECK(automatic["method"] == "auto");
        CHECK(automatic["tokens_per_second"].get<double>() == Approx(report.sizes[s].variants[3].tokens_per_second()));
        CHECK(automatic["chosen_lengths_last_round"].size() == report.sizes[s].variants[3].last_round_lengths.size());
        CHECK(size["variants"][0]["ratio_to_autoregressive"] == 1.0);
        CHECK(size["auto_learned"]["target_pass_seconds"].size() >= 1);
        CHECK(size["auto_learned"]["plain_refreshes"] == report.sizes[s].auto_costs.plain_refreshes);
        CHECK(size["auto_learned"]["plain_probes_skipped"] == report.sizes[s].auto_costs.plain_probes_skipped);
    }
    CHECK(json["models"]["target"]["name"] == report.target.name);

    // Console: verdict first, then the table, every line within 100 columns.
    std::ostringstream text;
    print_batch_report(text, report, ReportStyle{.verbose = true});
    const std::string out = text.str();
    for (const std::string& line : batch_report_lines(out)) {
        INFO(line);
        CHECK(line.size() <= kReportColumns);
    }
    const std::size_t versus = out.find("auto     / batched AR: B=1 "), crossover = out.find("crossover "),
                      table = out.find("\nB  variant"), greedy = out.find("greedy   identical: yes"),
                      learned = out.find("what the auto policy learned");
    REQUIRE(versus != std::string::npos);
    REQUIRE(crossover != std::string::npos);
    REQUIRE(greedy != std::string::npos);
    REQUIRE(table != std::string::npos);
    REQUIRE(learned != std::string::npos);
    CHECK(versus < table);
    CHECK(crossover < table);
    CHECK(table < learned);
    CHECK(out.find("bar      auto >= 0.97x AR") != std::string::npos);

    // SVG: a complete document with a measured line per variant on each panel.
    const std::string svg = batch_report_to_svg(report);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("batch size B") != std::string::npos);
    std::size_t polylines = 0;
    for (std::size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
    CHECK(polylines == 3 * 4);  // measured, predicted and ratio per variant
}

TEST_CASE("a sweep at T > 0 verifies with the rule it is given and says which", "[bench][report][batch]") {
    TinyBatchPair pair;
    BatchSettings settings = tiny_settings();
    settings.batch_sizes = {2};
    settings.rounds = 1;
    settings.temperature = 1.0;
    settings.rule = specdec::ChosenRule::Kind::block;
    const BatchReport report = tiny_sweep(pair, settings);
    REQUIRE(report.sizes.size() == 1);
    for (const BatchVariantResult& v : report.sizes[0].variants) {
        INFO(v.label());
        CHECK(!v.greedy_match.has_value());  // sampled: nothing to compare token by token
        CHECK(v.tokens >= v.sequence_steps);
        CHECK(v.tokens_per_second() > 0.0);
    }
    CHECK(batch_report_to_json(report)["batch"]["settings"]["verification"] == "block");
    std::ostringstream text;
    print_batch_report(text, report, ReportStyle{.verbose = false});
    CHECK(text.str().find("at T=1, block verification") != std::string::npos);
}

TEST_CASE("the crossover is the first batch size where no fixed k beats batched autoregressive", "[bench][report][batch]") {
    auto variant = [](BatchVariantKind kind, std::size_t k, double tokens_per_second) {
        BatchVariantResult v;
        v.kind = kind;
        v.draft_tokens = k;
        v.tokens = static_cast<std::size_t>(tokens_per_second * 10.0);
        v.seconds = 10.0;
        return v;
    };
    auto size = [&](std::size_t batch, double ar, double k1, double k3, double automatic) {
        BatchSizeResult s;
        s.batch = batch;
        s.variants = {variant(BatchVariantKind::autoregressive, 0, ar), variant(BatchVariantKind::fixed, 1, k1),
                      variant(BatchVariantKind::fixed, 3, k3), variant(BatchVariantKind::automatic, 8, automatic)};
        return s;
    };
    BatchReport report;
    report.sizes = {size(1, 100, 150, 200, 195), size(4, 300, 330, 290, 320), size(16, 500, 500, 300, 495),
                    size(32, 600, 400, 200, 600)};
    REQUIRE(report.crossover().has_value());
    CHECK(*report.crossover() == 16);
    CHECK(report.sizes[0].best_fixed()->label() == "k=3");
    CHECK(report.sizes[1].best_static().label() == "k=1");
    CHECK(report.sizes[3].best_static().label() == "AR");
    std::ostringstream text;
    print_batch_verdict(text, report);
    const std::string out = text.str();
    CHECK(out.find("crossover from B=16") != std::string::npos);
    CHECK(out.find("k=3 at B=4,16,32") != std::string::npos);
    CHECK(out.find("k=1 at B=32") != std::string::npos);
    CHECK(out.find("NOT met") == std::string::npos);  // 1.95x at B=1, >= 0.97x and >= 95% everywhere
    report.sizes[2].variants[3] = variant(BatchVariantKind::automatic, 8, 470);  // 0.94x AR at B=16
    std::ostringstream missed;
    print_batch_verdict(missed, report);
    CHECK(missed.str().find("NOT met") != std::string::npos);
}

TEST_CASE("an auto variant with changed settings steps beside auto, its settings reach its policy and its A/B line "
          "compares it with auto", "[bench][report][batch]") {
    // "never": no warm-up, no exploring or widening steps, and a plan must
    // expect a billion times plain decoding's rate: plain steps only,
    // whatever the timings.
    const BenchOptions options = parse_batch_flags(
        {"--batch", "3", "--auto-variant", "never:warmup_steps=0,explore_every=0,widen_every=0,draft_margin=1000000000",
         "--auto-variant", "no-margin:draft_margin=1"});
    BatchSettings settings = tiny_settings();
    settings.batch_sizes = {3};
    settings.rounds = 1;
    settings.auto_variants = batch_settings_of(options).auto_variants;
    REQUIRE(settings.auto_variants.size() == 2);
    CHECK(settings.auto_variants[0].options.draft_margin == 1e9);
    CHECK(settings.auto_variants[0].options.explore_every == 0);
    CHECK(settings.auto_variants[1].options.draft_margin == 1.0);
    CHECK(settings.auto_variants[1].options.explore_every == AutoBatchOptions{}.explore_every);  // the rest: the defaults

    TinyBatchPair pair;
    const BatchReport report = tiny_sweep(pair, settings);
    REQUIRE(report.sizes.size() == 1);
    const BatchSizeResult& size = report.sizes[0];
    REQUIRE(size.variants.size() == 6);  // AR, k=1, k=2, auto, the two variants
    CHECK(size.variants[4].label() == "auto:never");
    CHECK(size.variants[5].label() == "auto:no-margin");
    REQUIRE(size.automatic() == &size.variants[3]);  // the verdict and what auto learned read the default auto
    for (const BatchVariantResult& v : size.variants) {
        INFO(v.label());
        CHECK(v.steps > 0);
        REQUIRE(v.greedy_match.has_value() == (v.kind != BatchVariantKind::autoregressive));
        if (v.greedy_match) CHECK(*v.greedy_match);
    }
    const BatchVariantResult& never = size.variants[4];
    CHECK(never.drafts == 0);
    CHECK(never.tokens == never.sequence_steps);
    CHECK(size.variants[2].drafts > 0);  // k = 2 does draft: "never" is its settings, not the setup

    std::ostringstream text;
    print_batch_verdict(text, report);
    const double ratio = never.tokens_per_second() / size.variants[3].tokens_per_second();
    CHECK(text.str().find(specdec::bench::detail::format("auto:never / auto: B=3 %.2fx", ratio)) != std::string::npos);
    CHECK(text.str().find("auto:no-margin / auto: B=3") != std::string::npos);
    const nlohmann::json json = nlohmann::json::parse(batch_report_to_json(report).dump());
    CHECK(json["batch"]["sizes"][0]["variants"][4]["variant"] == "auto:never");
}
