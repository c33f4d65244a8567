// specdec-generate: speculative decoding of a GGUF target with a GGUF draft
// model (or prompt lookup when no draft is given), streaming the text as it is
// accepted. Flags follow llama.cpp's speculative tools where they overlap.
//
//   specdec-generate -m TARGET.gguf [-md DRAFT.gguf] -p "prompt" [-n 128] [--temp 0.8] ...
//
// --check-autoregressive generates the same continuation with the target
// alone afterwards and exits 1 when the tokens differ (at temperature 0 the
// speculative output must be the target's greedy output, token for token; at
// temperature > 0 both draw from the same distribution but not the same
// sample, so the check needs --temp 0).
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/formats/tokenizer.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/specdec.hpp>

namespace {

namespace fs = std::filesystem;

struct Options {
    fs::path target;
    fs::path draft;
    std::string prompt;
    std::size_t new_tokens = 128;
    double temperature = 0.8;
    std::size_t top_k = 40;
    double top_p = 0.95;
    double min_p = 0.05;
    std::optional<std::uint64_t> seed;
    std::size_t draft_tokens = 4;
    bool auto_length = false;      // -k auto: the decoder chooses each step's length (at most draft_tokens)
    bool draft_max_given = false;
    std::size_t threads = 0;
    std::size_t context = 0;
    std::size_t lookup_min = 1;
    std::size_t lookup_max = 3;
    bool ignore_eos = false;
    bool autoregressive = false;
    bool check_autoregressive = false;
    bool quiet = false;
};

constexpr const char* kUsage =
    "usage: specdec-generate -m TARGET.gguf [-md DRAFT.gguf] -p PROMPT [options]\n"
    "  -m,  --model FILE          target model (GGUF: llama, qwen2)\n"
    "  -md, --model-draft FILE    draft model sharing the target's vocabulary; without it, prompt lookup drafts\n"
    "  -p,  --prompt TEXT         prompt text\n"
    "  -n,  --n-predict N         tokens to generate (default 128)\n"
    "       --temp T              temperature, 0 = greedy (default 0.8)\n"
    "       --top-k N             0 = off (default 40)\n"
    "       --top-p P             1 = off (default 0.95)\n"
    "       --min-p P             0 = off (default 0.05)\n"
    "  -s,  --seed N              sampling seed (default: random, printed at the end)\n"
    "  -k,  --draft N|auto        tokens drafted per target pass (default 4); auto: the decoder chooses each\n"
    "                             step's length from the acceptance and costs it measures (specdec::AutoLength)\n"
    "       --draft-max N         with -k auto, the most tokens it drafts per pass (default 8); else as -k N\n"
    "       --lookup-ngram MIN,MAX  n-gram sizes of prompt lookup (default 1,3)\n"
    "  -t,  --threads N           threads (default: all cores)\n"
    "  -c,  --ctx-size N          cap the context (default: the target's)\n"
    "       --ignore-eos          do not stop at the end-of-sequence token\n"
    "       --autoregressive      decode with the target alone (the baseline)\n"
    "       --check-autoregressive  afterwards decode with the target alone and exit 1 if the tokens differ\n"
    "       --quiet               print the statistics only\n";

[[noreturn]] void usage_error(const std::string& message) {
    std::fprintf(stderr, "specdec-generate: %s\n%s", message.c_str(), kUsage);
    std::exit(2);
}

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) {
        usage_error(std::string(flag) + " " + std::string(text) + ": expected a number");
    }
    return value;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view flag = argv[i];
        const auto value = [&]() -> std::string_view {
            if (i + 1 >= argc) usage_error(std::string(flag) + ": missing value");
            return argv[++i];
        };
        if (flag == "-h" || flag == "--help") {
            std::printf("%s", kUsage);
            std::exit(0);
        } else if (flag == "-m" || flag == "--model") {
            o.target = value();
        } else if (flag == "-md" || flag == "--model-draft") {
            o.draft = value();
        } else if (flag == "-p" || flag == "--prompt") {
            o.prompt = value();
        } else if (flag == "-n" || flag == "--n-predict") {
            o.new_tokens = parse_number<std::size_t>(flag, value());
        } else if (flag == "--temp") {
            o.temperature = parse_number<double>(flag, value());
        } else if (flag == "--top-k") {
            o.top_k = parse_number<std::size_t>(flag, value());
        } else if (flag == "--top-p") {
            o.top_p = parse_number<double>(flag, value());
        } else if (flag == "--min-p") {
            o.min_p = parse_number<double>(flag, value());
        } else if (flag == "-s" || flag == "--seed") {
            o.seed = parse_number<std::uint64_t>(flag, value());
        } else if (flag == "-k" || flag == "--draft") {
            const std::string_view length = value();
            o.auto_length = length == "auto";
            if (!o.auto_length) o.draft_tokens = parse_number<std::size_t>(flag, length);
        } else if (flag == "--draft-max") {
            o.draft_tokens = parse_number<std::size_t>(flag, value());
            o.draft_max_given = true;
        } else if (flag == "--lookup-ngram") {
            const std::string_view range = value();
            const std::size_t comma = range.find(',');
            if (comma == std::string_view::npos) usage_error("--lookup-ngram " + std::string(range) + ": expected MIN,MAX");
            o.lookup_min = parse_number<std::size_t>(flag, range.substr(0, comma));
            o.lookup_max = parse_number<std::size_t>(flag, range.substr(comma + 1));
        } else if (flag == "-t" || flag == "--threads") {
            o.threads = parse_number<std::size_t>(flag, value());
        } else if (flag == "-c" || flag == "--ctx-size") {
            o.context = parse_number<std::size_t>(flag, value());
        } else if (flag == "--ignore-eos") {
            o.ignore_eos = true;
        } else if (flag == "--autoregressive") {
            o.autoregressive = true;
        } else if (flag == "--check-autoregressive") {
            o.check_autoregressive = true;
        } else if (flag == "--quiet") {
            o.quiet = true;
        } else {
            usage_error("unknown flag " + std::string(flag));
        }
    }
    if (o.target.empty()) usage_error("no target model: expected -m TARGET.gguf");
    if (o.prompt.empty()) usage_error("no prompt: expected -p TEXT");
    if (o.auto_length && !o.draft_max_given) o.draft_tokens = 8;
    if (o.autoregressive && o.check_autoregressive) usage_error("--autoregressive and --check-autoregressive exclude each other");
    if (o.check_autoregressive && o.temperature != 0.0) {
        usage_error("--check-autoregressive compares token for token, which only greedy decoding guarantees: expected --temp 0");
    }
    return o;
}

// Draft and target must number tokens the same way, or the target verifies
// tokens the draft never meant: compare the two vocabularies piece by piece.
void require_same_vocabulary(const Options& o, const specdec::Tokenizer& target, const specdec::Tokenizer& draft,
                             std::size_t target_rows, std::size_t draft_rows) {
    const auto refuse = [&](const std::string& difference) {
        throw specdec::Error(o.draft.string() + ": the draft's vocabulary differs from the target's (" + difference +
                             "); expected a draft of the same model family with the same tokenizer (e.g. a smaller "
                             "or more quantised model of that family), or no -md to draft by prompt lookup");
    };
    if (target.model() != draft.model() || target.pre_tokenizer() != draft.pre_tokenizer()) {
        refuse("a different tokenizer model or pre-tokenizer");
    }
    if (target.vocab_size() != draft.vocab_size()) {
        refuse(std::to_string(draft.vocab_size()) + " tokens against the target's " + std::to_string(target.vocab_size()));
    }
    if (target_rows != draft_rows) {
        refuse("output layers of " + std::to_string(draft_rows) + " and " + std::to_string(target_rows) + " rows");
    }
    for (std::size_t id = 0; id < target.vocab_size(); ++id) {
        const auto token = static_cast<specdec::Token>(id);
        if (target.token_piece(token) != draft.token_piece(token)) {
            refuse("token " + std::to_string(id) + " is '" + draft.token_piece(token) + "' in the draft and '" +
                   target.token_piece(token) + "' in the target");
        }
    }
    if (target.bos() != draft.bos() || target.eos() != draft.eos()) refuse("different BOS or EOS tokens");
}

void print_stats(const char* label, const specdec::GenerationStats& s, bool speculative) {
    std::fprintf(stderr, "%s: %zu tokens in %.3f s, %.1f tokens/s", label, s.generated_tokens, s.total_seconds,
                 s.tokens_per_second());
    if (speculative) {
        std::fprintf(stderr, "; acceptance %.1f%% (%zu of %zu drafted); %.2f tokens per target pass (%zu passes, "
                     "%.2f drafts per pass)",
                     100.0 * s.acceptance_rate(), s.draft_tokens_accepted, s.draft_tokens_proposed,
                     s.mean_tokens_per_target_pass(), s.target_forward_passes,
                     s.target_forward_passes == 0 ? 0.0
                                                  : static_cast<double>(s.draft_tokens_proposed) / s.target_forward_passes);
    }
    std::fprintf(stderr, "\n");
}

// Speculative decoding with a fixed draft length, or with the length chosen
// per step (options.draft_tokens is then the maximum).
template <class Draft, class OnToken>
specdec::GenerationResult speculate(specdec::LlamaModel& target, Draft& draft, const specdec::DecodingOptions& options,
                                    bool auto_length, const std::vector<specdec::Token>& prompt, OnToken& on_token) {
    if (auto_length) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options,
                                            specdec::TokenwiseRejection{}, specdec::AutoLength{});
        return decoder.generate(prompt, on_token);
    }
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options);
    return decoder.generate(prompt, on_token);
}

int run(const Options& o) {
    auto pool = std::make_shared<specdec::cpu::ThreadPool>(o.threads);
    const auto target_file = specdec::gguf::File::open(o.target);
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(target_file);
    specdec::LlamaModel target = specdec::LlamaModel::from_gguf(o.target, {.max_context = o.context, .thread_pool = pool});
    std::optional<specdec::LlamaModel> draft;
    if (!o.draft.empty() && !o.autoregressive) {
        const auto draft_file = specdec::gguf::File::open(o.draft);
        const specdec::Tokenizer draft_tokenizer = specdec::Tokenizer::from_gguf(draft_file);
        draft.emplace(specdec::LlamaModel::from_gguf(o.draft, {.max_context = o.context, .thread_pool = pool}));
        require_same_vocabulary(o, tokenizer, draft_tokenizer, target.vocab_size(), draft->vocab_size());
    }

    const std::vector<specdec::Token> prompt = tokenizer.encode(o.prompt);
    const std::uint64_t seed = o.seed.value_or(std::random_device{}());
    specdec::DecodingOptions options{
        .draft_tokens = o.draft_tokens,
        .sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p},
        .seed = seed,
        .max_new_tokens = o.new_tokens,
    };
    if (tokenizer.has_eos() && !o.ignore_eos) options.stop_tokens = {tokenizer.eos()};

    specdec::Tokenizer::StreamDecoder stream(tokenizer);
    const auto print = [&](specdec::Token token) {
        if (o.quiet) return;
        std::fputs(stream.push(token).c_str(), stdout);
        std::fflush(stdout);
    };
    if (!o.quiet) {
        std::fputs(o.prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    specdec::GenerationResult result;
    const char* method = "autoregressive";
    if (o.autoregressive) {
        specdec::AutoregressiveDecoder decoder(target, options);
        result = decoder.generate(prompt, print);
    } else if (draft) {
        method = "speculative (draft model)";
        result = speculate(target, *draft, options, o.auto_length, prompt, print);
    } else {
        method = "speculative (prompt lookup)";
        specdec::PromptLookupDrafter lookup({.min_ngram = o.lookup_min, .max_ngram = o.lookup_max});
        result = speculate(target, lookup, options, o.auto_length, prompt, print);
    }
    if (!o.quiet) std::printf("%s\n", stream.flush().c_str());

    const std::string length = (o.auto_length ? "auto, at most " : "") + std::to_string(o.draft_tokens);
    std::fprintf(stderr, "\ntarget %s, %s, draft length %s, temperature %g, seed %llu, stopped by %s\n",
                 o.target.filename().string().c_str(), draft ? o.draft.filename().string().c_str() : "no draft model",
                 length.c_str(), o.temperature, static_cast<unsigned long long>(seed),
                 std::string(specdec::to_string(result.stop_reason)).c_str());
    print_stats(method, result.stats, !o.autoregressive);

    if (o.check_autoregressive) {
        target.truncate(0);  // a fresh decoder: start from an empty cache
        specdec::AutoregressiveDecoder baseline(target, options);
        const specdec::GenerationResult reference = baseline.generate(prompt);
        print_stats("autoregressive", reference.stats, false);
        if (reference.tokens != result.tokens) {
            std::size_t first = 0;
            while (first < reference.tokens.size() && first < result.tokens.size() &&
                   reference.tokens[first] == result.tokens[first]) {
                ++first;
            }
            std::fprintf(stderr, "check: DIFFERENT from autoregressive decoding from generated token %zu on\n", first);
            return 1;
        }
        std::fprintf(stderr, "check: identical to autoregressive decoding (%zu tokens)\n", result.tokens.size());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    try {
        return run(options);
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "specdec-generate: %s\n", error.what());
        return 1;
    }
}
