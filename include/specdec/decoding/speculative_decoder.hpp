#pragma once
// SpeculativeDecoder: a drafter proposes k tokens, the target scores all of
// them (plus the pending last token) in ONE forward pass, the acceptance rule
// keeps a prefix and supplies one more token, and both KV caches are rolled
// back to the committed sequence. The output has exactly the distribution of
// sampling from the processed target alone (and at temperature 0, exactly the
// target's greedy output).
//
//   specdec::SpeculativeDecoder decoder(specdec::target(big), specdec::draft(small), options);
//   auto result = decoder.generate(prompt, on_token);          // or, one step at a time:
//   decoder.prefill(prompt);
//   while (...) { specdec::StepResult step = decoder.step(); ... }
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
#include "specdec/decoding/draft_length.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/session.hpp"
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
        void prefill(std::span<const Token> history) {
            if constexpr (requires { drafter->prefill(history); }) drafter->prefill(history);
        }
    };
    using type = Reference;
    static type make(Draft& draft) { return type{&draft}; }
};

}  // namespace detail

// Target: the CausalLM whose distribution the output follows.
// Draft: a Drafter, or a CausalLM draft model (wrapped in a ModelDrafter).
// Rule: the acceptance rule used at temperature > 0 (temperature 0 always uses
// greedy verification). If the target runs Rule itself (DeviceVerifyingLM),
// verification happens there; otherwise on the host.
// Policy: how many drafts each step proposes (draft_length.hpp); with a
// policy other than FixedLength, options.draft_tokens is the maximum.
template <CausalLM Target, class Draft, AcceptanceRule Rule = TokenwiseRejection,
          DraftLengthPolicy Policy = FixedLength>
    requires(Drafter<Draft> || CausalLM<Draft>)
class SpeculativeDecoder : public detail::DecoderSession<SpeculativeDecoder<Target, Draft, Rule, Policy>> {
    using Session = detail::DecoderSession<SpeculativeDecoder<Target, Draft, Rule, Policy>>;

public:
    // Throws specdec::Error for invalid options or when a draft model's
    // vocabulary differs from the target's. Both models must outlive the decoder.
    SpeculativeDecoder(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options = {}, Rule rule = {},
                       Policy policy = {})
        : Session(std::move(options)),
          drafter_(detail::DrafterFor<Draft>::make(draft.source)),
          target_(target.model),
          rule_(std::move(rule)),
          policy_(std::move(policy)) {
        validate(this->options_, /*speculative=*/true);
        detail::check_shared_vocabulary(draft.source, target.model);
    }

    // Makes `prompt` the committed sequence and runs the target (and a draft
    // model) over it, except its last token, which the first step feeds.
    // Each model keeps the longest common prefix of its cache and the prompt
    // and computes only the rest. Returns the counts and time of this prefill.
    // Throws specdec::Error for an empty prompt, an id outside the vocabulary
    // or a prompt longer than the target's context.
    // After the call: the target's cache holds prompt[0 .. n - 1).
    GenerationStats prefill(std::span<const Token> prompt) {
        return this->prefill_target_and_drafter(target_, drafter_, prompt);
    }

    // One draft -> verify step: proposes up to min(draft_tokens, max_tokens - 1)
    // drafts, verifies them in one target pass and commits the accepted prefix
    // plus one token from the target (corrected or bonus). Tokens are streamed
    // to on_token as they are committed; emission ends early after a stop
    // token or when on_token returns false, and only emitted tokens are
    // committed and counted. At most max_tokens tokens are emitted.
    // Returns stop = context_full (and no token) when the target's cache has no
    // room for the pending token.
    // After the call: the target's cache holds sequence()[0 .. size - 1), and
    // after a stop inside an accepted block also the accepted drafts that were
    // not emitted; those are rolled back lazily by the next pass.
    template <class OnToken = detail::IgnoreTokens>
    StepResult step(std::size_t max_tokens = Session::kUnlimited, OnToken&& on_token = {}) {
        this->check_step(max_tokens);
        const auto start = detail::Clock::now();
        StepResult result;
        GenerationStats& stats = result.stats;
        std::vector<Token>& history = this->sequence_;
        Target& target = target_.model();
        const std::size_t committed = history.size();
        const std::size_t context = target.context_length();
        if (committed > context) {
            result.stop = StopReason::context_full;
            return result;
        }
        const DecodingOptions& options = this->options_;
        // The target's cache will hold committed + k positions after the pass, and
        // a step emits at most k + 1 tokens: draft no more than either allows.
        const std::size_t cap = std::min({options.draft_tokens, context - committed, max_tokens - 1});
        stats.proposed_at_position.assign(options.draft_tokens, 0);
        stats.accepted_at_position.assign(options.draft_tokens, 0);
        stats.tested_at_position.assign(options.draft_tokens, 0);
        stats.draft_length_counts.assign(options.draft_tokens + 1, 0);
        const CounterRng rng{options.seed};

        auto draft_start = detail::Clock::now();
        const DraftPlan plan = policy_.plan(cap, committed);
        const std::size_t k_max = std::min(plan.max_tokens, cap);
        DraftProposal draft;
        if (k_max > 0) draft = drafter_.propose(DraftRequest{history, k_max, options.sampling, rng, plan.stop});
        stats.draft_seconds = detail::seconds_since(draft_start);
        if (draft.size() > k_max) {
            std::ostringstream message;
            message << "the drafter proposed " << draft.size() << " tokens when at most " << k_max
                    << " were requested";
            throw Error(message.str());
        }
        detail::check_draft_tokens(draft, target.vocab_size());
        const std::size_t k = draft.size();
        stats.draft_forward_passes = draft.forward_passes;
        stats.draft_tokens_proposed = k;
        for (std::size_t i = 0; i < k; ++i) ++stats.proposed_at_position[i];
        ++stats.draft_length_counts[k];

        // One target pass over [uncached history..., drafts...].
        const std::span<const Token> uncached = target_.uncached_suffix(history);
        feed_.assign(uncached.begin(), uncached.end());
        feed_.insert(feed_.end(), draft.tokens.begin(), draft.tokens.end());
        stats.target_tokens = feed_.size();
        AcceptanceResult verdict;
        if constexpr (DeviceVerifyingLM<Target, Rule>) {
            auto verify_start = detail::Clock::now();
            verdict = target_.forward_and_verify(feed_, draft, options.sampling, rng, committed, rule_);
            stats.target_seconds = detail::seconds_since(verify_start);
            stats.device_verified_steps = 1;
        } else {
            auto forward_start = detail::Clock::now();
            const LogitsView logits = target_.forward(feed_);
            stats.target_seconds = detail::seconds_since(forward_start);
            auto accept_start = detail::Clock::now();
            verdict = detail::verify_on_host(logits, draft, options.sampling, rng, committed, rows_, rule_);
            stats.acceptance_seconds = detail::seconds_since(accept_start);
        }
        stats.target_forward_passes = 1;
        if (verdict.accepted > k) throw Error("acceptance rule accepted more drafts than were proposed");

        // Roll the target back to the accepted prefix; the next token stays
        // pending (it is fed at the start of the next pass).
        target_.truncate(committed + verdict.accepted);
        step_tokens_.assign(draft.tokens.begin(), draft.tokens.begin() + static_cast<std::ptrdiff_t>(verdict.accepted));
        step_tokens_.push_back(verdict.next_token);
        const std::size_t emitted =
            detail::emit_tokens(std::span<const Token>(step_tokens_), options.stop_tokens, on_token, history,
                                result.tokens, result.stop);
        const std::size_t accepted_emitted = std::min(emitted, verdict.accepted);
        stats.draft_tokens_accepted = accepted_emitted;
        for (std::size_t i = 0; i < accepted_emitted; ++i) ++stats.accepted_at_position[i];
        for (std::size_t i = 0; i < std::min(k, verdict.accepted + 1); ++i) ++stats.tested_at_position[i];
        stats.generated_tokens = emitted;
        stats.total_seconds = detail::seconds_since(start);
        policy_.observe(StepOutcome{.proposed = k,
                                    .accepted = verdict.accepted,
                                    .draft_passes = draft.forward_passes,
                                    .verified_tokens = feed_.size(),
                                    .draft_seconds = stats.draft_seconds,
                                    .target_seconds = stats.target_seconds,
                                    .acceptance_seconds = stats.acceptance_seconds,
                                    .total_seconds = stats.total_seconds});
        return result;
    }

    // The draft-length policy (e.g. to read what AutoLength has learned).
    [[nodiscard]] const Policy& policy() const { return policy_; }

    // Empties both KV caches and the committed sequence.
    void reset() {
        target_.reset();
        drafter_.reset();
        this->sequence_.clear();
    }

private:
    typename detail::DrafterFor<Draft>::type drafter_;
    detail::KvSync<Target> target_;
    Rule rule_;
    Policy policy_;
    detail::LazyDistributions rows_;
    std::vector<Token> feed_, step_tokens_;
};

}  // namespace specdec
