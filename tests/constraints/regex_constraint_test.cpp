// RegexConstraint's masks against brute force (each token's text appended to
// the text so far, run from the automaton's start), its rollback, end tokens,
// control tokens, and the dead-end error of detail::constraint_mask_after.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/constraints/token_texts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/sampling/token_constraint.hpp"
#include "support/catch.hpp"
#include "support/test_random.hpp"

using specdec::RegexConstraint;
using specdec::Token;

namespace {

constexpr Token kEndToken = 2;
const std::string kJsonPattern = R"(\{"id": [0-9]{1,4}, "name": "[a-z]{1,8}"\})";

using specdec::test::TestRandom;

// The mask by definition: a text token is allowed when the text so far plus
// its text is still a prefix of some match (the automaton from its start over
// the whole text is not dead), an end token when the text so far matches.
std::vector<std::uint8_t> brute_force_mask(const RegexConstraint& constraint, const std::vector<std::string>& texts,
                                           const std::string& text, bool finished) {
    const auto& dfa = constraint.automaton();
    std::vector<std::uint8_t> mask(texts.size(), 0);
    for (std::size_t token = 0; token < texts.size(); ++token) {
        if (static_cast<Token>(token) == kEndToken)
            mask[token] = finished || dfa.matches(text) ? 1 : 0;
        else if (!finished && !texts[token].empty())
            mask[token] = dfa.run(dfa.start, text + texts[token]) != specdec::regex::ByteDfa::dead ? 1 : 0;
    }
    return mask;
}

std::vector<std::uint8_t> mask_of(RegexConstraint& constraint) {
    std::vector<std::uint8_t> mask(constraint.vocab_size());
    constraint.allowed(mask);
    return mask;
}

Token pick_allowed(const std::vector<std::uint8_t>& mask, TestRandom& random) {
    std::vector<Token> allowed;
    for (std::size_t token = 0; token < mask.size(); ++token)
        if (mask[token]) allowed.push_back(static_cast<Token>(token));
    return allowed[random.below(allowed.size())];
}

}  // namespace

TEST_CASE("regex constraint: masks agree with brute force along random allowed paths", "[constraints][regex]") {
    const std::vector<std::string> texts = specdec::synthetic_token_texts(3000, 11);
    for (const std::string& pattern : {kJsonPattern, std::string("(ab|[0-9]{2})+( x)?"), std::string("[^\"]{0,6}\"")}) {
        INFO("pattern " << pattern);
        RegexConstraint constraint(pattern, texts, {kEndToken});
        TestRandom random{99};
        std::size_t ended = 0;
        for (int walk = 0; walk < 40; ++walk) {
            constraint.reset();
            std::string text;
            bool finished = false;
            for (std::size_t step = 0; step < 30; ++step) {
                const std::vector<std::uint8_t> mask = mask_of(constraint);
                REQUIRE(mask == brute_force_mask(constraint, texts, text, finished));
                CHECK(mask[0] == 0);  // control tokens, never allowed
                CHECK(mask[1] == 0);
                CHECK(constraint.finished() == finished);
                const Token token = pick_allowed(mask, random);
                REQUIRE(constraint.advance(token));
                CHECK(constraint.depth() == step + 1);
                if (token == kEndToken) {
                    CHECK((finished || constraint.automaton().matches(text)));
                    finished = true;
                } else {
                    text += texts[static_cast<std::size_t>(token)];
                }
            }
            ended += finished ? 1 : 0;
        }
        CHECK(ended > 0);
    }
}

TEST_CASE("regex constraint: advance refuses what the mask refuses and stays put", "[constraints][regex]") {
    const std::vector<std::string> texts = specdec::synthetic_token_texts(3000, 5);
    RegexConstraint constraint(kJsonPattern, texts, {kEndToken});
    TestRandom random{3};
    for (int step = 0; step < 12; ++step) {
        const std::vector<std::uint8_t> mask = mask_of(constraint);
        for (std::size_t token = 0; token < mask.size(); ++token) {
            if (mask[token]) continue;
            REQUIRE_FALSE(constraint.advance(static_cast<Token>(token)));
        }
        CHECK(mask_of(constraint) == mask);
        CHECK(constraint.depth() == static_cast<std::size_t>(step));
        CHECK_FALSE(constraint.advance(-1));
        CHECK_FALSE(constraint.advance(static_cast<Token>(texts.size())));
        REQUIRE(constraint.advance(pick_allowed(mask, random)));
    }
}

TEST_CASE("regex constraint: rollback restores the masks of earlier states", "[constraints][regex]") {
    const std::vector<std::string> texts = specdec::synthetic_token_texts(2000, 21);
    RegexConstraint constraint(kJsonPattern, texts, {kEndToken});
    TestRandom random{17};
    std::vector<std::vector<std::uint8_t>> masks{mask_of(constraint)};
    for (int step = 0; step < 25; ++step) {
        REQUIRE(constraint.advance(pick_allowed(masks.back(), random)));
        masks.push_back(mask_of(constraint));
    }
    for (const std::size_t back : {3u, 1u, 7u, 0u, 5u}) {
        constraint.rollback(back);
        masks.resize(masks.size() - back);
        CHECK(constraint.depth() + 1 == masks.size());
        CHECK(mask_of(constraint) == masks.back());
    }
    // The path forward again from a rolled-back state gives that path's masks.
    const std::size_t depth = constraint.depth();
    REQUIRE(constraint.advance(pick_allowed(masks.back(), random)));
    constraint.rollback(1);
    CHECK(constraint.depth() == depth);
    CHECK(mask_of(constraint) == masks.back());
    CHECK_THROWS_WITH(constraint.rollback(depth + 1), Catch::Contains("rollback of") && Catch::Contains("advances"));
    constraint.reset();
    CHECK(constraint.depth() == 0);
    CHECK(mask_of(constraint) == masks.front());
    // Precomputed masks are the lazily built ones: every live state and finished.
    RegexConstraint eager(kJsonPattern, texts, {kEndToken});
    eager.precompute_masks();
    CHECK(eager.cached_masks() == eager.automaton().states());
    CHECK(mask_of(eager) == masks.front());
}

TEST_CASE("regex constraint: end tokens only on a match, and only end tokens after one", "[constraints][regex]") {
    //                                  0   1   2   3    4    5     6
    const std::vector<std::string> texts{"", "", "", "a", "b", "ab", "c"};
    RegexConstraint constraint("(ab)+", texts, {kEndToken, 1});
    using Mask = std::vector<std::uint8_t>;
    CHECK(mask_of(constraint) == Mask{0, 0, 0, 1, 0, 1, 0});
    REQUIRE(constraint.advance(3));
    CHECK(mask_of(constraint) == Mask{0, 0, 0, 0, 1, 0, 0});
    CHECK_FALSE(constraint.advance(kEndToken));
    REQUIRE(constraint.advance(4));
    CHECK(constraint.matches());
    CHECK(mask_of(constraint) == Mask{0, 1, 1, 1, 0, 1, 0});
    REQUIRE(constraint.advance(kEndToken));
    CHECK(constraint.finished());
    CHECK_FALSE(constraint.matches());
    CHECK(mask_of(constraint) == Mask{0, 1, 1, 0, 0, 0, 0});
    CHECK_FALSE(constraint.advance(5));
    REQUIRE(constraint.advance(1));
    CHECK(constraint.depth() == 4);
    constraint.rollback(2);
    CHECK(constraint.matches());
    // After warm-up every state asked for has its mask cached: (start, "a",
    // "ab", finished).
    CHECK(constraint.cached_masks() == 4);
}

TEST_CASE("regex constraint: a state where no token fits is a clear error through constraint_mask_after",
          "[constraints][regex]") {
    // The vocabulary spells "a" but not "b": after "a" the pattern "ab" is stuck.
    const std::vector<std::string> texts{"", "", "", "a", "c"};
    RegexConstraint stuck("ab", texts, {kEndToken});
    std::vector<std::uint8_t> mask(texts.size());
    const std::vector<Token> path{3};
    CHECK_THROWS_WITH(specdec::detail::constraint_mask_after(stuck, path, mask, 5),
                      Catch::Contains("invalid sampling option constraint: regex constraint \"ab\" allows no token at position 5"));
    CHECK(stuck.depth() == 0);  // left where it was
    RegexConstraint never("q+", texts, {kEndToken});
    CHECK_THROWS_WITH(specdec::detail::constraint_mask_after(never, {}, mask, 0),
                      Catch::Contains("regex constraint \"q+\" allows no token at position 0"));
    // A path the constraint refuses is reported, not thrown: mask untouched.
    RegexConstraint fine("a+", texts, {kEndToken});
    std::vector<std::uint8_t> untouched(texts.size(), 7);
    const std::vector<Token> refused{3, 4};
    CHECK_FALSE(specdec::detail::constraint_mask_after(fine, refused, untouched, 0));
    CHECK(untouched == std::vector<std::uint8_t>(texts.size(), 7));
    CHECK(fine.depth() == 0);
    CHECK(specdec::detail::constraint_mask_after(fine, path, untouched, 0));
    CHECK(untouched == std::vector<std::uint8_t>{0, 0, 1, 1, 0});
}

TEST_CASE("regex constraint: bad arguments are named", "[constraints][regex]") {
    const std::vector<std::string> texts{"", "", "", "a"};
    CHECK_THROWS_WITH(RegexConstraint("a", texts, {9}), Catch::Contains("end token 9 is outside the vocabulary [0, 4)"));
    CHECK_THROWS_WITH(RegexConstraint("a", texts, {}), Catch::Contains("no end token"));
    CHECK_THROWS_WITH(RegexConstraint("a", {}, {0}), Catch::Contains("the vocabulary (token_texts) is empty"));
    CHECK_THROWS_WITH(RegexConstraint("a(?=b)", texts, {2}), Catch::Contains("lookahead (?= at offset 1"));
    RegexConstraint constraint("a", texts, {kEndToken});
    std::vector<std::uint8_t> short_mask(3);
    CHECK_THROWS_WITH(constraint.allowed(short_mask), Catch::Contains("mask of 3 entries for a vocabulary of 4 tokens"));
    CHECK(constraint.name() == "regex constraint \"a\"");
}

TEST_CASE("token texts: from a vocabulary, and the seeded synthetic ones", "[constraints]") {
    struct Vocabulary {
        std::vector<std::string> pieces;
        [[nodiscard]] std::size_t vocab_size() const { return pieces.size(); }
        [[nodiscard]] const std::string& token_text(Token t) const { return pieces.at(static_cast<std::size_t>(t)); }
    };
    const Vocabulary vocabulary{{"", "hello", " world", "\n"}};
    CHECK(specdec::vocabulary_token_texts(vocabulary) == vocabulary.pieces);

    const std::vector<std::string> texts = specdec::synthetic_token_texts(32000, 1);
    REQUIRE(texts.size() == 32000);
    CHECK(texts == specdec::synthetic_token_texts(32000, 1));
    CHECK(texts != specdec::synthetic_token_texts(32000, 2));
    CHECK(texts[0].empty());
    CHECK(texts[1].empty());
    CHECK(texts[2].empty());
    std::set<char> singles;
    std::set<std::string> pieces;
    for (std::size_t id = 3; id < texts.size(); ++id) {
        const std::string& text = texts[id];
        REQUIRE(!text.empty());
        REQUIRE(text.size() <= 4);
        for (const char c : text) REQUIRE((c >= ' ' && c <= '~'));
        if (text.size() == 1) singles.insert(text[0]);
        else pieces.insert(text);
    }
    CHECK(singles.size() == 95);  // every printable character, ' ' to '~'
    CHECK(pieces.size() > 20000);  // mostly distinct pieces
    CHECK_THROWS_WITH(specdec::synthetic_token_texts(50), Catch::Contains("no room for 3 control tokens"));
}
