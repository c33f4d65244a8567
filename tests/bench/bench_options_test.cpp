// specdec-bench's command line: every mistake is a UsageError (exit code 2)
// naming the bad value, never a crash or a silently ignored option.
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/catch.hpp"

#include "../../benchmarks/bench_options.hpp"
#include "../../benchmarks/bench_runner.hpp"

using specdec::bench::BenchOptions;
using specdec::bench::UsageError;

namespace {

BenchOptions parse(std::vector<std::string_view> arguments) {
    return specdec::bench::parse_options(std::span<const std::string_view>(arguments));
}

}  // namespace

TEST_CASE("no arguments select the embedded synthetic pair with the documented defaults", "[bench][cli]") {
    const BenchOptions options = parse({});
    CHECK(options.uses_synthetic_target());
    CHECK(!options.draft_path);
    CHECK(options.synthetic_size == "100m");
    CHECK(options.backend == specdec::bench::Backend::cpu);
    CHECK(options.draft_tokens == std::vector<std::size_t>{1, 2, 3, 4});
    CHECK(options.auto_length);
    CHECK(options.rules == std::vector<specdec::bench::RuleChoice>{specdec::bench::RuleChoice::tokenwise,
                                                                    specdec::bench::RuleChoice::block});
    CHECK(options.temperatures == std::vector<double>{0.0, 1.0});
    CHECK(options.repetitions >= 1);
    CHECK(options.time_budget_seconds > 0.0);  // rounds while they fit, at most `repetitions`
}

TEST_CASE("the repetitions option alone asks for exactly that many rounds, with a time budget it is the most", "[bench][cli]") {
    const BenchOptions exact = parse({"--repetitions", "3"});
    CHECK(exact.repetitions == 3);
    CHECK(exact.time_budget_seconds == 0.0);
    const BenchOptions budgeted = parse({"--repetitions", "5", "--time-budget", "20"});
    CHECK(budgeted.repetitions == 5);
    CHECK(budgeted.time_budget_seconds == 20.0);
    const BenchOptions either_order = parse({"--time-budget=12.5", "--repetitions=6"});
    CHECK(either_order.repetitions == 6);
    CHECK(either_order.time_budget_seconds == 12.5);
    const BenchOptions budget_only = parse({"--time-budget", "30"});
    CHECK(budget_only.repetitions == parse({}).repetitions);
    CHECK(budget_only.time_budget_seconds == 30.0);
    CHECK(parse({"--time-budget", "0"}).time_budget_seconds == 0.0);  // no budget: the default count
}

TEST_CASE("the draft-tokens option takes auto beside numbers and the rule option takes the rules", "[bench][cli]") {
    const BenchOptions only_auto = parse({"--draft-tokens", "auto", "--max-draft-tokens", "6", "--rule", "block"});
    CHECK(only_auto.auto_length);
    CHECK(only_auto.draft_tokens.empty());
    CHECK(only_auto.auto_max_draft_tokens == 6);
    CHECK(only_auto.rules == std::vector<specdec::bench::RuleChoice>{specdec::bench::RuleChoice::block});
    const BenchOptions fixed = parse({"--draft-tokens", "3,2"});
    CHECK(!fixed.auto_length);
    CHECK(fixed.draft_tokens == std::vector<std::size_t>{2, 3});
    const BenchOptions both = parse({"--draft-tokens=2,auto", "--rule=tokenwise,block,tokenwise"});
    CHECK(both.auto_length);
    CHECK(both.draft_tokens == std::vector<std::size_t>{2});
    CHECK(both.rules.size() == 2);
}

TEST_CASE("lists, numbers and both flag spellings are parsed", "[bench][cli]") {
    const BenchOptions options = parse({"--draft-tokens", "8,2,4,2", "--temperatures=0,0.7", "--new-tokens", "16",
                                        "--repetitions=3", "--threads", "1", "--seed", "7", "--synthetic-size", "tiny",
                                        "--json", "out.json", "--svg", "out.svg", "--quiet", "--sequential-rows"});
    CHECK(options.draft_tokens == std::vector<std::size_t>{2, 4, 8});  // sorted, duplicates dropped
    CHECK(options.temperatures == std::vector<double>{0.0, 0.7});
    CHECK(options.new_tokens == 16);
    CHECK(options.repetitions == 3);
    CHECK(options.threads == 1);
    CHECK(options.seed == 7);
    CHECK(options.synthetic_size == "tiny");
    CHECK(options.json_path == std::optional<std::string>("out.json"));
    CHECK(options.svg_path == std::optional<std::string>("out.svg"));
    CHECK(options.quiet);
    CHECK_FALSE(options.interleave_rows);
    CHECK(parse({}).interleave_rows);
    CHECK_THROWS_AS(parse({"--sequential-rows=yes"}), specdec::bench::UsageError);
    CHECK(parse({}).learn_auto_first);
    CHECK_FALSE(parse({"--cold-auto"}).learn_auto_first);
    CHECK_THROWS_AS(parse({"--cold-auto=yes"}), specdec::bench::UsageError);
}

TEST_CASE("the help option is accepted alone and stops validation", "[bench][cli]") {
    CHECK(parse({"--help"}).help);
    CHECK(parse({"--target", "/no/such/file.gguf", "--help"}).help);
    CHECK(specdec::bench::usage_text().find("--draft-tokens") != std::string::npos);
}

TEST_CASE("prompt lookup can draft for the synthetic target", "[bench][cli]") {
    const BenchOptions options = parse({"--draft", "prompt-lookup"});
    CHECK(options.uses_prompt_lookup());
    CHECK(options.uses_synthetic_target());
}

TEST_CASE("bad command lines are usage errors", "[bench][cli]") {
    const std::vector<std::vector<std::string_view>> bad = {
        {"--no-such-flag"},
        {"extra-positional"},
        {"--draft-tokens", "0"},
        {"--draft-tokens", "1,0,2"},
        {"--draft-tokens", "two"},
        {"--draft-tokens", "1,,2"},
        {"--draft-tokens", "-1"},
        {"--draft-tokens", "3x"},
        {"--draft-tokens"},
        {"--draft-tokens", "automatic"},
        {"--max-draft-tokens", "0"},
        {"--rule", "typical"},
        {"--rule", ""},
        {"--temperatures", "-0.5"},
        {"--temperatures", "hot"},
        {"--temperatures", "nan"},
        {"--temperatures", "inf"},
        {"--new-tokens", "0"},
        {"--new-tokens", "1e3"},
        {"--repetitions", "0"},
        {"--time-budget", "-1"},
        {"--time-budget", "soon"},
        {"--time-budget", "inf"},
        {"--threads", "0"},
        {"--seed", "-3"},
        {"--backend", "tpu"},
        {"--engine", "vllm"},
        {"--engine", ""},
        {"--engine", "llama.cpp"},
        {"--synthetic-size", "7b"},
        {"--synthetic-draft", "magic"},
        {"--target", "/no/such/target.gguf", "--draft", "prompt-lookup"},
        {"--draft", "/no/such/draft.gguf"},
        {"--quiet=yes"},
    };
    for (const auto& arguments : bad) {
        std::string line;
        for (const auto argument : arguments) line += std::string(argument) + " ";
        INFO("arguments: " << line);
        CHECK_THROWS_AS(parse(arguments), UsageError);
    }
}

TEST_CASE("a target needs a draft, and synthetic options need the synthetic target", "[bench][cli]") {
    // Any existing regular file passes the existence check; the model is only opened later.
    const std::string existing = std::string(SPECDEC_TEST_SOURCE_DIR) + "/bench/bench_options_test.cpp";
    CHECK_THROWS_AS(parse({"--target", existing}), UsageError);
    CHECK_THROWS_AS(parse({"--target", existing, "--draft", "prompt-lookup", "--synthetic-size", "tiny"}), UsageError);
    CHECK_NOTHROW(parse({"--target", existing, "--draft", existing}));
    CHECK_NOTHROW(parse({"--target", existing, "--draft", "prompt-lookup"}));
    // specdec-generate's and llama.cpp's spelling names the same two files.
    const BenchOptions spelled = parse({"-m", existing, "--model-draft", "prompt-lookup"});
    CHECK(spelled.target_path == existing);
    CHECK(spelled.uses_prompt_lookup());
    CHECK(parse({"--model", existing, "-md", existing}).draft_path == existing);
    CHECK_THROWS_AS(parse({"-m", existing}), UsageError);
    // A missing file is named by the flag that was typed.
    const auto missing_error = [&](std::initializer_list<std::string_view> arguments) -> std::string {
        try {
            (void)parse(arguments);
        } catch (const UsageError& error) {
            return error.what();
        }
        return "";
    };
    CHECK(missing_error({"-m", "/no/such/target.gguf", "-md", existing}).rfind("-m: no such file", 0) == 0);
    CHECK(missing_error({"--target", "/no/such/target.gguf", "--draft", existing}).rfind("--target: no such file", 0) == 0);
    CHECK(missing_error({"-m", existing, "--model-draft", "/no/such/draft.gguf"}).rfind("--model-draft: no such file", 0) == 0);
}

TEST_CASE("the engine option chooses what runs the models, and llama.cpp runs GGUF files only", "[bench][cli]") {
    const std::string existing = std::string(SPECDEC_TEST_SOURCE_DIR) + "/bench/bench_options_test.cpp";
    CHECK(parse({}).engine == specdec::bench::Engine::specdec);
    CHECK(parse({"--engine", "specdec"}).engine == specdec::bench::Engine::specdec);
    CHECK(parse({"--engine=llama.cpp", "--target", existing, "--draft", existing}).engine == specdec::bench::Engine::llama_cpp);
    CHECK(parse({"--engine", "llama.cpp", "--target", existing, "--draft", "prompt-lookup"}).uses_prompt_lookup());
    const auto refusal = [](std::vector<std::string_view> arguments) {
        try {
            (void)parse(std::move(arguments));
        } catch (const UsageError& error) {
            return std::string(error.what());
        }
        return std::string("(accepted)");
    };
    CHECK(refusal({"--engine", "vllm"}) == "--engine: 'vllm' is not an engine, expected specdec or llama.cpp");
    // Without both files, the refusal says what to give and where the synthetic pair's files come from.
    for (const auto& arguments : std::vector<std::vector<std::string_view>>{
             {"--engine", "llama.cpp"},
             {"--engine", "llama.cpp", "--target", existing},
             {"--engine", "llama.cpp", "--draft", "prompt-lookup"},
             {"--engine", "llama.cpp", "--draft", existing}}) {
        const std::string message = refusal(arguments);
        INFO(message);
        CHECK(message.starts_with("--engine llama.cpp runs GGUF files: expected --target T.gguf and --draft D.gguf"));
        CHECK(message.find("--export-gguf DIR") != std::string::npos);
    }
    CHECK(refusal({"--engine", "llama.cpp", "--target", existing, "--draft", existing, "--backend", "cuda"})
              .starts_with("--engine llama.cpp takes no --backend"));
    // Batched decoding on llama.cpp measures the two files; prompt lookup only without --batch.
    CHECK(refusal({"--engine", "llama.cpp", "--batch", "1,2"}).starts_with("--engine llama.cpp runs GGUF files"));
    CHECK(refusal({"--engine", "llama.cpp", "--target", existing, "--draft", "prompt-lookup", "--batch", "1,2"})
              .starts_with("--batch --engine llama.cpp measures a draft model"));
    CHECK(refusal({"--target", existing, "--draft", existing, "--batch", "1,2"}).find("with --engine llama.cpp") !=
          std::string::npos);
    const BenchOptions batched = parse({"--engine", "llama.cpp", "--target", existing, "--draft", existing, "--batch", "1,4"});
    CHECK(batched.batch_sizes == std::vector<std::size_t>{1, 4});
    CHECK(batched.temperatures == std::vector<double>{0.0});  // --batch's defaults, as with the own engine
    CHECK(refusal({"--engine", "llama.cpp", "--export-gguf", "out"}).find("--engine llama.cpp") != std::string::npos);
    // The other options mean the same with either engine.
    const BenchOptions options = parse({"--engine", "llama.cpp", "--target", existing, "--draft", existing, "--threads", "2",
                                        "--temperatures", "0,1", "--draft-tokens", "3,auto", "--repetitions", "5"});
    CHECK(options.threads == 2);
    CHECK(options.temperatures == std::vector<double>{0.0, 1.0});
    CHECK(options.draft_tokens == std::vector<std::size_t>{3});
    CHECK(options.auto_length);
    CHECK(options.repetitions == 5);
}

TEST_CASE("error messages name the bad value", "[bench][cli]") {
    try {
        (void)parse({"--draft-tokens", "1,zero"});
        FAIL("expected a UsageError");
    } catch (const UsageError& error) {
        const std::string message = error.what();
        CHECK(message.find("--draft-tokens") != std::string::npos);
        CHECK(message.find("zero") != std::string::npos);
        CHECK(message.find('\n') == std::string::npos);
    }
}

TEST_CASE("the prompt-tokens option takes a positive count and export-gguf takes only the synthetic CPU models", "[bench]") {
    CHECK_FALSE(parse({}).prompt_tokens.has_value());
    CHECK(parse({"--prompt-tokens", "512"}).prompt_tokens == std::optional<std::size_t>(512));
    CHECK_THROWS_AS(parse({"--prompt-tokens", "0"}), UsageError);
    CHECK_THROWS_AS(parse({"--prompt-tokens", "many"}), UsageError);
    CHECK(parse({"--export-gguf", "out"}).export_gguf_dir == std::optional<std::string>("out"));
    CHECK_THROWS_AS(parse({"--export-gguf", ""}), UsageError);
    CHECK_THROWS_AS(parse({"--export-gguf", "out", "--backend", "cuda"}), UsageError);
    CHECK_THROWS_AS(parse({"--export-gguf", "out", "--draft", "prompt-lookup"}), UsageError);
}

TEST_CASE("one flag table gives the parser, its errors and --help", "[bench][cli]") {
    const auto& flags = specdec::bench::bench_flags();
    const std::string usage = specdec::bench::usage_text();
    std::vector<std::string_view> seen;
    for (const auto& flag : flags) {
        for (const std::string_view name : flag.names) {
            INFO(name);
            CHECK(std::find(seen.begin(), seen.end(), name) == seen.end());  // no name twice
            seen.push_back(name);
        }
        INFO(flag.names.front());
        CHECK(usage.find(std::string(flag.names.front())) != std::string::npos);
        // A switch given a value and a valued flag without one are usage errors.
        const std::string name(flag.names.front());
        if (flag.is_switch()) CHECK_THROWS_AS(parse({name + "=1"}), UsageError);
        else CHECK_THROWS_AS(parse({name}), UsageError);
    }
    // --help fits the report's width.
    std::istringstream lines(usage);
    for (std::string line; std::getline(lines, line);) {
        INFO(line);
        CHECK(line.size() <= 100);
    }
    CHECK(usage.find("alpha      accepted / tested drafts") != std::string::npos);  // the legend moved here
}

TEST_CASE("verbose and format choose the console report", "[bench][cli]") {
    CHECK_FALSE(parse({}).verbose);
    CHECK_FALSE(parse({}).markdown);
    CHECK(parse({"--verbose"}).verbose);
    CHECK(parse({"--format", "md"}).markdown);
    CHECK(parse({"--format=markdown"}).markdown);
    CHECK_FALSE(parse({"--format", "md", "--format", "text"}).markdown);
    try {
        (void)parse({"--format", "html"});
        FAIL("expected a UsageError");
    } catch (const UsageError& error) {
        CHECK(std::string(error.what()) == "--format: 'html' is not a format, expected text or md");
    }
}

TEST_CASE("the flags' run choices reach the runner's settings whole", "[bench][cli]") {
    const specdec::bench::BenchOptions options =
        parse({"--draft-tokens", "2,5,auto", "--max-draft-tokens", "6", "--rule", "block", "--temperatures", "0.5",
               "--tree", "auto", "--tree-max-nodes", "9", "--new-tokens", "7", "--repetitions", "3", "--seed", "11",
               "--sequential-rows", "--cold-auto"});
    const specdec::bench::RunSettings settings(options);
    CHECK(settings.draft_tokens == std::vector<std::size_t>{2, 5});
    CHECK(settings.auto_length);
    CHECK(settings.auto_max_draft_tokens == 6);
    CHECK(settings.rules == std::vector<specdec::bench::RuleChoice>{specdec::bench::RuleChoice::block});
    CHECK(settings.temperatures == std::vector<double>{0.5});
    CHECK(settings.trees == std::vector<std::string>{"auto"});
    CHECK(settings.tree_max_nodes == 9);
    CHECK(settings.new_tokens == 7);
    CHECK(settings.repetitions == 3);
    CHECK(settings.time_budget_seconds == 0.0);  // --repetitions alone: exactly that many
    CHECK(settings.seed == 11);
    CHECK_FALSE(settings.interleave_rows);
    CHECK_FALSE(settings.learn_auto_first);
    // The CLI's defaults differ from the runner's own.
    const specdec::bench::BenchOptions defaults = parse({});
    CHECK(defaults.draft_tokens == std::vector<std::size_t>{1, 2, 3, 4});
    CHECK(defaults.auto_length);
    CHECK(defaults.new_tokens == 48);
    CHECK(defaults.time_budget_seconds == 50.0);
    CHECK(specdec::bench::RunSettings{}.new_tokens == 64);
}
