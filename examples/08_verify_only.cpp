// 08: an engine that drafts by itself and uses specdec only to verify.
// The engine below has its own drafting: a prompt lookup (the tokens that
// followed the last earlier occurrence of the sequence's last two tokens,
// proposed as point masses) and, when that finds nothing, its own draft
// model run and sampled with its own random generator (proposed with the
// rows q it sampled from). Each step it hands the drafts to
// specdec::verify_drafts, which runs the target's pass, applies exact
// rejection sampling, rolls the target's cache back and returns the tokens to
// commit. At temperature 0 the output must be the target's greedy output;
// the program checks that against plain autoregressive decoding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/models/synthetic.hpp>

using specdec::Token;

class SelfDraftingEngine {
public:
    SelfDraftingEngine(specdec::LlamaModel& target, specdec::LlamaModel& draft, specdec::SamplingOptions sampling,
                       std::uint64_t seed)
        : target_(target), draft_(draft), sampling_(sampling), verifier_rng_{seed}, draft_rng_(seed ^ 0x5eed) {}

    std::vector<Token> generate(const std::vector<Token>& prompt, std::size_t new_tokens, std::size_t k_max) {
        target_.truncate(0);
        draft_.truncate(0);
        draft_cached_ = 0;
        std::vector<Token> sequence = prompt;
        std::vector<Token> pending = prompt;  // committed tokens the target's cache lacks
        std::vector<Token> out;
        while (out.size() < new_tokens) {
            const std::size_t k = std::min(k_max, new_tokens - out.size() - 1);
            bool from_model = false;
            specdec::DraftProposal drafts = specdec::point_mass_drafts(lookup(sequence, k));
            if (drafts.size() == 0 && k > 0) {
                drafts = sample_from_draft_model(sequence, k);
                from_model = true;
            }
            // The only specdec call: one target pass over pending + drafts, the exact rule, the rollback.
            const specdec::VerifyResult verdict =
                specdec::verify_drafts(target_, pending, drafts, sampling_, verifier_rng_);
            if (from_model) draft_cached_ = std::min(draft_cached_, sequence.size() + verdict.accepted);
            (from_model ? model_drafts_ : lookup_drafts_) += drafts.size();
            accepted_ += verdict.accepted;
            ++steps_;
            sequence.insert(sequence.end(), verdict.tokens.begin(), verdict.tokens.end());
            out.insert(out.end(), verdict.tokens.begin(), verdict.tokens.end());
            pending.assign(1, verdict.next_token);
        }
        return out;
    }

    void report(const char* label, std::size_t tokens) const {
        std::printf("%s: %zu tokens in %zu target passes; drafts: %zu by lookup, %zu by the draft model, %zu accepted\n",
                    label, tokens, steps_, lookup_drafts_, model_drafts_, accepted_);
    }

private:
    // Prompt lookup: the continuation of the latest earlier occurrence of the last two tokens.
    static std::vector<Token> lookup(const std::vector<Token>& history, std::size_t k) {
        const std::size_t n = history.size();
        if (n < 3 || k == 0) return {};
        for (std::size_t j = n - 2; j-- > 0;) {
            if (history[j] == history[n - 2] && history[j + 1] == history[n - 1]) {
                const std::size_t end = std::min(n, j + 2 + k);
                return {history.begin() + static_cast<std::ptrdiff_t>(j + 2), history.begin() + static_cast<std::ptrdiff_t>(end)};
            }
        }
        return {};
    }

    // k tokens from the draft model, each sampled from its processed row q
    // (the verifier's SamplingOptions applied to the draft's logits) with the
    // engine's own generator; the rows go to the verifier with the tokens.
    specdec::DraftProposal sample_from_draft_model(const std::vector<Token>& history, std::size_t k) {
        const std::size_t vocab = draft_.vocab_size();
        std::vector<Token> tokens;
        std::vector<float> q_rows;
        std::vector<float> q(vocab);
        draft_.truncate(draft_cached_);
        specdec::LogitsView rows = draft_.forward(std::span<const Token>(history).subspan(draft_cached_));
        std::uniform_real_distribution<double> uniform(0.0, 1.0);
        for (std::size_t i = 0; i < k; ++i) {
            specdec::logits_to_distribution(rows.last_row(), sampling_, q);
            const Token token = specdec::sample_from_distribution(q, uniform(draft_rng_));
            tokens.push_back(token);
            q_rows.insert(q_rows.end(), q.begin(), q.end());
            if (i + 1 < k) rows = draft_.forward(std::span<const Token>(&tokens.back(), 1));
        }
        draft_cached_ = history.size() + k - 1;  // the last draft was never fed
        return specdec::drafts_with_q(tokens, q_rows, vocab);
    }

    specdec::LlamaModel& target_;
    specdec::LlamaModel& draft_;
    specdec::SamplingOptions sampling_;
    specdec::CounterRng verifier_rng_;
    std::mt19937_64 draft_rng_;  // the engine's own: independent of the verifier's stream
    std::size_t draft_cached_ = 0;
    std::size_t steps_ = 0, lookup_drafts_ = 0, model_drafts_ = 0, accepted_ = 0;
};

int main() {
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = "tiny"});
    const std::vector<Token> prompt{1, 17, 42, 7, 99, 5, 17, 42, 7, 99};
    constexpr std::size_t kTokens = 48, kDrafts = 4;

    // Greedy: the engine's tokens must be the target's own greedy tokens.
    const specdec::SamplingOptions greedy{.temperature = 0.0};
    SelfDraftingEngine greedy_engine(pair.target, pair.draft, greedy, 1);
    const std::vector<Token> engine_tokens = greedy_engine.generate(prompt, kTokens, kDrafts);
    greedy_engine.report("greedy", engine_tokens.size());
    const auto plain =
        specdec::AutoregressiveDecoder(pair.target, {.sampling = greedy, .max_new_tokens = kTokens}).generate(prompt);
    const bool identical = plain.tokens == engine_tokens;
    std::printf("greedy: %s to autoregressive decoding of the target\n", identical ? "identical" : "DIFFERENT");

    // Sampled: exact samples of the target's distribution at T = 0.8.
    SelfDraftingEngine sampled_engine(pair.target, pair.draft, {.temperature = 0.8}, 7);
    const std::vector<Token> sampled = sampled_engine.generate(prompt, kTokens, kDrafts);
    sampled_engine.report("T = 0.8", sampled.size());
    return identical ? 0 : 1;
}
