#pragma once
// Command-line options of specdec-bench. Parsing is strict: an unknown flag, a
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

#include "specdec/core/error.hpp"
#include "specdec/decoding/tree_shape.hpp"

namespace specdec::bench {

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class Backend { cpu, cuda };

[[nodiscard]] inline std::string_view to_string(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }

inline constexpr std::string_view kPromptLookupDraft = "prompt-lookup";

// The acceptance rule of a configuration. Block verification equals greedy
// verification at temperature 0, so it is only run at temperatures > 0.
enum class RuleChoice { tokenwise, block };

[[nodiscard]] inline std::string_view to_string(RuleChoice rule) {
    return rule == RuleChoice::tokenwise ? "tokenwise" : "block";
}

struct BenchOptions {
    std::optional<std::string> target_path;  // a GGUF file; none = the embedded synthetic target
    std::optional<std::string> draft_path;   // a GGUF file, or "prompt-lookup"
    Backend backend = Backend::cpu;
    // Defaults sized so that the no-argument run finishes in about a minute on
    // a 2-core machine (see the Results section of README.md). Each repetition
    // is another seed, so alpha is measured over repetitions x new_tokens
    // independently sampled tokens (one seed gives the same text every time).
    std::vector<std::size_t> draft_tokens{1, 2, 3, 4};
    bool auto_length = true;             // also a row with AutoLength (the list item "auto")
    std::size_t auto_max_draft_tokens = 8;
    std::vector<RuleChoice> rules{RuleChoice::tokenwise, RuleChoice::block};
    // Token-tree rows: "auto" (AutoTree) and fixed shapes such as "3x2x1"; empty = none.
    std::vector<std::string> trees{};
    std::size_t tree_max_nodes = 24;  // the most nodes of the auto tree
    std::vector<double> temperatures{0.0, 1.0};
    // 48 tokens a repetition: each prompt's sequence is a sample of its own
    // (alpha at T = 0 was 0.74-0.76 over the first two or three seeds' 96
    // tokens each, 0.80 over sixteen), so the budget buys more prompts of
    // fewer tokens rather than fewer, longer ones.
    std::size_t new_tokens = 48;
    std::optional<std::string> prompt;
    std::optional<std::size_t> prompt_tokens;  // also measure the prefill of a prompt of this many tokens
    std::optional<std::string> export_gguf_dir;  // write the synthetic target and draft as GGUF files there, then exit
    // Rounds over every row: as many as fit in time_budget_seconds (at least
    // two, at most `repetitions`), so that the default run takes about a
    // minute on a slow or busy machine and gathers more samples on a fast one.
    // --repetitions alone asks for exactly that many (no budget).
    std::size_t repetitions = 16;
    double time_budget_seconds = 50.0;  // 0 = no budget
    std::size_t threads = 0;  // 0 = every hardware thread
    bool interleave_rows = true;  // false: --sequential-rows
    bool learn_auto_first = true;  // false: --cold-auto
    std::uint64_t seed = 42;
    std::optional<std::string> json_path;
    std::optional<std::string> svg_path;
    std::string synthetic_size = "100m";
    // How the synthetic draft derives from the target; none = the backend's
    // default (CPU: early-exit-q8_0, the family's recommended draft; CUDA: early-exit).
    std::optional<std::string> synthetic_draft;
    bool quiet = false;  // no progress indicator
    bool help = false;

    [[nodiscard]] bool uses_synthetic_target() const { return !target_path.has_value(); }
    [[nodiscard]] bool uses_prompt_lookup() const { return draft_path && *draft_path == kPromptLookupDraft; }
};

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

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: specdec-bench [options]

Measures speculative decoding against plain autoregressive decoding of the same
target, interleaved in one process, and compares the measured speedup with the
speedup Leviathan et al.'s cost model predicts from the measured acceptance and
costs. With no options it runs the embedded synthetic pair ("100m" target and
its derived draft) on the CPU.

models
  --target FILE.gguf        target model (needs --draft)
  --draft FILE.gguf|prompt-lookup
                            draft model, or the model-free prompt-lookup drafter
  --synthetic-size tiny|100m|1b|3b
                            size of the embedded synthetic pair (default 100m; 1b and 3b: CUDA only)
  --synthetic-draft early-exit-q8_0|early-exit-q4_0|early-exit|q4_0|q8_0|unrelated
                            how the synthetic draft derives from the target (CPU default early-exit-q8_0,
                            CUDA: early-exit only; unrelated = an independent model, the control)
  --backend cpu|cuda        where the models run (default cpu)
  --threads N               CPU threads (default: all hardware threads)

what to measure
  --draft-tokens LIST       draft lengths k, comma-separated; "auto" adds a row where the decoder chooses
                            each step's length by its online cost model (default 1,2,3,4,auto)
  --max-draft-tokens N      the most drafts per step of the auto row (default 8)
  --rule LIST               acceptance rules: tokenwise, block (block verification; runs at T > 0 only,
                            at T = 0 it is greedy verification; at k = 1 it is token-wise rejection, so
                            that row is left out when both rules run) (default tokenwise,block)
  --tree LIST               token-tree rows (target and draft need the tree pass): "auto" (the shape
                            learned online from the measured costs and acceptance) and fixed shapes as
                            children per depth, e.g. 3x2x1, or a chain length (default: none)
  --tree-max-nodes N        the most nodes of the auto tree (default 24)
  --temperatures LIST       sampling temperatures, 0 = greedy (default 0,1)
  --new-tokens N            tokens generated per run (default 48)
  --prompt TEXT             prompt text (GGUF models; synthetic models use a seeded token prompt)
  --prompt-tokens N         also measure prefill speed and time to first token for an N-token prompt
  --repetitions N           rounds over every row, seeds seed, seed + 1, ...: per temperature one
                            autoregressive generation, then each row's speculative one (default: as
                            many as fit in the time budget, at least 2, at most 16; given alone: exactly N)
  --time-budget SECONDS     run rounds while the next one is expected to end within SECONDS of the
                            first one's start (at least 2; with --repetitions N at most N); 0 = no
                            budget (default 50)
  --seed N                  seed of every random choice (default 42)
  --sequential-rows         run each row's generation to its end before the next starts, on the one
                            pair of models (default: the baseline and all rows of a round advance step
                            by step in turn, each on its own replica of the models; CPU models only)
  --cold-auto               measure the auto rows from their first step (default: each auto row first
                            generates once, untimed, on another prompt, as a serving process whose
                            decoder has already answered a request)

output
  --json FILE               write the full report as JSON
  --svg FILE                plot speedup, predicted speedup and acceptance against k
  --export-gguf DIR         write the synthetic target and draft as DIR/target.gguf and DIR/draft.gguf
                            (llama.cpp loads them: synthetic vocabulary), then exit
  --quiet                   no progress indicator on stderr
  --help                    this text

exit status: 0 success, 1 the library reported an error, 2 bad command line
)";
}

namespace detail {

[[nodiscard]] inline std::size_t parse_count(std::string_view flag, std::string_view text, std::size_t minimum) {
    std::size_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, value);
    if (text.empty() || error != std::errc{} || ptr != end) {
        throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not a non-negative integer");
    }
    if (value < minimum) {
        throw UsageError(std::string(flag) + ": " + std::to_string(value) + " is too small, expected at least " +
                         std::to_string(minimum));
    }
    return value;
}

[[nodiscard]] inline double parse_temperature(std::string_view flag, std::string_view text) {
    const std::string copy(text);
    char* end = nullptr;
    const double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size()) {
        throw UsageError(std::string(flag) + ": '" + copy + "' is not a number");
    }
    if (!std::isfinite(value) || value < 0.0) {
        throw UsageError(std::string(flag) + ": temperature " + copy + " is invalid, expected a finite value >= 0 (0 = greedy)");
    }
    return value;
}

[[nodiscard]] inline double parse_seconds(std::string_view flag, std::string_view text) {
    const std::string copy(text);
    char* end = nullptr;
    const double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size()) throw UsageError(std::string(flag) + ": '" + copy + "' is not a number");
    if (!std::isfinite(value) || value < 0.0)
        throw UsageError(std::string(flag) + ": " + copy + " seconds is invalid, expected a finite value >= 0 (0 = none)");
    return value;
}

[[nodiscard]] inline std::vector<std::string_view> split_list(std::string_view flag, std::string_view text) {
    std::vector<std::string_view> items;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = text.find(',', start);
        const std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        if (item.empty()) throw UsageError(std::string(flag) + ": empty item in list '" + std::string(text) + "'");
        items.push_back(item);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return items;
}

inline void require_file(std::string_view flag, const std::string& path) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) {
        throw UsageError(std::string(flag) + ": no such file '" + path + "'");
    }
}

}  // namespace detail

// Parses argv[1..]. Accepts "--flag value" and "--flag=value".
[[nodiscard]] inline BenchOptions parse_options(std::span<const std::string_view> arguments) {
    BenchOptions options;
    bool synthetic_option_given = false;
    bool repetitions_given = false, time_budget_given = false;
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        std::string_view flag = arguments[i];
        std::optional<std::string_view> inline_value;
        if (const std::size_t equals = flag.find('='); flag.starts_with("--") && equals != std::string_view::npos) {
            inline_value = flag.substr(equals + 1);
            flag = flag.substr(0, equals);
        }
        auto value = [&]() -> std::string_view {
            if (inline_value) return *inline_value;
            if (i + 1 >= arguments.size()) throw UsageError(std::string(flag) + ": missing value");
            return arguments[++i];
        };
        auto no_value = [&] {
            if (inline_value) throw UsageError(std::string(flag) + " takes no value");
        };

        if (flag == "--help" || flag == "-h") {
            no_value();
            options.help = true;
        } else if (flag == "--quiet") {
            no_value();
            options.quiet = true;
        } else if (flag == "--target") {
            options.target_path = std::string(value());
        } else if (flag == "--draft") {
            options.draft_path = std::string(value());
        } else if (flag == "--backend") {
            const std::string_view name = value();
            if (name == "cpu") options.backend = Backend::cpu;
            else if (name == "cuda") options.backend = Backend::cuda;
            else throw UsageError("--backend: '" + std::string(name) + "' is not a backend, expected cpu or cuda");
        } else if (flag == "--draft-tokens") {
            options.draft_tokens.clear();
            options.auto_length = false;
            for (const std::string_view item : detail::split_list(flag, value())) {
                if (item == "auto") options.auto_length = true;
                else options.draft_tokens.push_back(detail::parse_count(flag, item, 1));
            }
            std::sort(options.draft_tokens.begin(), options.draft_tokens.end());
            options.draft_tokens.erase(std::unique(options.draft_tokens.begin(), options.draft_tokens.end()),
                                       options.draft_tokens.end());
        } else if (flag == "--tree" || flag == "--trees") {
            options.trees.clear();
            for (const std::string_view item : detail::split_list(flag, value())) {
                if (item != "auto") {
                    try {
                        (void)TreeShape::parse(std::string(item));
                    } catch (const Error& error) {
                        throw UsageError(std::string(flag) + ": " + error.what());
                    }
                }
                options.trees.emplace_back(item);
            }
        } else if (flag == "--tree-max-nodes") {
            options.tree_max_nodes = detail::parse_count(flag, value(), 1);
        } else if (flag == "--max-draft-tokens") {
            options.auto_max_draft_tokens = detail::parse_count(flag, value(), 1);
        } else if (flag == "--rule" || flag == "--rules") {
            options.rules.clear();
            for (const std::string_view item : detail::split_list(flag, value())) {
                RuleChoice rule;
                if (item == "tokenwise") rule = RuleChoice::tokenwise;
                else if (item == "block") rule = RuleChoice::block;
                else throw UsageError(std::string(flag) + ": '" + std::string(item) + "' is not a rule, expected tokenwise or block");
                if (std::find(options.rules.begin(), options.rules.end(), rule) == options.rules.end()) options.rules.push_back(rule);
            }
        } else if (flag == "--temperatures" || flag == "--temperature") {
            options.temperatures.clear();
            for (const std::string_view item : detail::split_list(flag, value())) {
                const double temperature = detail::parse_temperature(flag, item);
                if (std::find(options.temperatures.begin(), options.temperatures.end(), temperature) ==
                    options.temperatures.end())
                    options.temperatures.push_back(temperature);
            }
        } else if (flag == "--new-tokens") {
            options.new_tokens = detail::parse_count(flag, value(), 1);
        } else if (flag == "--prompt") {
            options.prompt = std::string(value());
        } else if (flag == "--prompt-tokens") {
            options.prompt_tokens = detail::parse_count(flag, value(), 1);
        } else if (flag == "--export-gguf") {
            options.export_gguf_dir = std::string(value());
            if (options.export_gguf_dir->empty()) throw UsageError("--export-gguf: empty folder name");
        } else if (flag == "--repetitions") {
            options.repetitions = detail::parse_count(flag, value(), 1);
            repetitions_given = true;
        } else if (flag == "--time-budget") {
            options.time_budget_seconds = detail::parse_seconds(flag, value());
            time_budget_given = true;
        } else if (flag == "--sequential-rows") {
            no_value();
            options.interleave_rows = false;
        } else if (flag == "--cold-auto") {
            no_value();
            options.learn_auto_first = false;
        } else if (flag == "--threads") {
            options.threads = detail::parse_count(flag, value(), 1);
        } else if (flag == "--seed") {
            options.seed = detail::parse_count(flag, value(), 0);
        } else if (flag == "--json") {
            options.json_path = std::string(value());
        } else if (flag == "--svg") {
            options.svg_path = std::string(value());
        } else if (flag == "--synthetic-size") {
            const std::string_view size = value();
            if (size != "tiny" && size != "100m" && size != "1b" && size != "3b")
                throw UsageError("--synthetic-size: '" + std::string(size) +
                                 "' is not a size, expected tiny or 100m (1b, 3b: --backend cuda only)");
            options.synthetic_size = std::string(size);
            synthetic_option_given = true;
        } else if (flag == "--synthetic-draft") {
            const std::string_view kind = value();
            if (std::find(kSyntheticDraftKinds.begin(), kSyntheticDraftKinds.end(), kind) == kSyntheticDraftKinds.end())
                throw UsageError(unknown_synthetic_draft_message(kind));
            options.synthetic_draft = std::string(kind);
            synthetic_option_given = true;
        } else {
            throw UsageError("unknown option '" + std::string(arguments[i]) + "' (see --help)");
        }
    }
    if (options.help) return options;
    if (repetitions_given && !time_budget_given) options.time_budget_seconds = 0.0;  // exactly N rounds

    if (options.export_gguf_dir && (options.target_path || options.backend != Backend::cpu || options.uses_prompt_lookup())) {
        throw UsageError("--export-gguf writes the embedded synthetic CPU models; it takes no --target, --draft or --backend cuda");
    }
    if (options.target_path) {
        detail::require_file("--target", *options.target_path);
        if (!options.draft_path)
            throw UsageError("--target needs --draft (a GGUF file sharing the target's tokenizer, or prompt-lookup)");
        if (synthetic_option_given)
            throw UsageError("--synthetic-size and --synthetic-draft apply to the embedded models, not with --target");
    } else if (options.draft_path && !options.uses_prompt_lookup()) {
        throw UsageError("--draft FILE needs --target FILE (only prompt-lookup can draft for the synthetic target)");
    }
    if (options.draft_path && !options.uses_prompt_lookup()) detail::require_file("--draft", *options.draft_path);
    return options;
}

[[nodiscard]] inline BenchOptions parse_options(int argc, const char* const* argv) {
    std::vector<std::string_view> arguments;
    for (int i = 1; i < argc; ++i) arguments.emplace_back(argv[i]);
    return parse_options(std::span<const std::string_view>(arguments));
}

}  // namespace specdec::bench
