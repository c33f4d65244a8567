#pragma once
// SpeculativeDecoder: a drafter proposes k tokens, the target scores all of
// them (plus the pending last token) in ONE forward pass, the acceptance rule
// keeps a prefix and supplies one more token, and both KV caches are rolled
// back to the committed sequence. The output has exactly the distribution of
// sampling from the processed target alone (and at temperature 0, exactly the
// target's greedy output).
#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/verification.hpp"

namespace specdec {

namespace detail {

// A Drafter is used in place; a bare draft model is wrapped in a ModelDrafter.
template <class Draft>
struct DrafterFor {
    using type = ModelDrafter<Draft>;
    static type make(Draft& draft) { return type(draft); }
};
template <class Draft>
    requires Drafter<Draft>
struct DrafterFor<Draft> {
    struct Reference {
        Draft* drafter;
        DraftProposal propose(const DraftRequest& request) { return drafter->propose(request); }
        void reset() { drafter->reset(); }
        Draft& get() { return *drafter; }
    };
    using type = Reference;
    static type make(Draft& draft) { return type{&draft}; }
};

template <class D>
concept HasVocabSize = requires(const D& d) {
    { d.vocab_size() } -> std::convertible_to<std::size_t>;
};

}  // namespace detail

// Draft: a Drafter, or a CausalLM draft model (wrapped in a ModelDrafter).
// Rule: the acceptance rule used at temperature > 0 (temperature 0 always uses
// greedy verification).
template <class Draft, CausalLM Target, AcceptanceRule Rule = TokenwiseRejection>
    requires(Drafter<Draft> || CausalLM<Draft>)
class SpeculativeDecoder {
public:
    SpeculativeDecoder(Draft& draft, Target& target, DecodingOptions options = {}, Rule rule = {})
        : drafter_(detail::DrafterFor<Draft>::make(draft)),
          target_(target),
          options_(std::move(options)),
          rule_(std::move(rule)) {
        validate(options_, /*speculative=*/true);
        if constexpr (detail::HasVocabSize<Draft>) {
            if (draft.vocab_size() != target.vocab_size()) {
                std::ostringstream message;
                message << "vocabulary mismatch: the draft has " << draft.vocab_size() << " tokens, the target has "
                        << target.vocab_size() << "; draft and target must share one tokenizer";
                throw Error(message.str());
            }
        }
    }

    [[nodiscard]] const DecodingOptions& options() const { return options_; }

    template <class OnToken = detail::IgnoreTokens>
    GenerationResult generate(std::span<const Token> prompt, OnToken&& on_token = {}) {
        const auto start = detail::Clock::now();
        Target& target = target_.model();
        detail::check_prompt(prompt, target.vocab_size(), target.context_length());
        GenerationResult result;
        GenerationStats& stats = result.stats;
        stats.prompt_tokens = prompt.size();
        stats.proposed_at_position.assign(options_.draft_tokens, 0);
        stats.accepted_at_position.assign(options_.draft_tokens, 0);
        detail::TokenSink sink(options_, on_token, result);
        const CounterRng rng{options_.seed};
        std::vector<Token> history(prompt.begin(), prompt.end());
        std::vector<Token> feed;
        target_.reset();
        drafter_.reset();

        bool running = true;
        while (running) {
            const std::size_t committed = history.size();
            const std::size_t context = target.context_length();
            if (committed > context) {
                sink.finish(StopReason::context_full);
                break;
            }
            // The target's cache will hold committed + k positions after the pass, and
            // a step emits at most k + 1 tokens: draft no more than either allows.
            const std::size_t k_max = std::min({options_.draft_tokens, context - committed, sink.remaining() - 1});

            auto draft_start = detail::Clock::now();
            DraftProposal draft;
            if (k_max > 0) draft = drafter_.propose(DraftRequest{history, k_max, options_.sampling, rng});
            stats.draft_seconds += detail::seconds_since(draft_start);
            if (draft.size() > k_max) {
                std::ostringstream message;
                message << "the drafter proposed " << draft.size() << " tokens when at most " << k_max
                        << " were requested";
                throw Error(message.str());
            }
            detail::check_draft_tokens(draft, target.vocab_size());
            const std::size_t k = draft.size();
            stats.draft_forward_passes += draft.forward_passes;
            stats.draft_tokens_proposed += k;
            for (std::size_t i = 0; i < k; ++i) ++stats.proposed_at_position[i];

            // One target pass over [uncached history..., drafts...].
            const std::span<const Token> uncached = target_.uncached_suffix(history);
            feed.assign(uncached.begin(), uncached.end());
            feed.insert(feed.end(), draft.tokens.begin(), draft.tokens.end());
            AcceptanceResult verdict;
            if constexpr (DeviceVerifyingLM<Target, Rule>) {
                auto verify_start = detail::Clock::now();
                verdict = target_.forward_and_verify(feed, draft, options_.sampling, rng, committed, rule_);
                stats.target_seconds += detail::seconds_since(verify_start);
            } else {
                auto forward_start = detail::Clock::now();
                const LogitsView logits = target_.forward(feed);
                stats.target_seconds += detail::seconds_since(forward_start);
                auto accept_start = detail::Clock::now();
                verdict = detail::verify_on_host(logits, draft, options_.sampling, rng, committed, scratch_, rule_);
                stats.acceptance_seconds += detail::seconds_since(accept_start);
            }
            ++stats.target_forward_passes;
            if (verdict.accepted > k) throw Error("acceptance rule accepted more drafts than were proposed");

            // Roll the target back to the accepted prefix; the next token stays
            // pending (it is fed at the start of the next pass).
            target_.truncate(committed + verdict.accepted);
            stats.draft_tokens_accepted += verdict.accepted;
            for (std::size_t i = 0; i < verdict.accepted; ++i) ++stats.accepted_at_position[i];

            for (std::size_t i = 0; i < verdict.accepted && running; ++i) {
                history.push_back(draft.tokens[i]);
                running = sink.emit(draft.tokens[i]);
            }
            if (running) {
                history.push_back(verdict.next_token);
                running = sink.emit(verdict.next_token);
            }
        }
        stats.generated_tokens = result.tokens.size();
        stats.total_seconds = detail::seconds_since(start);
        return result;
    }

private:
    typename detail::DrafterFor<Draft>::type drafter_;
    detail::KvSync<Target> target_;
    DecodingOptions options_;
    Rule rule_;
    std::vector<float> scratch_;
};

}  // namespace specdec
