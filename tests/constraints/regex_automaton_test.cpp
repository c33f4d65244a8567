// The regex automaton against std::regex_match (ECMAScript) on many strings
// per pattern, its minimality and dead-state pruning, and the refusal of
// syntax outside the subset, by name and offset.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <regex>
#include <string>
#include <vector>

#include "specdec/constraints/regex_automaton.hpp"
#include "specdec/core/error.hpp"
#include "support/catch.hpp"
#include "support/test_random.hpp"

using specdec::regex::ByteDfa;
using specdec::regex::compile_regex;

namespace {

using specdec::test::TestRandom;

// A string the automaton accepts (a random walk through live states that
// stops at an accepting one), or, when it finds none in time, a partial walk.
std::string walk_match(const ByteDfa& dfa, TestRandom& random) {
    std::string text;
    std::uint32_t state = dfa.start;
    for (std::size_t step = 0; step < 64; ++step) {
        if (dfa.accepting[state] && random.below(4) == 0) break;
        std::vector<unsigned char> live;
        for (int byte = 0; byte < 128; ++byte)
            if (dfa.next(state, static_cast<unsigned char>(byte)) != ByteDfa::dead) live.push_back(static_cast<unsigned char>(byte));
        if (live.empty()) break;
        const unsigned char byte = live[random.below(live.size())];
        text.push_back(static_cast<char>(byte));
        state = dfa.next(state, byte);
    }
    return text;
}

const std::string kAutomatonAlphabet = "abcdexyz0123456789_-\"{}:, .\n\t]\\AZ";

// Near misses: a matching walk with one byte replaced, inserted or deleted.
std::string mutate(std::string text, TestRandom& random) {
    const char c = kAutomatonAlphabet[random.below(kAutomatonAlphabet.size())];
    switch (random.below(3)) {
        case 0:
            if (!text.empty()) text[random.below(text.size())] = c;
            break;
        case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(random.below(text.size() + 1)), c); break;
        default:
            if (!text.empty()) text.erase(text.begin() + static_cast<std::ptrdiff_t>(random.below(text.size())));
    }
    return text;
}

}  // namespace

TEST_CASE("regex automaton: full matches agree with std::regex_match on random strings", "[constraints][regex]") {
    const std::vector<std::string> patterns{
        "abc", "a|b|c", "(ab|cd)*e", "[a-z0-9_]+", "[^\"]*", "a.c", "(a|b)*abb", "x{3}", "x{2,4}", "x{2,}",
        "(ab){0,3}c?", "\\d{1,4}-\\w+", R"(\{"id": [0-9]{1,4}, "name": "[a-z]{1,8}"\})", "(a*)*b", "[-a]+[b-]",
        "\\s*\\S+", "(?:foo|bar)+baz", "a?b?c?", "[\\]\\-]x", "\\x41\\.\\n", "^ab$", "", "(|a)b", "[^a-c]{2}",
        "(\"[^\"\\\\]*\"|[0-9]+)(, (\"[^\"\\\\]*\"|[0-9]+))*", "[\\d\\s]+z", "\\W\\D"};
    TestRandom random{2026};
    for (const std::string& pattern : patterns) {
        INFO("pattern " << pattern);
        const ByteDfa dfa = compile_regex(pattern);
        const std::regex reference(pattern, std::regex::ECMAScript);
        std::size_t matched = 0, unmatched = 0;
        for (int i = 0; i < 600; ++i) {
            std::string text;
            switch (i % 3) {
                case 0: text = walk_match(dfa, random); break;
                case 1: text = mutate(walk_match(dfa, random), random); break;
                default:
                    for (std::size_t n = random.below(8); n > 0; --n) text.push_back(kAutomatonAlphabet[random.below(kAutomatonAlphabet.size())]);
            }
            INFO("text \"" << text << "\"");
            const bool expected = std::regex_match(text, reference);
            REQUIRE(dfa.matches(text) == expected);
            ++(expected ? matched : unmatched);
        }
        // Both outcomes are exercised (the empty pattern matches one string only).
        CHECK(matched >= 20);
        CHECK(unmatched >= 20);
    }
}

TEST_CASE("regex automaton: minimal, and every live state can still reach a match", "[constraints][regex]") {
    // Textbook minimal sizes, plus the dead state.
    CHECK(compile_regex("(a|b)*abb").states() == 4 + 1);
    CHECK(compile_regex("x{2,4}").states() == 5 + 1);
    CHECK(compile_regex("(a|b)(a|b)|(aa|ab|ba|bb)").states() == 3 + 1);
    CHECK(compile_regex("[0-9]+|[0-9]*").states() == 1 + 1);
    for (const char* pattern : {R"(\{"id": [0-9]{1,4}, "name": "[a-z]{1,8}"\})", "(ab|cd)*e", "a[^b]*b{2,3}"}) {
        INFO("pattern " << pattern);
        const ByteDfa dfa = compile_regex(pattern);
        CHECK(!dfa.accepting[ByteDfa::dead]);
        for (int byte = 0; byte < 256; ++byte) CHECK(dfa.next(ByteDfa::dead, static_cast<unsigned char>(byte)) == ByteDfa::dead);
        for (std::uint32_t state = 1; state < dfa.states(); ++state) {
            // breadth-first search for an accepting state
            std::vector<std::uint8_t> seen(dfa.states(), 0);
            std::deque<std::uint32_t> queue{state};
            seen[state] = 1;
            bool reaches = false;
            while (!queue.empty() && !reaches) {
                const std::uint32_t s = queue.front();
                queue.pop_front();
                reaches = dfa.accepting[s] != 0;
                for (int byte = 0; byte < 256; ++byte) {
                    const std::uint32_t t = dfa.next(s, static_cast<unsigned char>(byte));
                    if (!seen[t]) seen[t] = 1, queue.push_back(t);
                }
            }
            CHECK(reaches);
        }
    }
}

TEST_CASE("regex automaton: syntax outside the subset is refused by name and offset", "[constraints][regex]") {
    struct Refusal {
        const char* pattern;
        const char* message;
    };
    const std::vector<Refusal> refusals{
        {"(a)\\1", "backreference \\1 at offset 3 is not supported"},
        {"a(?=b)", "lookahead (?= at offset 1 is not supported"},
        {"a(?!b)", "negative lookahead (?! at offset 1 is not supported"},
        {"(?<=a)b", "lookbehind (?<= at offset 0 is not supported"},
        {"(?<!a)b", "negative lookbehind (?<! at offset 0 is not supported"},
        {"(?<name>a)", "named group (?<name> at offset 0 is not supported"},
        {"(?i)a", "group modifier (?i at offset 0 is not supported"},
        {"a^b", "anchor ^ inside the pattern at offset 1 is not supported"},
        {"a$b", "anchor $ inside the pattern at offset 1 is not supported"},
        {"a\\bc", "word boundary \\b at offset 1 is not supported"},
        {"a*?", "lazy quantifier *? at offset 1 is not supported"},
        {"a{2,3}?", "lazy quantifier {2,3}? at offset 1 is not supported"},
        {"a++", "possessive quantifier ++ at offset 1 is not supported"},
        {"[[:alpha:]]", "POSIX class [: at offset 1 is not supported"},
        {"\\u00e9", "escape \\u (write the character's UTF-8 bytes) at offset 0 is not supported"},
        {"\\q", "escape \\q at offset 0 is not supported"},
        {"(ab", "unclosed group ( opened at offset 0"},
        {"ab)", "unmatched ) at offset 2"},
        {"[ab", "unclosed class [ opened at offset 0"},
        {"[]", "empty class [] at offset 0"},
        {"*a", "quantifier * with nothing to repeat at offset 0"},
        {"a**", "a quantifier after a quantifier at offset 2"},
        {"{", "quantifier { with nothing to repeat"},
        {"a{x}", "malformed repetition { "},
        {"a{3,2}", "repetition {m,n} with n < m at offset 1"},
        {"a{1001}", "repetition count above 1000 at offset 2"},
        {"[z-a]", "class range out of order at offset 1"},
        {"[\\d-z]", "class range starting with a class escape at offset 1"},
        {"a\\", "trailing backslash at offset 1"},
        {"\\xZ1", "malformed escape \\x (expected two hex digits) at offset 0"},
        {"(a{1000}){1000}", "too large"},
    };
    for (const Refusal& refusal : refusals) {
        INFO("pattern " << refusal.pattern);
        CHECK_THROWS_AS(compile_regex(refusal.pattern), specdec::Error);
        CHECK_THROWS_WITH(compile_regex(refusal.pattern), Catch::Contains(refusal.message) &&
                                                              Catch::Contains(std::string("regex \"") + refusal.pattern + "\""));
    }
}
