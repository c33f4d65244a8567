#pragma once
// A regular expression (the subset of regex_syntax.hpp) compiled to a minimal
// deterministic automaton over bytes, with full-match semantics: a text
// matches when running all of its bytes from `start` ends in an accepting
// state. Compilation is Thompson's NFA, the subset construction, then Moore's
// partition refinement. Refinement also merges every state from which no
// accepting state can be reached into the dead state 0, so "not dead" means
// "some continuation still matches": exactly the question a token mask asks.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/constraints/regex_syntax.hpp"
#include "specdec/core/error.hpp"

namespace specdec::regex {

inline constexpr std::size_t kMaxNfaStates = 200'000;
inline constexpr std::size_t kMaxDfaStates = 20'000;

struct ByteDfa {
    static constexpr std::uint32_t dead = 0;  // no continuation matches; absorbing

    std::uint32_t start = dead;
    std::vector<std::uint32_t> transitions;  // [state * 256 + byte] -> state
    std::vector<std::uint8_t> accepting;     // per state

    [[nodiscard]] std::size_t states() const { return accepting.size(); }
    [[nodiscard]] std::uint32_t next(std::uint32_t state, unsigned char byte) const {
        return transitions[static_cast<std::size_t>(state) * 256 + byte];
    }
    // The state after `bytes` from `state`; stops early at the dead state.
    [[nodiscard]] std::uint32_t run(std::uint32_t state, std::string_view bytes) const {
        for (const char byte : bytes) {
            state = next(state, static_cast<unsigned char>(byte));
            if (state == dead) break;
        }
        return state;
    }
    [[nodiscard]] bool matches(std::string_view text) const { return accepting[run(start, text)] != 0; }
};

namespace detail {

// Thompson's construction: each state has epsilon moves and at most one byte
// move (a byte set to `target`).
class NfaBuilder {
public:
    struct State {
        std::vector<std::uint32_t> epsilon;
        ByteSet bytes{};
        std::uint32_t target = 0;
        bool has_bytes = false;
    };

    NfaBuilder(const SyntaxTree& tree, std::string_view pattern) : tree_(tree), pattern_(pattern) {}

    // Returns the start state; the accepting state is accept().
    std::uint32_t build() {
        const Fragment whole = fragment(tree_.root);
        accept_ = whole.accept;
        return whole.start;
    }
    [[nodiscard]] std::uint32_t accept() const { return accept_; }
    [[nodiscard]] const std::vector<State>& states() const { return states_; }

private:
    struct Fragment {
        std::uint32_t start;
        std::uint32_t accept;  // no outgoing moves yet
    };

    std::uint32_t add_state() {
        if (states_.size() >= kMaxNfaStates)
            throw Error("regex \"" + std::string(pattern_) + "\": too large (its repetitions expand to more than " +
                        std::to_string(kMaxNfaStates) + " automaton states)");
        states_.emplace_back();
        return static_cast<std::uint32_t>(states_.size() - 1);
    }
    void link(std::uint32_t from, std::uint32_t to) { states_[from].epsilon.push_back(to); }

    // Builds a fresh copy each call: a repeat instantiates its child m or n times.
    Fragment fragment(std::size_t index) {
        const SyntaxNode& node = tree_.nodes[index];
        switch (node.kind) {
            case SyntaxNode::Kind::empty: {
                const std::uint32_t s = add_state();
                return {s, s};
            }
            case SyntaxNode::Kind::bytes: {
                const std::uint32_t s = add_state(), t = add_state();
                states_[s].bytes = node.bytes;
                states_[s].target = t;
                states_[s].has_bytes = true;
                return {s, t};
            }
            case SyntaxNode::Kind::concat: {
                Fragment whole = fragment(node.children.front());
                for (std::size_t i = 1; i < node.children.size(); ++i) {
                    const Fragment next = fragment(node.children[i]);
                    link(whole.accept, next.start);
                    whole.accept = next.accept;
                }
                return whole;
            }
            case SyntaxNode::Kind::alternate: {
                const std::uint32_t s = add_state(), t = add_state();
                for (const std::size_t child : node.children) {
                    const Fragment branch = fragment(child);
                    link(s, branch.start);
                    link(branch.accept, t);
                }
                return {s, t};
            }
            case SyntaxNode::Kind::repeat: return repeat(node);
        }
        return {0, 0};
    }

    Fragment repeat(const SyntaxNode& node) {
        const std::size_t child = node.children.front();
        const std::uint32_t s = add_state();
        Fragment whole{s, s};
        for (std::size_t i = 0; i < node.min; ++i) {
            const Fragment copy = fragment(child);
            link(whole.accept, copy.start);
            whole.accept = copy.accept;
        }
        if (node.max == kUnboundedRepeat) {
            // loop: the hub may enter the child or leave; the child returns to the hub
            const std::uint32_t hub = add_state(), exit = add_state();
            const Fragment body = fragment(child);
            link(whole.accept, hub);
            link(hub, body.start);
            link(body.accept, hub);
            link(hub, exit);
            whole.accept = exit;
            return whole;
        }
        // up to max - min optional copies, each one only after the previous
        const std::uint32_t exit = add_state();
        for (std::size_t i = node.min; i < node.max; ++i) {
            const Fragment copy = fragment(child);
            link(whole.accept, exit);
            link(whole.accept, copy.start);
            whole.accept = copy.accept;
        }
        link(whole.accept, exit);
        whole.accept = exit;
        return whole;
    }

    const SyntaxTree& tree_;
    std::string_view pattern_;
    std::vector<State> states_;
    std::uint32_t accept_ = 0;
};

inline void epsilon_closure(const std::vector<NfaBuilder::State>& nfa, std::vector<std::uint32_t>& set,
                            std::vector<std::uint8_t>& seen) {
    std::vector<std::uint32_t> stack(set.begin(), set.end());
    for (const std::uint32_t s : set) seen[s] = 1;
    while (!stack.empty()) {
        const std::uint32_t s = stack.back();
        stack.pop_back();
        for (const std::uint32_t t : nfa[s].epsilon) {
            if (seen[t]) continue;
            seen[t] = 1;
            set.push_back(t);
            stack.push_back(t);
        }
    }
    for (const std::uint32_t s : set) seen[s] = 0;
    std::sort(set.begin(), set.end());
}

// The subset construction; state 0 is the empty set (dead).
inline ByteDfa determinise(const NfaBuilder& builder, std::uint32_t nfa_start, std::string_view pattern) {
    const auto& nfa = builder.states();
    std::vector<std::uint8_t> seen(nfa.size(), 0);
    std::map<std::vector<std::uint32_t>, std::uint32_t> ids;
    std::vector<std::vector<std::uint32_t>> sets;
    ByteDfa dfa;
    auto intern = [&](std::vector<std::uint32_t> set) {
        const auto [it, inserted] = ids.emplace(set, static_cast<std::uint32_t>(sets.size()));
        if (inserted) {
            if (sets.size() >= kMaxDfaStates)
                throw Error("regex \"" + std::string(pattern) + "\": needs more than " + std::to_string(kMaxDfaStates) +
                            " automaton states");
            sets.push_back(std::move(set));
        }
        return it->second;
    };
    intern({});
    std::vector<std::uint32_t> initial{nfa_start};
    epsilon_closure(nfa, initial, seen);
    dfa.start = intern(std::move(initial));
    for (std::size_t state = 0; state < sets.size(); ++state) {
        std::array<std::vector<std::uint32_t>, 256> moves;
        for (const std::uint32_t s : sets[state]) {
            if (!nfa[s].has_bytes) continue;
            for (std::size_t byte = 0; byte < 256; ++byte)
                if (nfa[s].bytes.test(byte)) moves[byte].push_back(nfa[s].target);
        }
        dfa.transitions.resize((state + 1) * 256);
        for (std::size_t byte = 0; byte < 256; ++byte) {
            std::vector<std::uint32_t>& move = moves[byte];
            std::sort(move.begin(), move.end());
            move.erase(std::unique(move.begin(), move.end()), move.end());
            epsilon_closure(nfa, move, seen);
            dfa.transitions[state * 256 + byte] = intern(std::move(move));
        }
    }
    dfa.accepting.resize(sets.size());
    for (std::size_t state = 0; state < sets.size(); ++state)
        dfa.accepting[state] = std::binary_search(sets[state].begin(), sets[state].end(), builder.accept()) ? 1 : 0;
    return dfa;
}

// Moore's partition refinement: states are split by acceptance, then by the
// blocks their moves lead to, until nothing splits. Block of the dead state
// becomes 0 in the result.
inline ByteDfa minimise(const ByteDfa& dfa) {
    const std::size_t n = dfa.states();
    std::vector<std::uint32_t> block(n);
    for (std::size_t s = 0; s < n; ++s) block[s] = dfa.accepting[s];
    std::size_t blocks = 0;
    while (true) {
        std::map<std::vector<std::uint32_t>, std::uint32_t> signatures;
        std::vector<std::uint32_t> refined(n);
        std::vector<std::uint32_t> signature(257);
        for (std::size_t s = 0; s < n; ++s) {
            signature[0] = block[s];
            for (std::size_t byte = 0; byte < 256; ++byte) signature[byte + 1] = block[dfa.transitions[s * 256 + byte]];
            refined[s] = signatures.emplace(signature, static_cast<std::uint32_t>(signatures.size())).first->second;
        }
        block = std::move(refined);
        if (signatures.size() == blocks) break;
        blocks = signatures.size();
    }
    // Renumber: the dead state's block first, the others in order of appearance.
    std::vector<std::uint32_t> number(blocks, UINT32_MAX);
    std::uint32_t next_number = 0;
    number[block[ByteDfa::dead]] = next_number++;
    for (std::size_t s = 0; s < n; ++s)
        if (number[block[s]] == UINT32_MAX) number[block[s]] = next_number++;
    ByteDfa minimal;
    minimal.start = number[block[dfa.start]];
    minimal.transitions.assign(blocks * 256, 0);
    minimal.accepting.assign(blocks, 0);
    for (std::size_t s = 0; s < n; ++s) {
        const std::uint32_t b = number[block[s]];
        minimal.accepting[b] = dfa.accepting[s];
        for (std::size_t byte = 0; byte < 256; ++byte)
            minimal.transitions[b * 256 + byte] = number[block[dfa.transitions[s * 256 + byte]]];
    }
    return minimal;
}

}  // namespace detail

// Throws specdec::Error for syntax outside the subset (named, with its
// offset) and for patterns whose automaton would exceed the limits above.
[[nodiscard]] inline ByteDfa compile_regex(std::string_view pattern) {
    const SyntaxTree tree = parse_regex(pattern);
    detail::NfaBuilder builder(tree, pattern);
    const std::uint32_t start = builder.build();
    return detail::minimise(detail::determinise(builder, start, pattern));
}

}  // namespace specdec::regex
