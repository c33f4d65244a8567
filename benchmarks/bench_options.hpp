#pragma once
// Command-line options of specdec-bench, as one table of flags (kBenchFlags)
// from which parsing and --help come. Parsing is strict: an unknown flag, a
// missing value, a non-numeric number or a value out of range is a UsageError,
// which main() reports on one line with exit code 2 (a mistake in the command,
// not a failure of the library).
#include <array>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../tools/engine_choice.hpp"
#include "../tools/flag_table.hpp"
#include "auto_variants.hpp"
#include "tree_auto_variants.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/tree_shape.hpp"

namespace specdec::bench {

using cli::Engine;
using cli::UsageError;

enum class Backend { cpu, cuda };

[[nodiscard]] inline std::string_view to_string(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }

inline constexpr std::string_view kPromptLookupDraft = "prompt-lookup";

// The acceptance rule of a configuration. Block verification and coupled
// sampling equal greedy verification at temperature 0, so they only run at
// temperatures > 0.
enum class RuleChoice { tokenwise, block, coupled };

[[nodiscard]] inline std::string_view to_string(RuleChoice rule) {
    switch (rule) {
        case RuleChoice::block: return "block";
        case RuleChoice::coupled: return "coupled";
        case RuleChoice::tokenwise: break;
    }
    return "tokenwise";
}

// What a run measures: its rows (draft lengths, rules, trees, temperatures)
// and how long. The flags set it (BenchOptions) and the runner reads it
// (RunSettings); the defaults here are the runner's, BenchOptions has its own.
struct RunChoices {
    std::vector<std::size_t> draft_tokens{1, 2, 3, 4, 6};
    bool auto_length = false;               // one more row per temperature and rule: AutoLength
    std::size_t auto_max_draft_tokens = 8;  // its cap
    std::vector<RuleChoice> rules{RuleChoice::tokenwise};  // block runs at T > 0 only
    std::vector<double> temperatures{0.0, 1.0};
    std::vector<std::string> trees{};       // token-tree rows: "auto" (AutoTree) and shapes such as "3x2x1"
    // More AutoTree rows ("auto:NAME", after the --tree rows), settings changed.
    std::vector<TreeAutoVariant> tree_auto_variants{};
    std::size_t tree_max_nodes = 24;        // the most nodes of the auto tree
    std::size_t new_tokens = 64;
    std::size_t repetitions = 2;
    // > 0: a time budget for the rounds (seconds from the first one's start).
    // After min_repetitions rounds, another starts only if it would end within
    // the budget at the rounds' mean duration so far (the longest would stop
    // early after one slow round); `repetitions` is then the most.
    // A fixed count of tokens makes the run as long as the machine is slow
    // (on a shared machine: one minute, then seventy seconds); a budget keeps
    // its length and gives a faster machine more samples instead.
    double time_budget_seconds = 0.0;
    std::uint64_t seed = 42;
    // Advance every row of a round step by step in turn, each on replicas of
    // the models (when both have them; see run_configurations); false: one
    // row after another on the given models (--sequential-rows).
    bool interleave_rows = true;
    // Each auto row first generates once, untimed, on a prompt no round
    // measures: a serving process keeps its decoder, and with it what
    // AutoLength has learned, from one request to the next, so the rounds
    // measure the learned policy rather than its first steps (the warm-up
    // lengths, then choices made from a handful of timings). false: --cold-auto.
    bool learn_auto_first = true;
};

struct BenchOptions : RunChoices {
    // Defaults sized so that the no-argument run finishes in about a minute on
    // a 2-core machine. Each repetition is another seed, so alpha is measured
    // over repetitions x new_tokens independently sampled tokens (one seed
    // gives the same text every time). 48 tokens a repetition: each prompt's
    // sequence is a sample of its own, so the budget buys more prompts of
    // fewer tokens rather than fewer, longer ones. Rounds over every row: as
    // many as fit in time_budget_seconds (at least two, at most
    // `repetitions`), so that the default run takes about a minute on a slow
    // or busy machine and gathers more samples on a fast one; --repetitions
    // alone asks for exactly that many (no budget).
    BenchOptions()
        : RunChoices{.draft_tokens = {1, 2, 3, 4},
                     .auto_length = true,
                     .rules = {RuleChoice::tokenwise, RuleChoice::block},
                     .new_tokens = 48,
                     .repetitions = 16,
                     .time_budget_seconds = 50.0} {}

    std::optional<std::string> target_path;  // a GGUF file; none = the embedded synthetic target
    std::optional<std::string> draft_path;   // a GGUF file, or "prompt-lookup"
    Backend backend = Backend::cpu;
    Engine engine = Engine::specdec;  // llama.cpp: the GGUF files run in llama.cpp (adapters/llama_cpp.hpp)
    std::optional<std::string> prompt;
    std::optional<std::size_t> prompt_tokens;  // also measure the prefill of a prompt of this many tokens
    std::optional<std::string> export_gguf_dir;  // write the synthetic target and draft as GGUF files there, then exit
    std::vector<AutoVariant> auto_variants;      // --batch: more auto variants, with settings changed
    std::size_t threads = 0;  // 0 = every hardware thread
    std::optional<std::string> json_path;
    std::optional<std::string> svg_path;
    std::string synthetic_size = "100m";
    // How the synthetic draft derives from the target; none = the backend's
    // default (CPU: early-exit-q8_0, the family's recommended draft; CUDA: early-exit).
    std::optional<std::string> synthetic_draft;
    // --batch: the batch sizes of the batched-decoding sweep (batch_bench.hpp),
    // run instead of the single-sequence rows; empty = no sweep.
    std::vector<std::size_t> batch_sizes{};
    bool quiet = false;  // no progress indicator
    bool verbose = false;  // also the per-position acceptance and time-per-step tables
    bool markdown = false;  // --format md: the tables as Markdown
    bool help = false;

    [[nodiscard]] bool uses_synthetic_target() const { return !target_path.has_value(); }
    [[nodiscard]] bool uses_prompt_lookup() const { return draft_path && *draft_path == kPromptLookupDraft; }
};

// --batch's defaults where the flags do not say otherwise: a short request
// (the sweep runs 2 x B of them per batch size and variant, and the pass at
// B = 32 is compute-bound on a small CPU), two rounds, greedy decoding (the
// variants' tokens are then checked to be identical).
inline constexpr std::size_t kBatchNewTokens = 24;
inline constexpr std::size_t kBatchRounds = 2;
inline constexpr std::size_t kMaxBatchSize = 256;

// A per-position acceptance rate measured over fewer drafts than this is
// printed as "-" (--verbose): a handful of samples reads as 1.00 or 0.00 and
// says nothing.
inline constexpr std::size_t kPositionSampleFloor = 20;

// The names --synthetic-draft accepts (synthetic_draft_kind_name of each kind).
inline constexpr std::array<std::string_view, 6> kSyntheticDraftKinds{
    "early-exit-q8_0", "early-exit-q4_0", "early-exit", "q4_0", "q8_0", "unrelated"};

[[nodiscard]] inline std::string unknown_synthetic_draft_message(std::string_view kind) {
    // Appended piece by piece (GCC 12 warns falsely, -Wrestrict, on "literal" + std::string here).
    std::string message = "--synthetic-draft: '";
    message.append(kind).append("' is not a draft kind, expected one of");
    for (const std::string_view name : kSyntheticDraftKinds) message.append(" ").append(name);
    return message;
}

namespace detail {

[[nodiscard]] inline std::size_t parse_count(std::string_view flag, std::string_view text, std::size_t minimum) {
    return static_cast<std::size_t>(cli::parse_count(flag, text, minimum));
}

[[nodiscard]] inline double parse_temperature(std::string_view flag, std::string_view text) {
    return cli::parse_non_negative(flag, text, "0 = greedy");
}

[[nodiscard]] inline double parse_seconds(std::string_view flag, std::string_view text) {
    return cli::parse_non_negative(flag, text, "seconds, 0 = none");
}

using cli::split_list;

inline void require_file(std::string_view flag, const std::string& path) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) {
        throw UsageError(std::string(flag) + ": no such file '" + path + "'");
    }
}

// The options being parsed, and which flags were given (checked together at the end).
struct BenchCommandLine {
    BenchOptions options;
    bool synthetic_option_given = false;
    bool repetitions_given = false;
    bool time_budget_given = false;
    bool new_tokens_given = false;
    bool temperatures_given = false;
    bool rules_given = false;
    // The spellings given for the two files (--target or -m or --model, ...),
    // so that an error names the flag the user typed.
    std::string target_flag = "--target", draft_flag = "--draft";
};

}  // namespace detail

using BenchFlag = cli::FlagSpec<detail::BenchCommandLine>;

// Every flag of specdec-bench: name, value, help and effect.
inline const std::vector<BenchFlag>& bench_flags() {
    using Line = detail::BenchCommandLine;
    using V = std::string_view;
    static const std::vector<BenchFlag> flags{
        {{"--target", "-m", "--model"}, "FILE.gguf", "target model (needs --draft; -m, --model: as specdec-generate and llama.cpp)",
         [](Line& l, V f, V v) {
             l.options.target_path = std::string(v);
             l.target_flag = std::string(f);
         },
         "models"},
        {{"--draft", "-md", "--model-draft"}, "FILE.gguf|prompt-lookup",
         "draft model, or the model-free prompt-lookup drafter (-md, --model-draft: as specdec-generate)",
         [](Line& l, V f, V v) {
             l.options.draft_path = std::string(v);
             l.draft_flag = std::string(f);
         }},
        {{"--synthetic-size"}, "tiny|100m|1b|3b", "size of the embedded synthetic pair (default 100m; 1b and 3b: CUDA only)",
         [](Line& l, V, V size) {
             if (size != "tiny" && size != "100m" && size != "1b" && size != "3b")
                 throw UsageError("--synthetic-size: '" + std::string(size) +
                                  "' is not a size, expected tiny or 100m (1b, 3b: --backend cuda only)");
             l.options.synthetic_size = std::string(size);
             l.synthetic_option_given = true;
         }},
        {{"--synthetic-draft"}, "KIND",
         "how the synthetic draft derives from the target: early-exit-q8_0 (CPU default),\n"
         "early-exit-q4_0, early-exit (CUDA: the only one), q4_0, q8_0, unrelated (an\n"
         "independent model, the control)",
         [](Line& l, V, V kind) {
             if (std::find(kSyntheticDraftKinds.begin(), kSyntheticDraftKinds.end(), kind) == kSyntheticDraftKinds.end())
                 throw UsageError(unknown_synthetic_draft_message(kind));
             l.options.synthetic_draft = std::string(kind);
             l.synthetic_option_given = true;
         }},
        {{"--backend"}, "cpu|cuda", "where the models run (default cpu)",
         [](Line& l, V, V name) {
             if (name == "cpu") l.options.backend = Backend::cpu;
             else if (name == "cuda") l.options.backend = Backend::cuda;
             else throw UsageError("--backend: '" + std::string(name) + "' is not a backend, expected cpu or cuda");
         }},
        {{"--engine"}, "specdec|llama.cpp",
         "what runs the models: specdec's own CPU models (default), or llama.cpp\n"
         "(the --target and --draft files, through specdec's llama.cpp adapter)",
         [](Line& l, V flag, V name) { l.options.engine = cli::parse_engine(flag, name); }},
        {{"--threads"}, "N", "CPU threads (default: all hardware threads)",
         [](Line& l, V f, V v) { l.options.threads = detail::parse_count(f, v, 1); }},

        {{"--draft-tokens"}, "LIST",
         "draft lengths k, comma-separated; \"auto\" adds a row where the decoder chooses\n"
         "each step's length by its online cost model (default 1,2,3,4,auto)",
         [](Line& l, V flag, V v) {
             BenchOptions& o = l.options;
             o.draft_tokens.clear();
             o.auto_length = false;
             for (const std::string_view item : detail::split_list(flag, v)) {
                 if (item == "auto") o.auto_length = true;
                 else o.draft_tokens.push_back(detail::parse_count(flag, item, 1));
             }
             std::sort(o.draft_tokens.begin(), o.draft_tokens.end());
             o.draft_tokens.erase(std::unique(o.draft_tokens.begin(), o.draft_tokens.end()), o.draft_tokens.end());
         },
         "what to measure"},
        {{"--max-draft-tokens"}, "N", "the most drafts per step of the auto row (default 8)",
         [](Line& l, V f, V v) { l.options.auto_max_draft_tokens = detail::parse_count(f, v, 1); }},
        {{"--rule", "--rules"}, "LIST",
         "acceptance rules: tokenwise, block (block verification; at k = 1 it is\n"
         "token-wise rejection, so that row is left out when both rules run), coupled\n"
         "(the target's own draw at each position: a seed's tokens whatever the draft\n"
         "lengths); block and coupled run at T > 0 only, at T = 0 they are greedy\n"
         "verification (default tokenwise,block; --batch: one, default tokenwise)",
         [](Line& l, V flag, V v) {
             l.rules_given = true;
             std::vector<RuleChoice>& rules = l.options.rules;
             rules.clear();
             for (const std::string_view item : detail::split_list(flag, v)) {
                 RuleChoice rule;
                 if (item == "tokenwise") rule = RuleChoice::tokenwise;
                 else if (item == "block") rule = RuleChoice::block;
                 else if (item == "coupled") rule = RuleChoice::coupled;
                 else throw UsageError(std::string(flag) + ": '" + std::string(item) +
                                       "' is not a rule, expected tokenwise, block or coupled");
                 if (std::find(rules.begin(), rules.end(), rule) == rules.end()) rules.push_back(rule);
             }
         }},
        {{"--tree", "--trees"}, "LIST",
         "token-tree rows (target and draft need the tree pass): \"auto\" (the shape\n"
         "learned online from the measured costs and acceptance) and fixed shapes as\n"
         "children per depth, e.g. 3x2x1, or a chain length (default: none)",
         [](Line& l, V flag, V v) {
             l.options.trees.clear();
             for (const std::string_view item : detail::split_list(flag, v)) {
                 if (item != "auto") {
                     try {
                         (void)TreeShape::parse(std::string(item));
                     } catch (const Error& error) {
                         throw UsageError(std::string(flag) + ": " + error.what());
                     }
                 }
                 l.options.trees.emplace_back(item);
             }
         }},
        {{"--tree-auto-variant"}, "NAME:KEY=VALUE,...",
         "one more token-tree row \"auto:NAME\": AutoTree with these settings changed\n"
         "(AutoTree::Options' names, e.g. norival:max_rival_every=16), on the same\n"
         "prompts and seeds as the auto row: an A/B of a setting (repeatable)",
         [](Line& l, V flag, V v) { add_variant(flag, l.options.tree_auto_variants, parse_tree_auto_variant(flag, v)); }},
        {{"--tree-max-nodes"}, "N", "the most nodes of the auto tree (default 24)",
         [](Line& l, V f, V v) { l.options.tree_max_nodes = detail::parse_count(f, v, 1); }},
        {{"--temperatures", "--temperature"}, "LIST", "sampling temperatures, 0 = greedy (default 0,1; --batch: one, default 0)",
         [](Line& l, V flag, V v) {
             l.temperatures_given = true;
             std::vector<double>& temperatures = l.options.temperatures;
             temperatures.clear();
             for (const std::string_view item : detail::split_list(flag, v)) {
                 const double temperature = detail::parse_temperature(flag, item);
                 if (std::find(temperatures.begin(), temperatures.end(), temperature) == temperatures.end())
                     temperatures.push_back(temperature);
             }
         }},
        {{"--new-tokens"}, "N", "tokens generated per run (default 48; --batch: per request, default 24)",
         [](Line& l, V f, V v) {
             l.options.new_tokens = detail::parse_count(f, v, 1);
             l.new_tokens_given = true;
         }},
        {{"--prompt"}, "TEXT", "prompt text (GGUF models; synthetic models use a seeded token prompt)",
         [](Line& l, V, V v) { l.options.prompt = std::string(v); }},
        {{"--prompt-tokens"}, "N", "also measure prefill speed and time to first token for an N-token prompt",
         [](Line& l, V f, V v) { l.options.prompt_tokens = detail::parse_count(f, v, 1); }},
        {{"--repetitions"}, "N",
         "rounds over every row, seeds seed, seed + 1, ...: per temperature one\n"
         "autoregressive generation, then each row's speculative one (default: as\n"
         "many as fit in the time budget, at least 2, at most 16; given alone: exactly N)",
         [](Line& l, V f, V v) {
             l.options.repetitions = detail::parse_count(f, v, 1);
             l.repetitions_given = true;
         }},
        {{"--time-budget"}, "SECONDS",
         "run rounds while the next one is expected to end within SECONDS of the\n"
         "first one's start (at least 2; with --repetitions N at most N); 0 = no\n"
         "budget (default 50)",
         [](Line& l, V f, V v) {
             l.options.time_budget_seconds = detail::parse_seconds(f, v);
             l.time_budget_given = true;
         }},
        {{"--seed"}, "N", "seed of every random choice (default 42)",
         [](Line& l, V f, V v) { l.options.seed = cli::parse_count(f, v, 0); }},
        {{"--sequential-rows"}, "",
         "run each row's generation to its end before the next starts, on the one\n"
         "pair of models (default: the baseline and all rows of a round advance step\n"
         "by step in turn, each on its own replica of the models; CPU models only)",
         [](Line& l, V, V) { l.options.interleave_rows = false; }},
        {{"--cold-auto"}, "",
         "measure the auto rows from their first step (default: each auto row first\n"
         "generates once, untimed, on another prompt, as a serving process whose\n"
         "decoder has already answered a request; --batch: auto first serves one\n"
         "run untimed, every other variant one request per slot)",
         [](Line& l, V, V) { l.options.learn_auto_first = false; }},

        {{"--batch"}, "LIST",
         "instead of the single-sequence rows, batched decoding of many requests per\n"
         "target pass at each batch size B, e.g. 1,2,4,8,16,32 (synthetic pair; CPU, or\n"
         "the CUDA family with --backend cuda; or the --target and --draft files with\n"
         "--engine llama.cpp):\n"
         "batched autoregressive, each fixed k of --draft-tokens and auto, side by side\n"
         "in rounds (--repetitions, default 2); 2 x B requests of --new-tokens each",
         [](Line& l, V flag, V v) {
             std::vector<std::size_t>& sizes = l.options.batch_sizes;
             sizes.clear();
             for (const std::string_view item : detail::split_list(flag, v)) {
                 const std::size_t batch = detail::parse_count(flag, item, 1);
                 if (batch > kMaxBatchSize)
                     throw UsageError(std::string(flag) + ": batch size " + std::to_string(batch) + " is too large, expected at most " +
                                      std::to_string(kMaxBatchSize));
                 sizes.push_back(batch);
             }
             std::sort(sizes.begin(), sizes.end());
             sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
         }},
        {{"--auto-variant"}, "NAME:KEY=VALUE,...",
         "--batch: one more auto variant, AutoBatchLength with these settings changed\n"
         "(AutoBatchOptions' names, e.g. off-margin:draft_margin=1), stepping in turn\n"
         "with the others: an A/B of a setting in one process (repeatable)",
         [](Line& l, V flag, V v) { add_variant(flag, l.options.auto_variants, parse_auto_variant(flag, v)); }},

        {{"--verbose"}, "", "also print acceptance by draft position and where a step's time goes",
         [](Line& l, V, V) { l.options.verbose = true; }, "output"},
        {{"--format"}, "text|md", "console tables as aligned text (default) or Markdown, for pasting",
         [](Line& l, V, V name) {
             if (name == "md" || name == "markdown") l.options.markdown = true;
             else if (name == "text") l.options.markdown = false;
             else throw UsageError("--format: '" + std::string(name) + "' is not a format, expected text or md");
         }},
        {{"--json"}, "FILE", "write the full report as JSON",
         [](Line& l, V, V v) { l.options.json_path = std::string(v); }},
        {{"--svg"}, "FILE", "plot speedup, predicted speedup and acceptance against k",
         [](Line& l, V, V v) { l.options.svg_path = std::string(v); }},
        {{"--export-gguf"}, "DIR",
         "write the synthetic target and draft as DIR/target.gguf and DIR/draft.gguf\n"
         "(llama.cpp loads them: synthetic vocabulary), then exit",
         [](Line& l, V, V v) {
             if (v.empty()) throw UsageError("--export-gguf: empty folder name");
             l.options.export_gguf_dir = std::string(v);
         }},
        {{"--quiet"}, "", "no progress indicator on stderr", [](Line& l, V, V) { l.options.quiet = true; }},
        {{"--help", "-h"}, "", "this text", [](Line& l, V, V) { l.options.help = true; }},
    };
    return flags;
}

[[nodiscard]] inline std::string usage_text() {
    return std::string(R"(usage: specdec-bench [options]

Measures speculative decoding against plain autoregressive decoding of the same
target, interleaved in one process, and compares the measured speedup with the
speedup Leviathan et al.'s cost model predicts from the measured acceptance and
costs. With no options it runs the embedded synthetic pair ("100m" target and
its derived draft) on the CPU.

)") +
           cli::flag_help<detail::BenchCommandLine>(bench_flags()) + "\n" + R"(the report: verdict lines first (best speedup per temperature, auto against the best fixed k,
greedy identity, plain decoding against the memory roofline, the machine), then one row per
configuration:
  tok/s      generated tokens / time of the steps after the prompt (prefill measured apart)
  speedup    speculative / autoregressive tok/s, summed over the repetitions; per rep. = the
             slowest-fastest single repetition, each against the autoregressive run of its round
  alpha      accepted / tested drafts (per-token acceptance); tok/pass = tokens per target pass
  mean k     drafts per step (auto<=N: the lengths the decoder chose, at most N)
  v_k        target pass over k+1 tokens / target forward (auto rows: "-", their length
             varied); c = draft forward / target forward is on the costs line
  pred.      Leviathan et al.'s model: E / (k*c + v_k), E = (1 - alpha^(k+1)) / (1 - alpha)
             (auto rows: averaged over the lengths chosen); effic. = measured / predicted
  greedy     T=0 only: did speculative decoding emit exactly the autoregressive tokens
  auto<=N    the decoder chose each step's length by its online cost model, after one untimed
             generation on another prompt (--cold-auto: from its first step)
  block      block verification (Sun et al. 2025)
--verbose per-position columns print "-" where a position was proposed fewer than )" +
           std::to_string(kPositionSampleFloor) + R"( times.

exit status: 0 success, 1 the library reported an error, 2 bad command line
)";
}

// Parses argv[1..]. Accepts "--flag value" and "--flag=value".
[[nodiscard]] inline BenchOptions parse_options(std::span<const std::string_view> arguments) {
    detail::BenchCommandLine line;
    cli::parse_flags<detail::BenchCommandLine>(bench_flags(), arguments, line);
    BenchOptions& options = line.options;
    const bool synthetic_option_given = line.synthetic_option_given;
    const bool repetitions_given = line.repetitions_given, time_budget_given = line.time_budget_given;
    if (options.help) return options;
    if (repetitions_given && !time_budget_given) options.time_budget_seconds = 0.0;  // exactly N rounds

    // The variants' rows follow the --tree rows, whatever the flags' order.
    for (const TreeAutoVariant& variant : options.tree_auto_variants) options.trees.push_back("auto:" + variant.name);
    if (options.batch_sizes.empty() && !options.auto_variants.empty())
        throw UsageError("--auto-variant adds a variant to the --batch sweep; give --batch");
    if (!options.batch_sizes.empty()) {
        if (options.export_gguf_dir) throw UsageError("--batch takes no --export-gguf");
        if (options.engine == Engine::specdec && (options.target_path || options.draft_path))
            throw UsageError("--batch runs the embedded synthetic pair on specdec's own engine (the CUDA family with "
                             "--backend cuda), or GGUF files with --engine llama.cpp; it takes no --target or --draft "
                             "without --engine llama.cpp");
        if (options.engine == Engine::llama_cpp && options.uses_prompt_lookup())
            throw UsageError("--batch --engine llama.cpp measures a draft model: give --draft D.gguf (prompt-lookup is "
                             "measured without --batch)");
        if (!options.trees.empty()) throw UsageError("--batch measures chains; it takes no --tree");
        if (line.temperatures_given && options.temperatures.size() != 1)
            throw UsageError("--batch measures one temperature; give --temperature with one value");
        if (!line.temperatures_given) options.temperatures = {0.0};
        if (line.rules_given && options.rules.size() != 1)
            throw UsageError("--batch measures one acceptance rule; give --rule tokenwise or --rule block");
        if (!line.rules_given) options.rules = {RuleChoice::tokenwise};
        if (!line.new_tokens_given) options.new_tokens = kBatchNewTokens;
        if (!repetitions_given) options.repetitions = kBatchRounds;
        options.time_budget_seconds = 0.0;  // rounds, not a budget
    }

    if (options.export_gguf_dir && (options.target_path || options.backend != Backend::cpu || options.uses_prompt_lookup() ||
                                    options.engine != Engine::specdec)) {
        throw UsageError("--export-gguf writes the embedded synthetic CPU models; it takes no --target, --draft, "
                         "--backend cuda or --engine llama.cpp");
    }
    if (options.engine == Engine::llama_cpp) {
        if (!options.target_path || !options.draft_path)
            throw UsageError("--engine llama.cpp runs GGUF files: expected --target T.gguf and --draft D.gguf (or "
                             "--draft prompt-lookup); specdec-bench --export-gguf DIR writes the synthetic pair as such files");
        if (options.backend != Backend::cpu)
            throw UsageError("--engine llama.cpp takes no --backend: llama.cpp runs on the devices it was built for");
    }
    if (options.target_path) {
        detail::require_file(line.target_flag, *options.target_path);
        if (!options.draft_path)
            throw UsageError("--target needs --draft (a GGUF file sharing the target's tokenizer, or prompt-lookup)");
        if (synthetic_option_given)
            throw UsageError("--synthetic-size and --synthetic-draft apply to the embedded models, not with --target");
    } else if (options.draft_path && !options.uses_prompt_lookup()) {
        throw UsageError("--draft FILE needs --target FILE (only prompt-lookup can draft for the synthetic target)");
    }
    if (options.draft_path && !options.uses_prompt_lookup()) detail::require_file(line.draft_flag, *options.draft_path);
    return options;
}

[[nodiscard]] inline BenchOptions parse_options(int argc, const char* const* argv) {
    std::vector<std::string_view> arguments;
    for (int i = 1; i < argc; ++i) arguments.emplace_back(argv[i]);
    return parse_options(std::span<const std::string_view>(arguments));
}

}  // namespace specdec::bench
