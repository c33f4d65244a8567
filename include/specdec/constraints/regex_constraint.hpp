#pragma once
// The built-in TokenConstraint: the generated text must match a regular
// expression (regex_syntax.hpp's subset, full match), then end.
//
// The regex becomes a byte automaton (regex_automaton.hpp); a token is allowed
// at a state when running its bytes from there never reaches the dead state,
// i.e. some continuation of the text so far still matches. Tokens with empty
// text (control tokens) are never allowed, except the end tokens: those are
// allowed exactly when the text so far matches. After an end token the
// constraint is finished: only end tokens are allowed from then on (a decoder
// stops at its stop token anyway; this keeps every state's mask non-empty).
//
// Masks are computed once per automaton state, the first time that state is
// asked for (or all at once by precompute_masks()), and cached: allowed() is
// then a copy of vocab_size bytes.
// Building one costs a pass over the vocabulary's bytes (docs/constraints.md
// has the numbers); the cache holds at most (states + 1) * vocab_size bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/constraints/regex_automaton.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/token_constraint.hpp"

namespace specdec {

class RegexConstraint final : public TokenConstraint {
public:
    // token_texts[x]: the bytes token x decodes to (empty for a control token);
    // end_tokens: the tokens that end the text (e.g. the tokenizer's EOS).
    RegexConstraint(std::string pattern, std::vector<std::string> token_texts, std::vector<Token> end_tokens)
        : pattern_(std::move(pattern)), dfa_(regex::compile_regex(pattern_)), texts_(std::move(token_texts)),
          is_end_(texts_.size(), 0), masks_(dfa_.states() + 1) {
        if (texts_.empty()) throw Error(name() + ": the vocabulary (token_texts) is empty");
        if (end_tokens.empty()) throw Error(name() + ": no end token (the text could never end)");
        for (const Token token : end_tokens) {
            if (token < 0 || static_cast<std::size_t>(token) >= texts_.size())
                throw Error(name() + ": end token " + std::to_string(token) + " is outside the vocabulary [0, " +
                            std::to_string(texts_.size()) + ")");
            is_end_[static_cast<std::size_t>(token)] = 1;
        }
        reset();
    }

    [[nodiscard]] std::string name() const override { return "regex constraint \"" + pattern_ + "\""; }

    void reset() override { states_.assign(1, dfa_.start); }

    void allowed(std::span<std::uint8_t> allowed) override {
        if (allowed.size() != texts_.size())
            throw Error(name() + ": mask of " + std::to_string(allowed.size()) + " entries for a vocabulary of " +
                        std::to_string(texts_.size()) + " tokens");
        const std::vector<std::uint8_t>& mask = mask_at(states_.back());
        std::memcpy(allowed.data(), mask.data(), mask.size());
    }

    bool advance(Token token) override {
        if (token < 0 || static_cast<std::size_t>(token) >= texts_.size()) return false;
        const std::uint32_t next = step(states_.back(), static_cast<std::size_t>(token));
        if (next == regex::ByteDfa::dead) return false;
        states_.push_back(next);
        return true;
    }

    void rollback(std::size_t tokens) override {
        if (tokens >= states_.size())
            throw Error(name() + ": rollback of " + std::to_string(tokens) + " tokens after only " +
                        std::to_string(states_.size() - 1) + " advances");
        states_.resize(states_.size() - tokens);
    }

    // The tokens advanced past since reset(), not rolled back.
    [[nodiscard]] std::size_t depth() const { return states_.size() - 1; }
    // Whether an end token has been advanced past.
    [[nodiscard]] bool finished() const { return states_.back() == finished_state(); }
    // Whether the text so far matches the whole pattern.
    [[nodiscard]] bool matches() const { return !finished() && dfa_.accepting[states_.back()] != 0; }
    [[nodiscard]] const regex::ByteDfa& automaton() const { return dfa_; }
    [[nodiscard]] std::size_t vocab_size() const { return texts_.size(); }
    // Builds every state's mask now rather than on first use (a server that
    // wants no first-request stall; costs states() passes over the vocabulary).
    void precompute_masks() {
        for (std::uint32_t state = 1; state <= finished_state(); ++state) (void)mask_at(state);
    }
    // How many states' masks have been built so far.
    [[nodiscard]] std::size_t cached_masks() const {
        return static_cast<std::size_t>(std::count_if(masks_.begin(), masks_.end(), [](const auto& m) { return !m.empty(); }));
    }

private:
    // The automaton's states, then one more: finished (after an end token).
    [[nodiscard]] std::uint32_t finished_state() const { return static_cast<std::uint32_t>(dfa_.states()); }

    // The state after `token` from `state`; dead when it is not allowed there.
    [[nodiscard]] std::uint32_t step(std::uint32_t state, std::size_t token) const {
        const bool end_allowed = state == finished_state() || dfa_.accepting[state] != 0;
        if (is_end_[token]) return end_allowed ? finished_state() : regex::ByteDfa::dead;
        if (state == finished_state() || texts_[token].empty()) return regex::ByteDfa::dead;
        return dfa_.run(state, texts_[token]);
    }

    const std::vector<std::uint8_t>& mask_at(std::uint32_t state) {
        std::vector<std::uint8_t>& mask = masks_[state];
        if (mask.empty()) {
            mask.resize(texts_.size());
            for (std::size_t token = 0; token < texts_.size(); ++token)
                mask[token] = step(state, token) != regex::ByteDfa::dead ? 1 : 0;
        }
        return mask;
    }

    std::string pattern_;
    regex::ByteDfa dfa_;
    std::vector<std::string> texts_;
    std::vector<std::uint8_t> is_end_;
    std::vector<std::vector<std::uint8_t>> masks_;  // per state, built on first use
    std::vector<std::uint32_t> states_;             // states_[i]: after i advances
};

}  // namespace specdec
