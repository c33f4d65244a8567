#pragma once
// The step skeleton every decoder shares, and the session around it.
//
// A decoder is a DecoderSession and writes only its step():
//
//   StepRecord step = begin_step(max_tokens);    // the call checked; committed length and free context
//   if (step.stopped()) return ...;              // context full
//   proposal = propose(step, [&] { ... });        // timed; counts the proposal's size and passes
//   ...check the proposal (a chain: check_proposal against draft_cap)...
//   feed_pass(step, drafts);                     // feed_ = uncached suffix + drafts
//   ...ONE target pass over feed_, then the rule (a chain on the host:
//      verify_chain, whose rule samples the next token itself at k = 0;
//      sample_plain for a decoder with no rule; a tree or the device: its own)...
//   commit(step, drafts, verdict, on_token, ...);  // a chain: truncate, emit, logprobs, tested counts
//   (a tree: commit_tree, then emit(step, accepted drafts, next token, on_token))
//   return finish_step(step, policy, outcome);           // total time, policy.observe
//
// The decoder supplies: how many drafts to ask for (its policy), the pass
// (forward, forward_tree, forward_and_verify, or its share of a batched
// pass), the rule of a tree, and counters only it has (sibling ranks).
// The session supplies: the committed sequence, the target's KvSync, the
// drafter, construction with validation, prefill, reset, generate(), and the
// phases above, the chain's included. A decoder that verifies many sequences
// in one target pass runs begin_step / propose / commit / finish_step once
// per sequence around its one shared pass.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/generation_result.hpp"
#include "specdec/decoding/kv_sync.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/step_record.hpp"
#include "specdec/decoding/verification.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "specdec/sampling/token_logprobs.hpp"

namespace specdec::detail {

template <class D>
concept HasVocabSize = requires(const D& d) {
    { d.vocab_size() } -> std::convertible_to<std::size_t>;
};

// A draft that numbers its tokens (a draft model) must number them as the
// target does; a model-free drafter (prompt lookup) proposes the target's own ids.
template <class Draft, class Target>
void check_shared_vocabulary(const Draft& draft, const Target& target) {
    if constexpr (HasVocabSize<Draft>) {
        if (draft.vocab_size() != target.vocab_size()) {
            throw Error("vocabulary mismatch: the draft has " + std::to_string(draft.vocab_size()) +
                        " tokens, the target has " + std::to_string(target.vocab_size()) +
                        "; draft and target must share one tokenizer");
        }
    }
}

inline void check_prompt(std::span<const Token> prompt, std::size_t vocab, std::size_t context_length) {
    if (prompt.empty()) throw Error("the prompt is empty: expected at least one token (e.g. BOS)");
    if (prompt.size() > context_length) {
        std::ostringstream message;
        message << "the prompt has " << prompt.size() << " tokens but the target's context holds only "
                << context_length;
        throw Error(message.str());
    }
    for (std::size_t i = 0; i < prompt.size(); ++i) {
        if (prompt[i] < 0 || static_cast<std::size_t>(prompt[i]) >= vocab) {
            std::ostringstream message;
            message << "prompt token " << i << " has id " << prompt[i] << ", outside the vocabulary [0, " << vocab
                    << ")";
            throw Error(message.str());
        }
    }
}

// A drafter object (Drafter, TreeDrafter) the decoder uses in place.
template <class Draft>
struct DrafterReference {
    Draft* drafter;
    DraftProposal propose(const DraftRequest& request)
        requires Drafter<Draft>
    {
        return drafter->propose(request);
    }
    TreeProposal propose_tree(const TreeDraftRequest& request)
        requires TreeDrafter<Draft>
    {
        return drafter->propose_tree(request);
    }
    void reset() { drafter->reset(); }
    void prefill(std::span<const Token> history) {
        if constexpr (requires { drafter->prefill(history); }) drafter->prefill(history);
    }
};

// How a decoder holds its draft: a drafter object by reference, a draft model
// wrapped in the decoder's model drafter (ModelDrafter, ModelTreeDrafter).
template <class Draft, template <class> class ModelWrapper, bool is_drafter>
struct DrafterFor {
    using type = ModelWrapper<Draft>;
    static type make(Draft& draft) { return type(draft); }
};
template <class Draft, template <class> class ModelWrapper>
struct DrafterFor<Draft, ModelWrapper, true> {
    using type = DrafterReference<Draft>;
    static type make(Draft& draft) { return type{&draft}; }
};

// The drafter of a decoder that drafts nothing (AutoregressiveDecoder).
struct NoDraft {
    struct type {
        void reset() {}
        void prefill(std::span<const Token>) {}
    };
};

// Decoder provides
//   StepResult step(std::size_t max_tokens, OnToken& on_token);
// DraftSource is a DrafterFor (or NoDraft): how the draft is held.
template <class Decoder, class Target, class DraftSource = NoDraft>
class DecoderSession {
    static constexpr bool kDrafts = !std::same_as<DraftSource, NoDraft>;

public:
    [[nodiscard]] const DecodingOptions& options() const { return options_; }

    // The committed sequence: the last prompt given to prefill()/generate() and
    // every token emitted since.
    [[nodiscard]] std::span<const Token> sequence() const { return sequence_; }

    // Makes `prompt` the committed sequence and runs the target (and a draft
    // model) over it, except its last token, which the first step feeds.
    // Each model keeps the longest common prefix of its cache and the prompt
    // and computes only the rest. Returns the counts and time of this prefill.
    // Throws specdec::Error for an empty prompt, an id outside the vocabulary
    // or a prompt longer than the target's context.
    // After the call: the target's cache holds prompt[0 .. n - 1).
    GenerationStats prefill(std::span<const Token> prompt) {
        GenerationStats stats = begin_prefill(prompt);
        continue_prefill(std::numeric_limits<std::size_t>::max(), stats);
        return stats;
    }

    // prefill() in parts, for a batched decoder that spreads a long prompt
    // over several steps so that the running requests keep their pace.
    // begin_prefill makes `prompt` the committed sequence (checked; the seed
    // drawn) and computes nothing; each continue_prefill runs the target and
    // the draft over at most `budget` more prompt tokens, adds its counts and
    // time to `stats` and returns the tokens computed. prefill_pending() is
    // true until a continue_prefill computed the rest. The caches end as
    // prefill()'s do (the draft is given the prompt's growing prefixes).
    GenerationStats begin_prefill(std::span<const Token> prompt) {
        check_prompt(prompt, target_.model().vocab_size(), target_.model().context_length());
        sequence_.assign(prompt.begin(), prompt.end());
        seed_ = options_.seed ? *options_.seed : fresh_seed();
        if (options_.sampling.constraint != nullptr) options_.sampling.constraint->reset();
        prefill_pending_ = true;
        GenerationStats stats;
        stats.prompt_tokens = prompt.size();
        return stats;
    }
    std::size_t continue_prefill(std::size_t budget, GenerationStats& stats) {
        const auto start = Clock::now();
        // The prompt's last token is left for the first step to feed.
        const std::span<const Token> uncached = target_.uncached_suffix(sequence_);
        const std::size_t left = uncached.size() - 1;
        const std::size_t computed = std::min(budget, left);
        if (computed > 0) {
            target_.prefill(uncached.first(computed));
            stats.prefill_tokens += computed;
            stats.target_tokens += computed;
        }
        const std::size_t cached = sequence_.size() - 1 - (left - computed);
        drafter_.prefill(std::span<const Token>(sequence_).first(cached + 1));
        prefill_pending_ = computed < left;
        stats.prefill_seconds += seconds_since(start);
        return computed;
    }
    [[nodiscard]] bool prefill_pending() const { return prefill_pending_; }

    // prefill(prompt), then step() until options().max_new_tokens tokens were
    // emitted, a stop token was emitted (it is included), on_token returned
    // false, or the target's context is full. on_token(Token) is called for each
    // token as it is committed; it returns void, or bool where false stops.
    //
    // KV caches: both models keep the longest common prefix of the new prompt
    // and the previous sequence, and only the rest of the prompt is computed; a
    // chat that sends the whole conversation each turn runs each token once.
    // After the call the target's cache holds sequence()[0 .. size - 1): the
    // last emitted token is pending and is fed by the next pass. If an exception
    // escapes (bad prompt, model error), the caches are consistent with the
    // models' cached_tokens() but may hold less than before; the next call
    // recomputes what is missing.
    template <class OnToken = IgnoreTokens>
    GenerationResult generate(std::span<const Token> prompt, OnToken&& on_token = {}) {
        const auto start = Clock::now();
        GenerationResult result;
        result.stats = prefill(prompt);
        result.seed = seed_;
        const std::size_t most = options_.max_new_tokens;
        while (!add_step(result, self().step(most - result.tokens.size(), on_token), most)) {
        }
        result.stats.total_seconds = seconds_since(start);
        return result;
    }

    // The seed of the current generation: options().seed, or the fresh one
    // prefill() drew when it was unset.
    [[nodiscard]] std::uint64_t seed() const { return seed_; }

    // Empties the KV caches and the committed sequence.
    void reset() {
        target_.reset();
        drafter_.reset();
        sequence_.clear();
    }

protected:
    // Throws specdec::Error for invalid options. The model must outlive the decoder.
    DecoderSession(Target& target, DecodingOptions options)
        requires(!kDrafts)
        : options_(std::move(options)), target_(target, "target") {
        check_options(options_, target.vocab_size(), /*speculative=*/false);
    }

    // Throws specdec::Error for invalid options or when a draft model's
    // vocabulary differs from the target's. Both models must outlive the decoder.
    template <class Draft>
        requires kDrafts
    DecoderSession(TargetRole<Target> target, DraftRole<Draft> draft, DecodingOptions options)
        : options_(std::move(options)), drafter_(DraftSource::make(draft.source)), target_(target.model, "target") {
        check_options(options_, target.model.vocab_size(), /*speculative=*/true);
        check_shared_vocabulary(draft.source, target.model);
    }

    // The validation of a session's options, for a target of `vocab` tokens:
    // a speculative session drafts at least one token per step. Throws
    // specdec::Error.
    static void check_options(const DecodingOptions& options, std::size_t vocab, bool speculative) {
        validate(options, speculative);
        validate(options.sampling, vocab);
    }

    // Makes `options` the session's (for the next prefill) after the
    // validation construction applies. Throws specdec::Error and keeps the
    // old options when they are invalid.
    void set_options(DecodingOptions options, bool speculative) {
        check_options(options, target_.model().vocab_size(), speculative);
        options_ = std::move(options);
    }

    static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

    // Opens a step: checks the call and records the committed length and the
    // target's free context; stop = context_full when the pending token has no room.
    StepRecord begin_step(std::size_t max_tokens) {
        if (sequence_.empty()) throw Error("step() has no sequence to extend: call prefill(prompt) first");
        if (max_tokens == 0) throw Error("step(max_tokens = 0): expected at least 1 token to emit");
        StepRecord step;
        step.committed = sequence_.size();
        const std::size_t context = target_.model().context_length();
        if (step.committed > context) {
            step.result.stop = StopReason::context_full;
        } else {
            step.room = context - step.committed;
        }
        return step;
    }

    // Runs the drafter (through `draft`, which returns a DraftProposal or a
    // TreeProposal), timed, and counts what it proposed.
    template <class Draft>
    auto propose(StepRecord& step, Draft&& draft) {
        auto proposal = timed(step.stats().draft_seconds, draft);
        step.stats().draft_forward_passes = proposal.forward_passes;
        step.stats().draft_tokens_proposed = proposal.size();
        return proposal;
    }

    // The one target pass's input: the target's uncached suffix of the
    // sequence (at least the pending token), then `drafts`. Returns the
    // suffix's length.
    std::size_t feed_pass(StepRecord& step, std::span<const Token> drafts) {
        const std::span<const Token> uncached = target_.uncached_suffix(sequence_);
        feed_.assign(uncached.begin(), uncached.end());
        feed_.insert(feed_.end(), drafts.begin(), drafts.end());
        step.stats().target_tokens = feed_.size();
        step.stats().target_forward_passes = 1;
        return uncached.size();
    }

    // Commits and emits the accepted drafts, then `next`, stopping early as
    // emit_tokens does; counts what was emitted (only emitted drafts count as
    // accepted). Returns the number of tokens emitted.
    template <class AcceptedTokens, class OnToken>
    std::size_t emit(StepRecord& step, const AcceptedTokens& accepted, Token next, OnToken& on_token) {
        step_tokens_.clear();
        for (const Token token : accepted) step_tokens_.push_back(token);
        const std::size_t drafts = step_tokens_.size();
        step_tokens_.push_back(next);
        GenerationStats& stats = step.stats();
        const std::size_t emitted = emit_tokens(std::span<const Token>(step_tokens_), options_.stop_tokens, on_token,
                                                sequence_, step.result.tokens, step.result.stop);
        advance_constraint(std::span<const Token>(step_tokens_).first(emitted));
        stats.draft_tokens_accepted = std::min(emitted, drafts);
        for (std::size_t i = 0; i < stats.draft_tokens_accepted; ++i) ++stats.accepted_at_position[i];
        stats.generated_tokens = emitted;
        return emitted;
    }

    // The pass's last drafts.size() + 1 rows ready for the rule: through the
    // logit stages, row i with the history sequence() + drafts[0 .. i). Without
    // logit stages, `logits` itself.
    LogitsView target_rows(const LogitsView& logits, std::span<const Token> drafts) {
        const std::size_t count = drafts.size() + 1;
        return adjusted_rows_.adjust(logits, logits.rows - count, count, options_.sampling, sequence_, drafts);
    }

    // After emit(): the logprobs of the step's emitted tokens (if asked for),
    // token j read from row j of the last `drafted + 1` rows of `raw` (the
    // pass's) and `rows` (target_rows of it). Call before anything else
    // changes sequence().
    void record_logprobs(StepRecord& step, const LogitsView& raw, const LogitsView& rows, std::size_t drafted) {
        if (!options_.logprobs.enabled) return;
        const std::vector<Token>& tokens = step.result.tokens;
        const std::size_t raw_first = raw.rows - (drafted + 1), first = rows.rows - (drafted + 1);
        for (std::size_t j = 0; j < tokens.size(); ++j) {
            step.result.logprobs.push_back(token_logprob(raw.row(raw_first + j), rows.row(first + j),
                                                         options_.sampling, options_.logprobs, tokens[j],
                                                         logprob_scratch_));
        }
    }

    // Per-position counters of a chain of k drafts, sized to the longest
    // draft (options().draft_tokens, or k when forced drafts made it longer).
    void count_chain_proposal(StepRecord& step, std::size_t k) const {
        GenerationStats& stats = step.stats();
        const std::size_t longest = std::max(options_.draft_tokens, k);
        stats.proposed_at_position.assign(longest, 0);
        stats.accepted_at_position.assign(longest, 0);
        stats.tested_at_position.assign(longest, 0);
        stats.draft_length_counts.assign(longest + 1, 0);
        for (std::size_t i = 0; i < k; ++i) ++stats.proposed_at_position[i];
        ++stats.draft_length_counts[k];
    }

    // Draft i of a chain of k was tested when drafts 0..i-1 were kept.
    static void count_chain_tests(StepRecord& step, std::size_t k, std::size_t accepted) {
        for (std::size_t i = 0; i < std::min(k, accepted + 1); ++i) ++step.stats().tested_at_position[i];
    }

    // The most drafts a chain step may propose: the target's cache holds
    // committed + k positions after the pass, and a step emits at most k + 1
    // of the max_tokens it may emit.
    [[nodiscard]] std::size_t draft_cap(const StepRecord& step, std::size_t max_tokens) const {
        return std::min({options_.draft_tokens, step.room, max_tokens - 1});
    }

    // A chain proposal holds no more drafts than requested (k_max), every id
    // in the target's vocabulary. Throws specdec::Error.
    void check_proposal(const DraftProposal& draft, std::size_t k_max) const {
        if (draft.size() > k_max) {
            std::ostringstream message;
            message << "the drafter proposed " << draft.size() << " tokens when at most " << k_max
                    << " were requested";
            throw Error(message.str());
        }
        check_draft_tokens(draft, target_.model().vocab_size());
    }

    // The rule over a chain on the host, timed as acceptance: the pass's last
    // k + 1 rows (`rows`) through the logit stages (into `processed`, for
    // record_logprobs), then verify_on_host. `lazy` is reused between calls.
    template <class Rule>
    AcceptanceResult verify_chain(StepRecord& step, const LogitsView& rows, const DraftProposal& draft,
                                  const Rule& rule, LazyDistributions& lazy, LogitsView& processed) {
        return timed(step.stats().acceptance_seconds, [&] {
            processed = target_rows(rows, draft.tokens);
            return verify_on_host(processed, draft, options_.sampling, CounterRng{seed_}, step.committed, lazy, rule);
        });
    }

    // A step of no drafts: the pass's last row through the logit stages (into
    // `processed`) and one token sampled from it, as plain autoregressive
    // decoding does; timed as acceptance.
    AcceptanceResult sample_plain(StepRecord& step, const LogitsView& rows, LogitsView& processed) {
        AcceptanceResult verdict;
        verdict.next_token = timed(step.stats().acceptance_seconds, [&] {
            processed = target_rows(rows, {});
            return sample_next_on_host(processed.last_row(), options_.sampling, CounterRng{seed_}, step.committed,
                                       sample_scratch_);
        });
        return verdict;
    }

    // Commits a chain's verdict over `drafts` (k of them): rolls the target
    // back to the kept prefix (the next token stays pending, fed by the next
    // pass), emits (emit), records the logprobs when the rows were on the host
    // (`processed` has data; `raw` is the pass's rows), and counts the drafts
    // tested. Throws specdec::Error for a verdict that keeps more than k
    // drafts. Returns the number of tokens emitted.
    template <class OnToken>
    std::size_t commit(StepRecord& step, std::span<const Token> drafts, const AcceptanceResult& verdict,
                       OnToken& on_token, const LogitsView& raw, const LogitsView& processed) {
        const std::size_t k = drafts.size();
        check_verdict(verdict, k);
        target_.truncate(step.committed + verdict.accepted);
        const std::size_t emitted = emit(step, drafts.first(verdict.accepted), verdict.next_token, on_token);
        if (processed.data != nullptr) record_logprobs(step, raw, processed, k);
        count_chain_tests(step, k, verdict.accepted);
        return emitted;
    }

    // Closes a step: its total time.
    StepResult finish_step(StepRecord& step) {
        step.stats().total_seconds = seconds_since(step.start);
        return std::move(step.result);
    }

    // Closes a step and tells the policy what happened: `outcome` carries the
    // decoder's own fields; the passes, width and times are filled in here.
    template <class Policy, class Outcome>
    StepResult finish_step(StepRecord& step, Policy& policy, Outcome outcome) {
        const GenerationStats& stats = step.stats();
        step.stats().total_seconds = seconds_since(step.start);
        outcome.draft_passes = stats.draft_forward_passes;
        outcome.target_width = stats.target_tokens;
        outcome.draft_seconds = stats.draft_seconds;
        outcome.target_seconds = stats.target_seconds;
        outcome.acceptance_seconds = stats.acceptance_seconds;
        outcome.total_seconds = stats.total_seconds;
        policy.observe(outcome);
        return std::move(step.result);
    }

    DecodingOptions options_;
    std::vector<Token> sequence_;
    typename DraftSource::type drafter_;
    KvSync<Target> target_;
    std::vector<Token> feed_;  // the current pass's input (feed_pass)
    std::uint64_t seed_ = 0;   // this generation's (seed())
    bool prefill_pending_ = false;  // begin_prefill ran, continue_prefill has not finished

private:
    Decoder& self() { return static_cast<Decoder&>(*this); }

    // The constraint follows the committed sequence: emitted tokens only.
    void advance_constraint(std::span<const Token> emitted) {
        TokenConstraint* constraint = options_.sampling.constraint;
        if (constraint == nullptr) return;
        for (const Token token : emitted) {
            if (!constraint->advance(token)) {
                throw Error("constraint " + constraint->name() + " refused emitted token " + std::to_string(token) +
                            ": the constraint's state no longer follows the sequence (was it shared with another "
                            "generation?)");
            }
        }
    }

    std::vector<Token> step_tokens_;  // the current step's accepted drafts and next token
    AdjustedRows adjusted_rows_;
    std::vector<float> logprob_scratch_;
    std::vector<float> sample_scratch_;  // sample_plain's distribution
};

}  // namespace specdec::detail
