// A tiny end-to-end run of the benchmark on the synthetic "tiny" pair: the
// JSON report carries every field the README and 04_read_report rely on, the
// greedy check passes, and the SVG is a complete document.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/catch.hpp"

#include "../../benchmarks/bench_runner.hpp"
#include "../../benchmarks/machine_info.hpp"
#include "../../benchmarks/model_setup.hpp"
#include "../../benchmarks/report_json.hpp"
#include "../../benchmarks/report_svg.hpp"
#include "../../benchmarks/report_table.hpp"

using namespace specdec;
using namespace specdec::bench;

namespace {

struct TinyPair {
    std::shared_ptr<cpu::ThreadPool> pool = std::make_shared<cpu::ThreadPool>(1);
    LlamaModel target;
    LlamaModel draft;

    static SyntheticOptions options(const std::shared_ptr<cpu::ThreadPool>& pool) {
        SyntheticOptions o;
        o.size = "tiny";
        o.thread_pool = pool;
        o.max_context = 64;
        return o;
    }
    TinyPair() : target(make_synthetic_target(options(pool))), draft(make_synthetic_draft(options(pool))) {}
};

BenchInputs tiny_inputs(const LlamaModel& target, const ModelInfo& draft_info) {
    BenchInputs inputs;
    inputs.machine = MachineInfo{"test cpu", 1, "cpu"};
    inputs.target = describe_llama(target, true);
    inputs.draft = draft_info;
    inputs.prompt = seeded_token_prompt(3, target.vocab_size(), 8);
    inputs.settings = RunSettings{};
    inputs.settings.draft_tokens = {1, 3};
    inputs.settings.temperatures = {0.0, 1.0};
    inputs.settings.new_tokens = 8;
    inputs.settings.repetitions = 2;
    inputs.settings.seed = 5;
    inputs.cost_settings.rounds = {.min_samples = 2, .max_samples = 2, .min_seconds = 0.0};
    return inputs;
}

void require_number(const nlohmann::json& object, const char* key) {
    INFO("field " << key);
    REQUIRE(object.contains(key));
    REQUIRE(object[key].is_number());
    CHECK(std::isfinite(object[key].get<double>()));
}

// The report wraps long lines at spaces with an indent: joined again here, so
// that a sentence can be searched for whole.
std::string unwrapped(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\n') {
            out += text[i];
            continue;
        }
        std::size_t next = i + 1;
        while (next < text.size() && text[next] == ' ') ++next;
        if (next > i + 1) {  // a continuation line
            out += ' ';
            i = next - 1;
        } else {
            out += '\n';
        }
    }
    return out;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);) lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("a tiny synthetic run produces a JSON report with every required field", "[bench][report]") {
    TinyPair pair;
    const BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    std::vector<ProgressStep> steps;
    const BenchReport report = run_benchmark(pair.draft, pair.target, inputs, [&](const ProgressStep& s) { steps.push_back(s); });

    CHECK(steps.size() == 2 * 2 * 2);  // temperatures x draft lengths x repetitions
    CHECK(steps.back().step == 8);
    CHECK(steps.back().steps == 8);
    // Repetition-major: every row of a temperature in one round, forwards in
    // the first repetition and backwards in the second.
    std::vector<std::string> order;
    for (const ProgressStep& s : steps)
        order.push_back("T" + std::to_string(static_cast<int>(s.temperature)) + " k" + std::to_string(s.draft_tokens) + " r" +
                        std::to_string(s.repetition));
    CHECK(order == std::vector<std::string>{"T0 k1 r1", "T0 k3 r1", "T1 k1 r1", "T1 k3 r1", "T0 k3 r2", "T0 k1 r2",
                                            "T1 k3 r2", "T1 k1 r2"});
    // The tiny LlamaModel pair has replicas: each row starts beside the
    // other of its temperature, and both advance in turn.
    for (const ProgressStep& s : steps) CHECK(s.rows_in_turn == 2);
    REQUIRE(report.configurations.size() == 4);
    CHECK(report.all_greedy_runs_match());

    const nlohmann::json json = nlohmann::json::parse(report_to_json(report).dump());
    REQUIRE(json.contains("machine"));
    CHECK(json["machine"]["cpu"] == "test cpu");
    CHECK(json["machine"]["threads"] == 1);
    CHECK(json["machine"]["backend"] == "cpu");
    for (const char* role : {"target", "draft"}) {
        INFO("model " << role);
        const nlohmann::json& model = json["models"][role];
        CHECK(model["name"].is_string());
        CHECK(model["type"].is_string());
        CHECK(model["parameters"].get<std::uint64_t>() > 0);
        CHECK(model["bytes"].get<std::uint64_t>() > 0);
        CHECK(model["synthetic"] == true);
    }
    CHECK(json["formula"].get<std::string>().find("E / (k*c + v_k)") != std::string::npos);

    const nlohmann::json& runs = json["runs"];
    REQUIRE(runs.is_array());
    REQUIRE(runs.size() == 8);  // an autoregressive and a speculative entry per configuration
    std::size_t speculative = 0, autoregressive = 0;
    for (const nlohmann::json& run : runs) {
        for (const char* key : {"method", "draft_tokens", "temperature", "tokens_per_second", "speedup", "acceptance_rate",
                                "mean_accepted", "predicted_speedup", "efficiency", "greedy_match",
                                "per_position_acceptance", "cost_ratio", "verification_cost_ratio"}) {
            INFO("field " << key);
            CHECK(run.contains(key));
        }
        require_number(run, "tokens_per_second");
        CHECK(run["tokens_per_second"].get<double>() > 0.0);
        if (run["method"] == "speculative") {
            ++speculative;
            for (const char* key : {"speedup", "acceptance_rate", "alpha", "mean_accepted", "predicted_speedup", "efficiency",
                                    "cost_ratio", "verification_cost_ratio"})
                require_number(run, key);
            const double alpha = run["acceptance_rate"].get<double>();
            CHECK(alpha >= 0.0);
            CHECK(alpha <= 1.0);
            CHECK(run["per_position_acceptance"].size() == run["draft_tokens"].get<std::size_t>());
            CHECK(run["generated_tokens"] == 8 * 2);  // summed over the repetitions
            if (run["temperature"] == 0.0) {
                CHECK(run["greedy_match"] == true);
            } else {
                CHECK(run["greedy_match"].is_null());
            }
        } else {
            ++autoregressive;
            CHECK(run["method"] == "autoregressive");
            CHECK(run["speedup"] == 1.0);
            CHECK(run["acceptance_rate"].is_null());
            CHECK(run["generated_tokens"] == 8 * 2);  // summed over the repetitions
        }
    }
    CHECK(speculative == 4);
    CHECK(autoregressive == 4);
}

TEST_CASE("the table and the SVG describe the same run", "[bench][report]") {
    TinyPair pair;
    BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    inputs.settings.temperatures = {0.0};
    inputs.settings.repetitions = 1;
    const BenchReport report = run_benchmark(pair.draft, pair.target, inputs);

    std::ostringstream table;
    print_report(table, report);
    CHECK(table.str().find("test cpu") != std::string::npos);
    CHECK(table.str().find("synthetic") != std::string::npos);
    CHECK(table.str().find("reproduced the autoregressive tokens exactly") != std::string::npos);
    CHECK(table.str().find("MISMATCH") == std::string::npos);

    const std::string svg = report_to_svg(report);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("<polyline") != std::string::npos);
    CHECK(svg.find("draft length k") != std::string::npos);
    CHECK(svg.find("nan") == std::string::npos);
}

TEST_CASE("prompt lookup drafts through the same benchmark loop", "[bench][report]") {
    TinyPair pair;
    PromptLookupDrafter lookup;
    BenchInputs inputs = tiny_inputs(pair.target, describe_prompt_lookup());
    inputs.settings.repetitions = 1;
    const BenchReport report = run_benchmark(lookup, pair.target, inputs);
    REQUIRE(report.configurations.size() == 4);
    CHECK(report.all_greedy_runs_match());
    CHECK(report.costs.cost_ratio() < 1.0);  // a lookup is far cheaper than a forward pass
    const nlohmann::json json = report_to_json(report);
    CHECK(json["models"]["draft"]["synthetic"] == false);
}

TEST_CASE("a greedy mismatch is recorded with the first differing token", "[bench][report]") {
    ConfigurationResult result;
    bench::detail::check_greedy_match(result, {1, 2, 3}, {1, 2, 3});
    CHECK(result.greedy_match == std::optional<bool>(true));
    bench::detail::check_greedy_match(result, {1, 2, 3}, {1, 9, 3});
    CHECK(result.greedy_match == std::optional<bool>(false));
    CHECK(result.first_mismatch == std::optional<std::size_t>(1));
    bench::detail::check_greedy_match(result, {1, 2, 3}, {1, 2, 3});  // a later match does not hide it
    CHECK(result.greedy_match == std::optional<bool>(false));

    BenchReport report;
    result.temperature = 0.0;
    result.draft_tokens = 2;
    report.configurations.push_back(result);
    std::ostringstream table;
    print_report(table, report);
    CHECK(table.str().find("GREEDY MISMATCH") != std::string::npos);
    CHECK(table.str().find("greedy   identical: NO") != std::string::npos);
    CHECK(report_to_json(report)["greedy_match"] == false);
}

TEST_CASE("mismatched vocabularies and impossible setups are usage errors", "[bench][report]") {
    CHECK_THROWS_AS(bench::detail::check_same_vocabulary(512, 32000), UsageError);
    CHECK_NOTHROW(bench::detail::check_same_vocabulary(512, 512));
    BenchOptions options;
    options.prompt = "text";  // the synthetic models have no tokenizer
    CHECK_THROWS_AS(set_up_models(options), UsageError);
#ifndef SPECDEC_BENCH_WITH_CUDA
    BenchOptions cuda;
    cuda.backend = Backend::cuda;
    CHECK_THROWS_AS(set_up_models(cuda), UsageError);
#endif
}

TEST_CASE("the machine line reads the CPU model from /proc/cpuinfo", "[bench][report]") {
    CHECK(!cpu_model_name().empty());
    CHECK(cpu_model_name("/no/such/cpuinfo") == "unknown");
    CHECK(hardware_threads() >= 1);
    CHECK(load_average() >= 0.0);
    CHECK(load_average("/no/such/loadavg") < 0.0);
}

TEST_CASE("auto and block rows report the rule, the chosen lengths and a step-time breakdown", "[bench][report]") {
    TinyPair pair;
    BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    inputs.settings.draft_tokens = {2};
    inputs.settings.auto_length = true;
    inputs.settings.auto_max_draft_tokens = 4;
    inputs.settings.rules = {RuleChoice::tokenwise, RuleChoice::block};
    const BenchReport report = run_benchmark(pair.draft, pair.target, inputs);
    // T = 0: token-wise 2 and auto; T = 1: token-wise 2, auto, block 2, block auto.
    REQUIRE(report.configurations.size() == 6);
    CHECK(report.all_greedy_runs_match());
    const nlohmann::json json = nlohmann::json::parse(report_to_json(report).dump());
    std::size_t auto_runs = 0, block_runs = 0;
    for (const nlohmann::json& run : json["runs"]) {
        if (run["method"] != "speculative") continue;
        REQUIRE(run.contains("draft_length_counts"));
        std::size_t steps = 0;
        for (const auto& count : run["draft_length_counts"]) steps += count.get<std::size_t>();
        CHECK(steps == run["target_forward_passes"].get<std::size_t>());
        if (run["draft_length"] == "auto") {
            ++auto_runs;
            CHECK(run["draft_length_counts"].size() == 5);
        }
        if (run["rule"] == "block") {
            ++block_runs;
            CHECK(run["temperature"].get<double>() > 0.0);
        }
        for (const char* key : {"draft", "verify", "acceptance", "other", "model"}) require_number(run["step_seconds"], key);
    }
    CHECK(auto_runs == 3);
    CHECK(block_runs == 2);
    std::ostringstream table;
    print_table(table, report);
    CHECK(table.str().find("auto<=4") != std::string::npos);
    CHECK(table.str().find("2 block") != std::string::npos);
    CHECK(table.str().find("where a step's time goes") == std::string::npos);  // --verbose only
    std::ostringstream verbose;
    print_table(verbose, report, ReportStyle{.verbose = true});
    CHECK(verbose.str().find("where a step's time goes") != std::string::npos);
    CHECK(verbose.str().find("acceptance by draft position") != std::string::npos);
}

TEST_CASE("block verification gets no k = 1 row beside token-wise rejection, which it equals there", "[bench][report]") {
    RunSettings settings;
    settings.draft_tokens = {1, 2};
    settings.temperatures = {0.0, 1.0};
    settings.rules = {RuleChoice::tokenwise, RuleChoice::block};
    std::vector<std::string> rows;
    for (const Configuration& c : configurations_of(settings))
        rows.push_back(std::to_string(c.temperature) + (c.rule == RuleChoice::block ? " block " : " tokenwise ") +
                       std::to_string(c.draft_tokens));
    CHECK(rows == std::vector<std::string>{"0.000000 tokenwise 1", "0.000000 tokenwise 2", "1.000000 tokenwise 1",
                                           "1.000000 tokenwise 2", "1.000000 block 2"});
    settings.rules = {RuleChoice::block};
    CHECK(configurations_of(settings).size() == 2);  // block alone keeps k = 1 (and runs at T > 0 only)
}

TEST_CASE("each repetition generates from its own prompt when the run has one per repetition", "[bench][report]") {
    // Prompts of 5 and 9 tokens: every row's summed prompt counts tell which
    // prompt each of its repetitions used, and at T = 0 each greedy run must
    // still equal the autoregressive run of its own round.
    TinyPair pair;
    RunSettings settings{RunChoices{.draft_tokens = {2}, .temperatures = {0.0, 1.0}, .new_tokens = 6, .repetitions = 3, .seed = 9}};
    settings.repetition_prompts = {seeded_token_prompt(9, pair.target.vocab_size(), 5),
                                   seeded_token_prompt(10, pair.target.vocab_size(), 9)};
    const std::vector<Token> unused = seeded_token_prompt(1, pair.target.vocab_size(), 3);
    const std::vector<ConfigurationResult> rows = run_configurations(pair.draft, pair.target, unused, settings);
    REQUIRE(rows.size() == 2);
    for (const ConfigurationResult& row : rows) {
        CHECK(row.autoregressive.prompt_tokens == 5 + 9 + 5);  // repetitions 0, 1, 2: prompts 0, 1, 0
        CHECK(row.speculative.prompt_tokens == 5 + 9 + 5);
    }
    REQUIRE(rows[0].greedy_match.has_value());
    CHECK(*rows[0].greedy_match);
    // Without them every repetition uses the run's prompt.
    settings.repetition_prompts.clear();
    for (const ConfigurationResult& row : run_configurations(pair.draft, pair.target, unused, settings))
        CHECK(row.speculative.prompt_tokens == 3 * 3);
}

TEST_CASE("a time budget runs whole rounds while the next one is expected to fit", "[bench][report]") {
    TinyPair pair;
    RunSettings settings{RunChoices{.draft_tokens = {2}, .temperatures = {0.0, 1.0}, .new_tokens = 4, .repetitions = 5, .seed = 3}};
    const std::vector<Token> prompt = seeded_token_prompt(4, pair.target.vocab_size(), 6);
    auto rounds_of = [&](const std::vector<ConfigurationResult>& rows) {
        REQUIRE(rows.size() == 2);
        for (const ConfigurationResult& row : rows) {
            CHECK(row.repetitions == rows.front().repetitions);
            CHECK(row.speedup_per_repetition.size() == row.repetitions);
            CHECK(row.speculative.generated_tokens == 4 * row.repetitions);
        }
        return rows.front().repetitions;
    };
    // A budget nothing fits in: the minimum of whole rounds.
    settings.time_budget_seconds = 1e-9;
    CHECK(rounds_of(run_configurations(pair.draft, pair.target, prompt, settings)) == 2);
    settings.min_repetitions = 1;
    CHECK(rounds_of(run_configurations(pair.draft, pair.target, prompt, settings)) == 1);
    // Rounds of 0.8 s and a little more (0.4 s after each temperature's
    // generations) in a 2.2 s budget, with no minimum beyond one round: the
    // budget alone admits the second (two rounds fit unless the first overran
    // its sleeps by 0.3 s) and refuses the third (three rounds take at least
    // 2.4 s). The margin is wide because a loaded machine running the
    // sanitized suite oversleeps: 0.4 s rounds in a 1 s budget once ran one.
    const auto slow_round = [] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); };
    settings.time_budget_seconds = 2.2;
    settings.min_repetitions = 1;
    CHECK(rounds_of(run_configurations(pair.draft, pair.target, prompt, settings, {}, slow_round)) == 2);
    settings.min_repetitions = 2;
    // A budget everything fits in, and none: the most.
    settings.time_budget_seconds = 1e6;
    CHECK(rounds_of(run_configurations(pair.draft, pair.target, prompt, settings)) == 5);
    settings.time_budget_seconds = 0.0;
    CHECK(rounds_of(run_configurations(pair.draft, pair.target, prompt, settings)) == 5);

    // The report says how many ran, of how many at most, in which budget.
    BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    inputs.settings.repetitions = 4;
    inputs.settings.time_budget_seconds = 1e-9;
    const BenchReport report = run_benchmark(pair.draft, pair.target, inputs);
    CHECK(report.repetitions == 2);
    CHECK(report.max_repetitions == 4);
    const nlohmann::json json = report_to_json(report);
    CHECK(json["settings"]["repetitions"] == 2);
    CHECK(json["settings"]["max_repetitions"] == 4);
    CHECK(json["settings"]["time_budget_seconds"].get<double>() == 1e-9);
    std::ostringstream header;
    print_header(header, report);
    CHECK(unwrapped(header.str()).find("2 repetitions (rounds over every row; as many as fit in 0 s, at most 4; within a round all "
                            "rows step by step in turn, the baseline whole before or after them)") != std::string::npos);
    CHECK(json["settings"]["interleaved_rows"] == true);
    // Rows one after another say so.
    inputs.settings.interleave_rows = false;
    std::vector<ProgressStep> sequential_steps;
    const BenchReport sequential =
        run_benchmark(pair.draft, pair.target, inputs, [&](const ProgressStep& s) { sequential_steps.push_back(s); });
    REQUIRE(!sequential_steps.empty());
    for (const ProgressStep& s : sequential_steps) CHECK(s.rows_in_turn == 0);
    CHECK(report_to_json(sequential)["settings"]["interleaved_rows"] == false);
    std::ostringstream sequential_header;
    print_header(sequential_header, sequential);
    CHECK(unwrapped(sequential_header.str()).find("at most 4; one row after another)") != std::string::npos);
}

namespace {

// A CausalLM over a LlamaModel that records which instance ran each pass, and
// can be replicated like it: the log shows how the runner schedules rows.
struct PassLoggingModel {
    LlamaModel model;
    int id = 0;
    std::shared_ptr<std::vector<int>> log = std::make_shared<std::vector<int>>();
    std::shared_ptr<int> instances = std::make_shared<int>(1);

    [[nodiscard]] std::size_t vocab_size() const { return model.vocab_size(); }
    [[nodiscard]] std::size_t context_length() const { return model.context_length(); }
    [[nodiscard]] std::size_t cached_tokens() const { return model.cached_tokens(); }
    LogitsView forward(std::span<const Token> tokens) {
        log->push_back(id);
        return model.forward(tokens);
    }
    void truncate(std::size_t n) { model.truncate(n); }
    [[nodiscard]] PassLoggingModel replica() const { return PassLoggingModel{model.replica(), (*instances)++, log, instances}; }
};

// Target passes of every row's speculative steps (one per step).
std::size_t interleaved_steps(const std::vector<ConfigurationResult>& rows) {
    std::size_t steps = 0;
    for (const ConfigurationResult& row : rows) steps += row.speculative.target_forward_passes;
    return steps;
}

}  // namespace

TEST_CASE("rows advanced step by step on replicas give the counts of rows run one after another", "[bench][report]") {
    TinyPair pair;
    const std::vector<Token> prompt = seeded_token_prompt(6, pair.target.vocab_size(), 5);
    RunSettings settings{RunChoices{.draft_tokens = {1, 3}, .rules = {RuleChoice::tokenwise, RuleChoice::block},
                         .temperatures = {0.0, 1.0}, .new_tokens = 16, .repetitions = 2, .seed = 13}};
    settings.interleave_rows = false;
    PassLoggingModel sequential_target{pair.target.replica()};
    const std::vector<ConfigurationResult> sequential = run_configurations(pair.draft, sequential_target, prompt, settings);
    settings.interleave_rows = true;
    PassLoggingModel target{pair.target.replica()};
    const std::vector<ConfigurationResult> interleaved = run_configurations(pair.draft, target, prompt, settings);
    STATIC_REQUIRE(kInterleavable<LlamaModel, PassLoggingModel>);
    REQUIRE(sequential.size() == interleaved.size());
    // Each decoder has its own caches and counter-based random numbers, so a
    // fixed length gives the same tokens whatever ran between its steps.
    for (std::size_t i = 0; i < sequential.size(); ++i) {
        const GenerationStats& a = sequential[i].speculative;
        const GenerationStats& b = interleaved[i].speculative;
        INFO("row " << sequential[i].label() << " at T = " << sequential[i].temperature);
        CHECK(a.generated_tokens == b.generated_tokens);
        CHECK(a.target_forward_passes == b.target_forward_passes);
        CHECK(a.draft_tokens_proposed == b.draft_tokens_proposed);
        CHECK(a.draft_tokens_accepted == b.draft_tokens_accepted);
        CHECK(a.accepted_at_position == b.accepted_at_position);
        CHECK(sequential[i].autoregressive.generated_tokens == interleaved[i].autoregressive.generated_tokens);
        CHECK(interleaved[i].speedup_per_repetition.size() == 2);
        CHECK(interleaved[i].speculative.decode_seconds() > 0.0);
        if (sequential[i].temperature == 0.0) {
            REQUIRE(interleaved[i].greedy_match.has_value());
            CHECK(*interleaved[i].greedy_match);
        }
    }
    // Sequentially every pass runs on the given model. Interleaved, one
    // replica per row takes its turn step by step, so the instance changes at
    // about every pass; replicas that ran one generation after another would
    // change it about once per generation (2 x 7 times). The baseline
    // (instance 0) runs whole: its passes come in one stretch per round and
    // temperature (in odd rounds its prompt is prefilled before the rows and
    // its tokens generated after them), after the warm-up's.
    auto switches_of = [](const std::vector<int>& log) {
        std::size_t switches = 0;
        for (std::size_t i = 1; i < log.size(); ++i) switches += log[i] != log[i - 1];
        return switches;
    };
    auto stretches_of_baseline = [](const std::vector<int>& log) {
        std::size_t stretches = 0;
        for (std::size_t i = 0; i < log.size(); ++i) stretches += log[i] == 0 && (i == 0 || log[i - 1] != 0);
        return stretches;
    };
    CHECK(*sequential_target.instances == 1);
    CHECK(switches_of(*sequential_target.log) == 0);
    REQUIRE(*target.instances == 1 + static_cast<int>(interleaved.size()));
    const std::size_t steps = interleaved_steps(interleaved);
    INFO("instance switches " << switches_of(*target.log) << ", speculative steps " << steps << ", baseline stretches "
                              << stretches_of_baseline(*target.log));
    CHECK(switches_of(*target.log) >= steps / 2);
    // The warm-up's; round 1: one per temperature; round 2: the T = 0 prompt,
    // then its tokens run on into the T = 1 prompt, then the T = 1 tokens.
    // (Stepped in turn with the rows, it had a stretch every few tokens.)
    CHECK(stretches_of_baseline(*target.log) == 1 + 2 + 3);
}

TEST_CASE("each auto row generates once untimed before the rounds unless measured cold", "[bench][report]") {
    TinyPair pair;
    const std::vector<Token> prompt = seeded_token_prompt(8, pair.target.vocab_size(), 5);
    RunSettings settings{RunChoices{.draft_tokens = {2}, .auto_length = true, .rules = {RuleChoice::tokenwise},
                         .temperatures = {0.0}, .new_tokens = 16, .repetitions = 1, .seed = 5}};
    settings.warmup_tokens = 0;
    settings.interleave_rows = false;
    auto passes_and_rows = [&](bool learn_first) {
        settings.learn_auto_first = learn_first;
        PassLoggingModel target{pair.target.replica()};
        std::vector<ConfigurationResult> rows = run_configurations(pair.draft, target, prompt, settings);
        return std::make_pair(target.log->size(), std::move(rows));
    };
    const auto [cold_passes, cold] = passes_and_rows(false);
    const auto [learned_passes, learned] = passes_and_rows(true);
    REQUIRE(cold.size() == 2);
    REQUIRE(learned.size() == 2);
    REQUIRE(learned[1].auto_length);
    // Passes the rows' numbers account for: the baseline's (shared by both
    // rows) and each row's own, and each of those generations' prefill.
    auto counted = [](const std::vector<ConfigurationResult>& rows) {
        std::size_t passes = rows.front().autoregressive.target_forward_passes + rows.size() + 1;
        for (const ConfigurationResult& row : rows) passes += row.speculative.target_forward_passes;
        return passes;
    };
    // Cold, the target ran those alone; learning first, it ran more ...
    CHECK(cold_passes == counted(cold));
    CHECK(learned_passes > counted(learned));
    // ... and is in no row's numbers: the fixed row is the same draw, the
    // auto row counts the rounds' tokens only.
    CHECK(learned[0].speculative.target_forward_passes == cold[0].speculative.target_forward_passes);
    CHECK(learned[0].speculative.draft_tokens_accepted == cold[0].speculative.draft_tokens_accepted);
    CHECK(learned[1].speculative.generated_tokens == 16);
    CHECK(cold[1].speculative.generated_tokens == 16);
    BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    inputs.settings.learn_auto_first = false;
    CHECK(report_to_json(run_benchmark(pair.draft, pair.target, inputs))["settings"]["auto_learned_first"] == false);
}

TEST_CASE("the console report answers first, fits 100 columns and hides thin samples", "[bench][report]") {
    TinyPair pair;
    BenchInputs inputs = tiny_inputs(pair.target, describe_llama(pair.draft, true));
    inputs.settings.draft_tokens = {1, 3};
    inputs.settings.auto_length = true;
    inputs.settings.auto_max_draft_tokens = 4;
    inputs.settings.rules = {RuleChoice::tokenwise};
    inputs.machine.cpu = "a CPU model name long enough to make the machine line wrap if nothing wrapped it, "
                         "as server CPUs' names nearly do";
    BenchReport report = run_benchmark(pair.draft, pair.target, inputs);
    report.wall_seconds = 51.3002;

    std::ostringstream text;
    print_report(text, report);
    const std::vector<std::string> lines = lines_of(text.str());
    for (const std::string& line : lines) {
        INFO(line);
        CHECK(line.size() <= kReportColumns);
    }
    // The verdict comes before the table, the details after it.
    const std::string out = text.str();
    const std::size_t best = out.find("best     T=0 "), best_t1 = out.find("best     T=1 ");
    const std::size_t auto_line = out.find("auto     T=0 tokenwise:"), greedy = out.find("greedy   identical: yes");
    const std::size_t table = out.find("\nT  k  "), target = out.find("target:  ");
    REQUIRE(best != std::string::npos);
    REQUIRE(best_t1 != std::string::npos);
    REQUIRE(auto_line != std::string::npos);
    REQUIRE(greedy != std::string::npos);
    REQUIRE(table != std::string::npos);
    REQUIRE(target != std::string::npos);
    CHECK(best < table);
    CHECK(auto_line < table);
    CHECK(greedy < table);
    CHECK(table < target);
    CHECK(out.find("wall time 51 s") != std::string::npos);
    CHECK(out.find("wall time 51.") == std::string::npos);  // whole seconds only
    CHECK(out.find("alpha = accepted") == std::string::npos);  // the legend is in --help
    // Auto rows print no v_k: their length varied.
    for (const std::string& line : lines)
        if (line.find("auto<=4") != std::string::npos && line.find("match") != std::string::npos) {
            INFO(line);
            CHECK(line.find(" - ") != std::string::npos);
        }

    // Per-position acceptance: 8 tokens x 2 repetitions give every position
    // fewer proposals than the floor, so every rate reads "-"; with the counts
    // raised above it, the rate is printed.
    std::ostringstream verbose;
    print_table(verbose, report, ReportStyle{.verbose = true});
    const std::vector<std::string> verbose_lines = lines_of(verbose.str());
    auto row_of = [&](const std::vector<std::string>& rows, const std::string& start) -> std::string {
        bool in_acceptance = false;
        for (const std::string& line : rows) {
            if (line.find("acceptance by draft position") != std::string::npos) in_acceptance = true;
            if (in_acceptance && line.rfind(start, 0) == 0) return line;
        }
        return "";
    };
    const std::string thin = row_of(verbose_lines, "0  3 ");
    REQUIRE(!thin.empty());
    auto position_cells = [](const std::string& line) {
        std::istringstream stream(line);
        std::vector<std::string> words;
        for (std::string word; stream >> word;) words.push_back(word);
        return std::vector<std::string>(words.begin() + std::min<std::ptrdiff_t>(3, std::ssize(words)), words.end());
    };
    // One column per position up to the deepest any row drafted: 3 for k = 3,
    // up to 4 where the auto row drafted 4 (its lengths follow the timings).
    std::size_t deepest = 0;
    for (const ConfigurationResult& r : report.configurations)
        deepest = std::max(deepest, r.speculative.proposed_at_position.size());
    REQUIRE(deepest >= 3);
    REQUIRE(deepest <= 4);
    const std::vector<std::string> thin_cells = position_cells(thin);
    CHECK(thin_cells.size() == deepest);
    for (const std::string& cell : thin_cells) CHECK(cell == "-");
    BenchReport thick = report;
    for (ConfigurationResult& r : thick.configurations) {
        if (r.temperature != 0.0 || r.auto_length || r.draft_tokens != 3) continue;
        r.speculative.proposed_at_position = {kPositionSampleFloor, kPositionSampleFloor, kPositionSampleFloor - 1};
        r.speculative.tested_at_position = r.speculative.proposed_at_position;
        r.speculative.accepted_at_position = {kPositionSampleFloor / 2, kPositionSampleFloor / 4, 1};
    }
    std::ostringstream thick_out;
    print_table(thick_out, thick, ReportStyle{.verbose = true});
    const std::string counted = row_of(lines_of(thick_out.str()), "0  3 ");
    REQUIRE(!counted.empty());
    const std::vector<std::string> counted_cells = position_cells(counted);
    REQUIRE(counted_cells.size() == deepest);
    CHECK(counted_cells[0] == "0.50");
    CHECK(counted_cells[1] == "0.25");
    CHECK(counted_cells[2] == "-");  // one proposal short of the floor
    for (std::size_t i = 3; i < deepest; ++i) CHECK(counted_cells[i] == "-");

    // Markdown: a header row, a separator, then one row per configuration, all
    // with the same number of cells.
    std::ostringstream md;
    print_table(md, report, ReportStyle{.format = ReportFormat::markdown});
    std::vector<std::string> rows;
    for (const std::string& line : lines_of(md.str()))
        if (!line.empty()) rows.push_back(line);
    REQUIRE(rows.size() == report.configurations.size() + 2);
    auto cells = [](const std::string& line) { return static_cast<std::size_t>(std::count(line.begin(), line.end(), '|')); };
    CHECK(rows[0].rfind("| T | k | tok/s | speedup", 0) == 0);
    CHECK(rows[1].find("---") != std::string::npos);
    for (const std::string& row : rows) {
        INFO(row);
        CHECK(row.front() == '|');
        CHECK(row.back() == '|');
        CHECK(cells(row) == cells(rows[0]));
    }
}
