// specdec-generate: speculative decoding of a GGUF target with a GGUF draft
// model (or prompt lookup when no draft is given), streaming the text as it is
// accepted. Flags follow llama.cpp's speculative tools where they overlap.
//
//   specdec-generate -m TARGET.gguf [-md DRAFT.gguf] -p "prompt" [-n 128] [--temp 0.8] ...
//
// --engine llama.cpp runs the same files in llama.cpp (specdec's adapter,
// specdec/adapters/llama_cpp.hpp): llama.cpp's forward passes, tokenizer and
// end-of-generation tokens; the drafting, acceptance and sampling stay specdec's.
//
// -r/--reverse-prompt TEXT stops generation right after TEXT appears in the
// output (text matched across tokens, as llama.cpp's reverse prompt). The text
// streams through specdec/text/ with either engine. --chat formats -p (and -sys) with the target's chat
// template (tokenizer.chat_template: ChatML, Llama 3, Mistral with specdec's
// engine, llama_chat_apply_template's list with llama.cpp's) and stops at the
// end of the assistant's turn.
//
// --grammar-regex PATTERN keeps the output inside PATTERN (a RegexConstraint
// over the vocabulary's token texts; docs/constraints.md); --logprobs N prints
// each generated token's logprob and its row's N most probable tokens after
// the text, read from the target's rows as autoregressive decoding samples them.
//
// --check-autoregressive generates the same continuation with the target
// alone afterwards and exits 1 when the tokens differ (at temperature 0 the
// speculative output must be the target's greedy output, token for token; at
// temperature > 0 both draw from the same distribution but not the same
// sample, so the check needs --temp 0).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "engine_choice.hpp"
#include "flag_table.hpp"

#include <specdec/constraints/regex_constraint.hpp>
#include <specdec/constraints/token_texts.hpp>
#include <specdec/formats/tokenizer.hpp>
#include <specdec/formats/tokenizer_utf8.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/specdec.hpp>
#include <specdec/text/chat_template.hpp>
#include <specdec/text/text_stream.hpp>
#ifdef SPECDEC_WITH_LLAMA_CPP
#include <specdec/adapters/llama_cpp.hpp>
#include <specdec/text/llama_cpp_chat.hpp>
#include <specdec/text/llama_cpp_vocabulary.hpp>
#endif

namespace {

namespace fs = std::filesystem;
namespace cli = specdec::cli;

// -fa: llama.cpp's flash attention setting, without llama.h (the tool builds without llama.cpp too).
enum class FlashAttention { on, off, automatic };

struct Options {
    fs::path target;
    fs::path draft;
    std::string prompt;
    std::size_t new_tokens = 128;
    double temperature = 0.8;
    std::size_t top_k = 40;
    double top_p = 0.95;
    double min_p = 0.05;
    double repeat_penalty = 1.0;
    std::size_t repeat_last_n = 64;
    double presence_penalty = 0.0;
    double frequency_penalty = 0.0;
    std::vector<specdec::LogitBias> logit_bias;
    specdec::SamplerChain chain = specdec::kLlamaCppChain;
    std::optional<std::uint64_t> seed;
    std::size_t draft_tokens = 4;
    bool auto_length = true;       // -k auto (the default): the decoder chooses each step's length (at most draft_tokens)
    bool draft_max_given = false;
    std::optional<std::string> tree;  // --tree: a token tree per step, a shape ("3x2x1") or "auto" (AutoTree)
    std::size_t threads = 0;
    std::size_t context = 0;
    std::size_t recurrent_snapshots = 0;  // --engine llama.cpp: LlamaCppOptions::recurrent_snapshots
    bool recurrent_snapshots_given = false;
    int gpu_layers = 0;                    // --engine llama.cpp: -ngl (LlamaCppOptions::gpu_layers)
    std::vector<std::string> rpc_servers;  // --engine llama.cpp: --rpc (LlamaCppOptions::rpc_servers)
    std::optional<FlashAttention> flash_attention;  // --engine llama.cpp: -fa
    bool block_rule = true;                // --rule block (the default): BlockVerification, else token-wise rejection
    bool rule_given = false;
    std::size_t lookup_min = 1;
    std::size_t lookup_max = 3;
    bool ignore_eos = false;
    bool autoregressive = false;
    bool check_autoregressive = false;
    bool quiet = false;
    bool help = false;
    std::vector<std::string> reverse_prompts;  // -r: stop strings
    bool chat = false;                         // --chat: -p is a user message in the target's chat template
    std::optional<std::string> system_prompt;  // -sys, with --chat
    std::optional<std::string> chat_template;  // --chat-template: a family name instead of the file's template
    std::optional<std::string> grammar_regex;  // --grammar-regex: the output matches this pattern
    std::optional<std::size_t> logprobs;       // --logprobs N: each token's logprob and its row's top N
    cli::Engine engine = cli::Engine::specdec;
};

using cli::UsageError;
using GenerateFlag = cli::FlagSpec<Options>;

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
    if constexpr (std::is_floating_point_v<T>) return static_cast<T>(cli::parse_non_negative(flag, text, ""));
    else return static_cast<T>(cli::parse_count(flag, text));
}

// A finite number of either sign (presence and frequency penalties).
double parse_signed(std::string_view flag, std::string_view text) {
    const std::string copy(text);
    char* end = nullptr;
    const double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value))
        throw UsageError(std::string(flag) + ": '" + copy + "' is not a finite number");
    return value;
}

// llama.cpp's syntax: ID+BIAS, ID-BIAS, ID-inf (a ban).
specdec::LogitBias parse_logit_bias(std::string_view flag, std::string_view text) {
    const std::size_t sign = text.find_first_of("+-");
    if (sign == std::string_view::npos || sign == 0)
        throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not ID+BIAS or ID-BIAS (e.g. 15043+1, 2-inf)");
    const auto token = static_cast<specdec::Token>(cli::parse_count(flag, text.substr(0, sign)));
    const std::string_view magnitude = text.substr(sign + 1);
    const bool negative = text[sign] == '-';
    if (magnitude == "inf") {
        if (!negative) throw UsageError(std::string(flag) + ": +inf is not a bias (use ID-inf to ban a token)");
        return {token, -std::numeric_limits<float>::infinity()};
    }
    const double bias = cli::parse_non_negative(flag, magnitude, "the bias");
    return {token, static_cast<float>(negative ? -bias : bias)};
}

// Every flag of specdec-generate: name, value, help and effect.
const std::vector<GenerateFlag>& generate_flags() {
    using V = std::string_view;
    static const std::vector<GenerateFlag> flags{
        {{"-m", "--model"}, "FILE", "target model (GGUF: llama, qwen2, mistral; with --engine llama.cpp any that llama.cpp loads)",
         [](Options& o, V, V v) { o.target = v; }},
        {{"-md", "--model-draft"}, "FILE", "draft model sharing the target's vocabulary; without it, prompt lookup drafts",
         [](Options& o, V, V v) { o.draft = v; }},
        {{"-p", "--prompt"}, "TEXT", "prompt text", [](Options& o, V, V v) { o.prompt = v; }},
        {{"-r", "--reverse-prompt"}, "TEXT",
         "stop right after TEXT appears in the output (matched across tokens); repeatable",
         [](Options& o, V f, V v) {
             if (v.empty()) throw UsageError(std::string(f) + ": expected a non-empty text");
             o.reverse_prompts.emplace_back(v);
         }},
        {{"--chat"}, "",
         "-p is a user message: format it with the target's chat template\n"
         "(tokenizer.chat_template; specdec: ChatML, Llama 3, Mistral; --engine llama.cpp:\n"
         "llama.cpp's llama_chat_apply_template) and stop at the end of the turn",
         [](Options& o, V, V) { o.chat = true; }},
        {{"--chat-template"}, "NAME",
         "with --chat, the template family instead of the file's: chatml, llama3, mistral-v1,\n"
         "mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken (--engine llama.cpp:\n"
         "any of llama.cpp's built-in names)",
         [](Options& o, V, V v) { o.chat_template = std::string(v); }},
        {{"-sys", "--system-prompt"}, "TEXT", "with --chat, a system message before the user's",
         [](Options& o, V, V v) { o.system_prompt = std::string(v); }},
        {{"-n", "--n-predict"}, "N", "tokens to generate (default 128)",
         [](Options& o, V f, V v) { o.new_tokens = parse_number<std::size_t>(f, v); }},
        {{"--temp"}, "T", "temperature, 0 = greedy (default 0.8)",
         [](Options& o, V f, V v) { o.temperature = parse_number<double>(f, v); }},
        {{"--top-k"}, "N", "0 = off (default 40)", [](Options& o, V f, V v) { o.top_k = parse_number<std::size_t>(f, v); }},
        {{"--top-p"}, "P", "1 = off (default 0.95)", [](Options& o, V f, V v) { o.top_p = parse_number<double>(f, v); }},
        {{"--min-p"}, "P", "0 = off (default 0.05)", [](Options& o, V f, V v) { o.min_p = parse_number<double>(f, v); }},
        {{"--repeat-penalty"}, "R", "repetition penalty over the last --repeat-last-n tokens, 1 = off (default 1)",
         [](Options& o, V f, V v) { o.repeat_penalty = parse_number<double>(f, v); }},
        {{"--repeat-last-n"}, "N", "the penalties' window in tokens, prompt included (default 64)",
         [](Options& o, V f, V v) { o.repeat_last_n = parse_number<std::size_t>(f, v); }},
        {{"--presence-penalty"}, "X", "subtracted from every token in the window, 0 = off (default 0)",
         [](Options& o, V f, V v) { o.presence_penalty = parse_signed(f, v); }},
        {{"--frequency-penalty"}, "X", "subtracted per occurrence in the window, 0 = off (default 0)",
         [](Options& o, V f, V v) { o.frequency_penalty = parse_signed(f, v); }},
        {{"-l", "--logit-bias"}, "ID(+|-)BIAS", "add BIAS to token ID's logit, e.g. 15043+1 or 2-inf (a ban); repeatable",
         [](Options& o, V f, V v) { o.logit_bias.push_back(parse_logit_bias(f, v)); }},
        {{"--sampler-order"}, "llama.cpp|hf",
         "stage order: llama.cpp (default: bias, penalties, top-k, top-p, min-p, temperature) or hf\n"
         "(Hugging Face: bias, penalties, temperature, top-k, top-p, min-p)",
         [](Options& o, V f, V v) {
             if (v == "llama.cpp") {
                 o.chain = specdec::kLlamaCppChain;
             } else if (v == "hf") {
                 o.chain = specdec::kHuggingFaceChain;
             } else {
                 throw cli::UsageError(std::string(f) + " " + std::string(v) + ": expected llama.cpp or hf");
             }
         }},
        {{"-s", "--seed"}, "N", "sampling seed (default: random, printed at the end)",
         [](Options& o, V f, V v) { o.seed = parse_number<std::uint64_t>(f, v); }},
        {{"-k", "--draft"}, "N|auto",
         "tokens drafted per target pass; auto (the default): the decoder chooses each\n"
         "step's length from the acceptance and costs it measures (specdec::AutoLength);\n"
         "a number N fixes it, which makes a --seed reproduce its output exactly",
         [](Options& o, V f, V length) {
             o.auto_length = length == "auto";
             if (!o.auto_length) o.draft_tokens = parse_number<std::size_t>(f, length);
         }},
        {{"--draft-max"}, "N", "with -k auto, the most tokens it drafts per pass (default 8); else as -k N",
         [](Options& o, V f, V v) {
             o.draft_tokens = parse_number<std::size_t>(f, v);
             o.draft_max_given = true;
         }},
        {{"--tree"}, "SHAPE|auto",
         "verify a token tree each step instead of a chain (specdec::TreeSpeculativeDecoder):\n"
         "a shape such as 3x2x1 (3 candidates, 2 under each, 1 under those), or auto for\n"
         "the shape learned from acceptance and costs (AutoTree); -k does not apply",
         [](Options& o, V f, V v) {
             if (v != "auto") {
                 try {
                     (void)specdec::TreeShape::parse(std::string(v));
                 } catch (const specdec::Error& error) {
                     throw UsageError(std::string(f) + ": " + error.what());
                 }
             }
             o.tree = std::string(v);
         }},
        {{"--lookup-ngram"}, "MIN,MAX", "n-gram sizes of prompt lookup (default 1,3)",
         [](Options& o, V f, V range) {
             const std::size_t comma = range.find(',');
             if (comma == std::string_view::npos)
                 throw UsageError("--lookup-ngram: '" + std::string(range) + "' is not MIN,MAX");
             o.lookup_min = parse_number<std::size_t>(f, range.substr(0, comma));
             o.lookup_max = parse_number<std::size_t>(f, range.substr(comma + 1));
         }},
        {{"-t", "--threads"}, "N", "threads (default: all cores)",
         [](Options& o, V f, V v) { o.threads = parse_number<std::size_t>(f, v); }},
        {{"-c", "--ctx-size"}, "N", "cap the context (default: the target's)",
         [](Options& o, V f, V v) { o.context = parse_number<std::size_t>(f, v); }},
        {{"--engine"}, "specdec|llama.cpp",
         "what runs the models: specdec's own CPU models (default), or llama.cpp\n"
         "through specdec's adapter (specdec still drafts, verifies and samples)",
         [](Options& o, V f, V v) { o.engine = cli::parse_engine(f, v); }},
        {{"--recurrent-snapshots"}, "N",
         "--engine llama.cpp, a recurrent or hybrid model that llama.cpp can roll back\n"
         "within a pass (LFM2, Nemotron-H, Qwen3.5, ...): keep N states a pass, so that a\n"
         "verification pass rolls back without a replay (default 0: checkpoint and replay)",
         [](Options& o, V f, V v) {
             o.recurrent_snapshots = parse_number<std::size_t>(f, v);
             o.recurrent_snapshots_given = true;
         }},
        {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N|all",
         "--engine llama.cpp: layers offloaded to llama.cpp's devices (default 0: none; with --rpc, all)",
         [](Options& o, V f, V v) { o.gpu_layers = cli::parse_gpu_layers(f, v); }},
        {{"--rpc"}, "HOST:PORT,...", "--engine llama.cpp: ggml-rpc-server processes that take the layers",
         [](Options& o, V f, V v) { o.rpc_servers = cli::parse_rpc_servers(f, v); }},
        {{"-fa", "--flash-attn"}, "on|off|auto", "--engine llama.cpp: flash attention (default auto, llama.cpp's)",
         [](Options& o, V f, V v) {
             if (v == "on") o.flash_attention = FlashAttention::on;
             else if (v == "off") o.flash_attention = FlashAttention::off;
             else if (v == "auto") o.flash_attention = FlashAttention::automatic;
             else throw UsageError(std::string(f) + " " + std::string(v) + ": expected on, off or auto");
         }},
        {{"--rule"}, "token|block",
         "how a chain of drafts is verified: block verification (default; at least as\n"
         "many drafts kept in expectation) or token-wise rejection; both exact",
         [](Options& o, V f, V v) {
             if (v != "token" && v != "block") throw UsageError(std::string(f) + " " + std::string(v) + ": expected token or block");
             o.block_rule = v == "block";
             o.rule_given = true;
         }},
        {{"--grammar-regex"}, "PATTERN",
         "the output matches PATTERN (anchored at both ends; the syntax of docs/constraints.md),\n"
         "e.g. '\\{\"name\": \"[a-z]+\"\\}'; tokens it forces are drafted for free",
         [](Options& o, V f, V v) {
             if (v.empty()) throw UsageError(std::string(f) + ": an empty pattern allows no text");
             o.grammar_regex = std::string(v);
         }},
        {{"--logprobs"}, "N",
         "after the text, each generated token's logprob and its N most probable\n"
         "alternatives (0: the token's alone), from the distribution it was sampled from",
         [](Options& o, V f, V v) { o.logprobs = parse_number<std::size_t>(f, v); }},
        {{"--ignore-eos"}, "", "do not stop at the end-of-sequence token", [](Options& o, V, V) { o.ignore_eos = true; }},
        {{"--autoregressive"}, "", "decode with the target alone (the baseline)",
         [](Options& o, V, V) { o.autoregressive = true; }},
        {{"--check-autoregressive"}, "", "afterwards decode with the target alone and exit 1 if the tokens differ",
         [](Options& o, V, V) { o.check_autoregressive = true; }},
        {{"--quiet"}, "", "print the statistics only", [](Options& o, V, V) { o.quiet = true; }},
        {{"-h", "--help"}, "", "this text", [](Options& o, V, V) { o.help = true; }},
    };
    return flags;
}

std::string usage_text() {
    return "usage: specdec-generate -m TARGET.gguf [-md DRAFT.gguf] -p PROMPT [options]\n" +
           cli::flag_help<Options>(generate_flags()) +
           "\nexit status: 0 success, 1 an error or (--check-autoregressive) different tokens, 2 bad command line\n";
}

Options parse(int argc, char** argv) {
    Options o;
    const std::vector<std::string_view> arguments(argv + 1, argv + argc);
    cli::parse_flags<Options>(generate_flags(), arguments, o);
    if (o.help) return o;
    if (o.target.empty()) throw UsageError("no target model: expected -m TARGET.gguf");
    if (o.prompt.empty()) throw UsageError("no prompt: expected -p TEXT");
    if (o.auto_length && !o.draft_max_given) o.draft_tokens = 8;
    if (o.recurrent_snapshots_given && o.engine != cli::Engine::llama_cpp)
        throw UsageError("--recurrent-snapshots is a setting of llama.cpp's memory: expected --engine llama.cpp");
    if ((o.gpu_layers != 0 || !o.rpc_servers.empty() || o.flash_attention) && o.engine != cli::Engine::llama_cpp)
        throw UsageError("-ngl, --rpc and -fa are settings of llama.cpp: expected --engine llama.cpp");
    if (o.block_rule && o.rule_given && o.tree) throw UsageError("--rule applies to a chain of drafts; a --tree is verified by recursive rejection");
    if (o.autoregressive && o.check_autoregressive) throw UsageError("--autoregressive and --check-autoregressive exclude each other");
    if (o.tree && o.autoregressive) throw UsageError("--tree and --autoregressive exclude each other");
    if (o.chat_template && o.engine == cli::Engine::specdec) {
        try {
            (void)specdec::text::ChatTemplate::from_name(*o.chat_template);
        } catch (const specdec::Error& error) {
            throw UsageError(std::string("--chat-template: ") + error.what());
        }
    }
    if (o.system_prompt && !o.chat) throw UsageError("-sys is a chat message: expected --chat");
    if (o.chat_template && !o.chat) throw UsageError("--chat-template formats a chat: expected --chat");
    if (o.grammar_regex && o.tree)
        throw UsageError("--grammar-regex constrains a chain of drafts; a --tree cannot be constrained: drop --tree");
    if (o.logprobs && o.tree) throw UsageError("--logprobs reads a chain's verification rows; a --tree reports none: drop --tree");
    if (o.grammar_regex && o.ignore_eos)
        throw UsageError("--grammar-regex ends the text at the end-of-generation token when the pattern is complete: drop --ignore-eos");
    if (!o.reverse_prompts.empty() && o.check_autoregressive)
        throw UsageError("--check-autoregressive compares whole outputs: drop -r");
    if (o.check_autoregressive && o.temperature != 0.0)
        throw UsageError("--check-autoregressive compares token for token, which only greedy decoding guarantees: expected --temp 0");
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
template <class Target, class Draft, class OnToken>
specdec::GenerationResult speculate(Target& target, Draft& draft, const specdec::DecodingOptions& options, bool auto_length,
                                    const std::vector<specdec::Token>& prompt, OnToken& on_token, bool block_rule = true) {
    const auto run = [&](auto rule, auto policy) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options, rule, policy);
        return decoder.generate(prompt, on_token);
    };
    if (block_rule) {
        return auto_length ? run(specdec::BlockVerification{}, specdec::AutoLength{})
                           : run(specdec::BlockVerification{}, specdec::FixedLength{});
    }
    return auto_length ? run(specdec::TokenwiseRejection{}, specdec::AutoLength{})
                       : run(specdec::TokenwiseRejection{}, specdec::FixedLength{});
}

// Tree speculative decoding with a fixed shape or AutoTree.
template <class Target, class Draft, class OnToken>
specdec::GenerationResult speculate_tree(Target& target, Draft& draft, const specdec::DecodingOptions& options,
                                         const std::string& tree, const std::vector<specdec::Token>& prompt,
                                         OnToken& on_token) {
    if (tree == "auto") {
        specdec::TreeSpeculativeDecoder<Target, Draft, specdec::RecursiveRejection, specdec::AutoTree> decoder(
            specdec::target(target), specdec::draft(draft), options, {}, specdec::AutoTree{});
        return decoder.generate(prompt, on_token);
    }
    specdec::TreeSpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options,
                                            specdec::TreeShape::parse(tree));
    return decoder.generate(prompt, on_token);
}

// The most leaves a tree of --tree can have: a shape's nodes bound its
// leaves, AutoTree's at most its max_nodes.
std::size_t tree_leaves_bound(const std::string& tree) {
    return tree == "auto" ? specdec::AutoTree::Options{}.max_nodes : specdec::TreeShape::parse(tree).size();
}

// The generated text through specdec's text layer (specdec/text/): pieces as
// they are decided, held back while they could start a reverse prompt, which
// is printed and ends generation.
// Vocabulary: specdec::Tokenizer, or llama.cpp's (text::LlamaCppVocabulary).
template <class Vocabulary>
class StreamedText {
public:
    StreamedText(const Vocabulary& vocabulary, std::vector<std::string> reverse_prompts,
                 std::span<const specdec::Token> prompt, std::string shown_prompt)
        : vocabulary_(vocabulary), stream_(vocabulary, {.stop_strings = std::move(reverse_prompts), .include_stop = true}, prompt),
          shown_prompt_(std::move(shown_prompt)) {}

    std::string push(specdec::Token token) {
        std::string out;
        if (!stream_.ended()) (void)stream_.push(token, [&](const specdec::text::TextPiece& piece) { out += piece.text; });
        return out;
    }
    std::string flush() {
        std::string out;
        stream_.finish([&](const specdec::text::TextPiece& piece) { out += piece.text; });
        return out;
    }
    [[nodiscard]] bool stopped() const { return stream_.end() == specdec::text::TextEnd::stop_string; }
    // What is printed before the generated text: the prompt as formatted (--chat) or as given.
    [[nodiscard]] std::string prompt_text(const std::string&) const { return shown_prompt_; }
    [[nodiscard]] const Vocabulary& vocabulary() const { return vocabulary_; }

private:
    const Vocabulary& vocabulary_;
    specdec::text::TextStream<Vocabulary> stream_;
    std::string shown_prompt_;
};

// A token's text for a table: quoted; control bytes and bytes that are not
// part of a whole UTF-8 character (a piece of a split character) escaped.
template <class Vocabulary>
std::string quoted_piece(const Vocabulary& vocabulary, specdec::Token token) {
    const std::string_view text(vocabulary.token_text(token));
    std::string out = "'";
    for (std::size_t i = 0; i < text.size();) {
        const specdec::detail::Utf8Char character = specdec::detail::next_utf8_char(text, i);
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte == '\n') {
            out += "\\n";
        } else if (!character.valid || byte < 0x20 || byte == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            out += escaped;
        } else {
            if (byte == '\'' || byte == '\\') out += '\\';
            out.append(text.substr(i, character.length));
        }
        i += character.length;
    }
    return out + "'";
}

// --logprobs: one line per generated token (its id, text and logprob, then
// its row's most probable tokens), to stderr after the text.
template <class Vocabulary>
void print_logprobs(const Vocabulary& vocabulary, const std::vector<specdec::TokenLogprob>& logprobs) {
    std::fprintf(stderr, "logprobs: token, logprob | the row's most probable tokens\n");
    for (std::size_t i = 0; i < logprobs.size(); ++i) {
        const specdec::TokenLogprob& entry = logprobs[i];
        std::fprintf(stderr, "%5zu %6d %-16s %9.4f", i, entry.token, quoted_piece(vocabulary, entry.token).c_str(),
                     static_cast<double>(entry.logprob));
        if (!entry.top.empty()) std::fprintf(stderr, " |");
        for (const specdec::TopLogprob& top : entry.top)
            std::fprintf(stderr, " %s %.4f", quoted_piece(vocabulary, top.token).c_str(), static_cast<double>(top.logprob));
        std::fprintf(stderr, "\n");
    }
}

template <class Text>
std::string stop_description(const Text& text, specdec::StopReason reason) {
    if constexpr (requires { text.stopped(); }) {
        if (text.stopped()) return "reverse prompt";
    }
    return std::string(specdec::to_string(reason));
}

// Generates from loaded models, whichever engine runs them: streams the text
// (Text: push(token) -> the newly complete text, flush()), prints the
// statistics and, with --check-autoregressive, compares with the target alone.
template <class Model, class Text>
int generate(const Options& o, Model& target, Model* draft, const std::vector<specdec::Token>& prompt,
             std::vector<specdec::Token> stop_tokens, Text& text) {
    const std::uint64_t seed = o.seed.value_or(std::random_device{}());
    specdec::DecodingOptions options{
        .draft_tokens = o.draft_tokens,
        .sampling = {.temperature = o.temperature,
                     .top_k = o.top_k,
                     .top_p = o.top_p,
                     .min_p = o.min_p,
                     .chain = o.chain,
                     .repeat_penalty = o.repeat_penalty,
                     .presence_penalty = o.presence_penalty,
                     .frequency_penalty = o.frequency_penalty,
                     .penalty_last_n = o.repeat_last_n,
                     .logit_bias = o.logit_bias},
        .seed = seed,
        .max_new_tokens = o.new_tokens,
    };
    std::optional<specdec::RegexConstraint> grammar;
    if (o.grammar_regex) {
        // Ends only at an end-of-generation token, once the text matches the whole pattern.
        grammar.emplace(*o.grammar_regex, specdec::vocabulary_token_texts(text.vocabulary()), stop_tokens);
        options.sampling.constraint = &*grammar;
    }
    if (o.logprobs) options.logprobs = {.enabled = true, .top_n = *o.logprobs};
    if (!o.ignore_eos) options.stop_tokens = std::move(stop_tokens);

    // Returns false when the text says generation ends (a reverse prompt).
    const auto print = [&](specdec::Token token) {
        const std::string piece = text.push(token);
        if (!o.quiet) {
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);
        }
        if constexpr (requires { text.stopped(); }) {
            return !text.stopped();
        } else {
            return true;
        }
    };
    if (!o.quiet) {
        std::fputs(text.prompt_text(o.prompt).c_str(), stdout);
        std::fflush(stdout);
    }
    specdec::GenerationResult result;
    const char* method = "autoregressive";
    if (o.autoregressive) {
        specdec::AutoregressiveDecoder decoder(target, options);
        result = decoder.generate(prompt, print);
    } else if (draft != nullptr) {
        method = o.tree ? "tree speculative (draft model)" : "speculative (draft model)";
        result = o.tree ? speculate_tree(target, *draft, options, *o.tree, prompt, print)
                        : speculate(target, *draft, options, o.auto_length, prompt, print, o.block_rule);
    } else {
        method = o.tree ? "tree speculative (prompt lookup)" : "speculative (prompt lookup)";
        specdec::PromptLookupDrafter lookup({.min_ngram = o.lookup_min, .max_ngram = o.lookup_max});
        result = o.tree ? speculate_tree(target, lookup, options, *o.tree, prompt, print)
                        : speculate(target, lookup, options, o.auto_length, prompt, print, o.block_rule);
    }
    if (!o.quiet) std::printf("%s\n", text.flush().c_str());

    const std::string length = o.tree ? "tree " + *o.tree
                                      : (o.auto_length ? "auto, at most " : "") + std::to_string(o.draft_tokens);
    std::fprintf(stderr, "\nengine %s, target %s, %s, draft length %s, temperature %g, seed %llu, stopped by %s\n",
                 std::string(cli::to_string(o.engine)).c_str(), o.target.filename().string().c_str(),
                 draft != nullptr ? o.draft.filename().string().c_str() : "no draft model", length.c_str(), o.temperature,
                 static_cast<unsigned long long>(seed), stop_description(text, result.stop_reason).c_str());
    print_stats(method, result.stats, !o.autoregressive);
    if (o.logprobs) print_logprobs(text.vocabulary(), result.logprobs);

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

// --chat: -sys as the system message, -p as the user's.
std::vector<specdec::text::ChatMessage> chat_messages(const Options& o) {
    std::vector<specdec::text::ChatMessage> messages;
    if (o.system_prompt) messages.push_back({"system", *o.system_prompt});
    messages.push_back({"user", o.prompt});
    return messages;
}

// The library's own CPU models and tokenizer.
int run_specdec(const Options& o) {
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
    std::string prompt_text = o.prompt;
    std::vector<specdec::Token> prompt;
    if (o.chat) {
        const std::vector<specdec::text::ChatMessage> messages = chat_messages(o);
        const specdec::text::ChatTemplate chat = o.chat_template
                                                     ? specdec::text::ChatTemplate::from_name(*o.chat_template)
                                                     : specdec::text::ChatTemplate::from_gguf(target_file);
        prompt_text = chat.apply(messages);
        prompt = tokenizer.encode(prompt_text, tokenizer.add_bos_by_default(), false, specdec::SpecialTokens::parse);
    } else {
        prompt = tokenizer.encode(o.prompt);
    }
    // Every end-of-generation token (EOS, EOT, <|im_end|>, ...) stops, as in llama.cpp.
    StreamedText<specdec::Tokenizer> text(tokenizer, o.reverse_prompts, prompt, prompt_text);
    return generate(o, target, draft ? &*draft : nullptr, prompt, tokenizer.end_of_generation(), text);
}

#ifdef SPECDEC_WITH_LLAMA_CPP
// llama.cpp runs the models (specdec/adapters/llama_cpp.hpp); the decoding is specdec's.
int run_llama_cpp(const Options& o) {
    const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
    specdec::LlamaCppOptions model_options;
    model_options.max_context = o.context;  // 0: the model's trained context
    model_options.threads = static_cast<int>(o.threads != 0 ? o.threads : hardware);
    model_options.threads_batch = model_options.threads;
    model_options.recurrent_snapshots = o.recurrent_snapshots;
    if (o.tree) model_options.tree_leaves = tree_leaves_bound(*o.tree);
    model_options.gpu_layers = o.gpu_layers;
    model_options.rpc_servers = o.rpc_servers;
    specdec::LlamaCppParams params;
    if (o.flash_attention) {
        const FlashAttention fa = *o.flash_attention;
        params.context.flash_attn_type = fa == FlashAttention::on    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                         : fa == FlashAttention::off ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
    }
    specdec::LlamaCppModel target = specdec::LlamaCppModel::from_gguf(o.target.string(), model_options, params);
    std::optional<specdec::LlamaCppModel> draft;
    if (!o.draft.empty() && !o.autoregressive) {
        draft.emplace(specdec::LlamaCppModel::from_gguf(o.draft.string(), model_options, params));
        specdec::check_same_vocabulary(target, *draft);
    }
    std::string prompt_text = o.prompt;
    std::vector<specdec::Token> prompt;
    if (o.chat) {
        // llama.cpp's own template code, with the file's template or the named one.
        const std::vector<specdec::text::ChatMessage> messages = chat_messages(o);
        const std::optional<std::string> chat_template =
            o.chat_template ? o.chat_template : specdec::text::llama_cpp_chat_template(target.model());
        if (!chat_template) {
            throw specdec::Error(o.target.string() + " has no tokenizer.chat_template: pass --chat-template NAME (e.g. chatml)");
        }
        prompt_text = specdec::text::llama_cpp_apply_chat(*chat_template, messages);
        prompt = target.tokenize(prompt_text, target.add_bos(), /*parse_special=*/true);
    } else {
        // BOS where the model's tokenizer asks for it, as llama.cpp's own tools tokenise.
        prompt = target.tokenize(o.prompt, /*add_bos=*/true);
    }
    // Each token's piece once (llama_token_to_piece), streamed as llama.cpp's tools print it.
    const specdec::text::LlamaCppVocabulary vocabulary(target.vocabulary());
    StreamedText<specdec::text::LlamaCppVocabulary> text(vocabulary, o.reverse_prompts, prompt, prompt_text);
    // Every end-of-generation token (EOS, EOT, ...) stops, as in llama.cpp.
    return generate(o, target, draft ? &*draft : nullptr, prompt, target.stop_tokens(), text);
}
#endif

int run(const Options& o) {
    if (o.engine == cli::Engine::specdec) return run_specdec(o);
#ifdef SPECDEC_WITH_LLAMA_CPP
    return run_llama_cpp(o);
#else
    throw cli::llama_cpp_missing("specdec-generate");
#endif
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Options options = parse(argc, argv);
        if (options.help) {
            std::printf("%s", usage_text().c_str());
            return 0;
        }
        return run(options);
    } catch (const UsageError& error) {
        std::fprintf(stderr, "specdec-generate: %s\n", cli::one_line(error.what()).c_str());
        return 2;
    } catch (const specdec::Error& error) {
        std::fprintf(stderr, "specdec-generate: %s\n", error.what());
        return 1;
    }
}
