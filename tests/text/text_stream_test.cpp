// TextStream: stop strings across token boundaries, held-back text, the
// end-of-generation set, include_stop, the callback's verdict; and, over
// random token sequences, agreement with the whole-prefix reference.
#include <cstddef>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/text/text_stream.hpp"
#include "support/catch.hpp"
#include "support/test_random.hpp"
#include "text/text_reference.hpp"
#include "text/text_test_support.hpp"

using specdec::Token;
using specdec::test::ListVocabulary;
using specdec::text::TextEnd;
using specdec::text::TextOptions;
using specdec::text::TextPiece;
using specdec::text::TextStream;

namespace {


// 0 "Hello", 1 " Us", 2 "er", 3 ":", 4 " world", 5 "\n", 6 "" (EOG), 7 "\xC3", 8 "\xA9", 9 "User:"
const ListVocabulary kVocab({"Hello", " Us", "er", ":", " world", "\n", "", "\xC3", "\xA9", "User:"});

}  // namespace

TEST_CASE("A stop string split over tokens ends the text before it, and nothing of it is streamed",
          "[text][stop]") {
    TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"User:"}});
    specdec::test::PieceRecorder seen;
    CHECK(stream.push(0, seen));
    CHECK(seen.text == "Hello");
    CHECK(stream.push(1, seen));  // " Us" might start "User:": "Us" is held
    CHECK(seen.text == "Hello ");
    CHECK(stream.held_bytes() == 2);
    CHECK(stream.push(2, seen));
    CHECK(seen.text == "Hello ");
    CHECK_FALSE(stream.push(3, seen));  // "User:" complete
    CHECK(stream.end() == TextEnd::stop_string);
    CHECK(stream.stop_string_index() == 0u);
    CHECK(stream.text() == "Hello ");
    CHECK(seen.text == "Hello ");
    // " Us" starts before the cut: it is kept (its text runs on into the stop).
    CHECK(stream.tokens() == std::vector<Token>{0, 1});
    CHECK(seen.tokens == stream.tokens());
    CHECK_THROWS_AS(stream.push(0, seen), specdec::Error);
}

TEST_CASE("include_stop keeps the stop string and the tokens through it", "[text][stop]") {
    TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"User:"}, .include_stop = true});
    specdec::test::PieceRecorder seen;
    for (const Token t : {0, 1, 2}) CHECK(stream.push(t, seen));
    CHECK_FALSE(stream.push(3, seen));
    CHECK(stream.text() == "Hello User:");
    CHECK(seen.text == stream.text());
    CHECK(stream.tokens() == std::vector<Token>{0, 1, 2, 3});
    CHECK(seen.tokens == stream.tokens());
}

TEST_CASE("Held text that did not become a stop string is released", "[text][stop]") {
    TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"User:", "\n\n"}});
    specdec::test::PieceRecorder seen;
    CHECK(stream.push(1, seen));
    CHECK(stream.push(4, seen));  // " Us world": no longer a possible stop
    CHECK(seen.text == " Us world");
    CHECK(stream.push(5, seen));  // "\n" may start "\n\n"
    CHECK(seen.text == " Us world");
    CHECK(stream.push(0, seen));
    CHECK(seen.text == " Us world\nHello");
    CHECK(stream.push(5, seen));
    stream.finish(seen);  // the end: the held "\n" comes out
    CHECK(stream.end() == TextEnd::finished);
    CHECK(seen.text == " Us world\nHello\n");
    CHECK(seen.tokens == std::vector<Token>{1, 4, 5, 0, 5});
}

TEST_CASE("A stop inside one token's text, and the stop that completes first wins", "[text][stop]") {
    SECTION("inside a token") {
        TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"ll"}});
        CHECK_FALSE(stream.push(0));
        CHECK(stream.text() == "He");
        CHECK(stream.tokens() == std::vector<Token>{0});
    }
    SECTION("first to complete") {
        // "User:" and "er" both occur in " User:", "er" completes first.
        TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"User:", "er"}});
        CHECK(stream.push(1));
        CHECK_FALSE(stream.push(2));
        CHECK(stream.stop_string_index() == 1u);
        CHECK(stream.text() == " Us");
    }
    SECTION("completing together: the longer") {
        TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"er:", "User:"}});
        CHECK_FALSE(stream.push(9));
        CHECK(stream.stop_string_index() == 1u);
        CHECK(stream.text().empty());
        CHECK(stream.tokens().empty());
    }
    CHECK_THROWS_AS((TextStream<ListVocabulary>(kVocab, {.stop_strings = {""}})), specdec::Error);
}

TEST_CASE("An end-of-generation token ends the text where it stands", "[text][stop]") {
    for (const bool include : {false, true}) {
        TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"User:"}, .include_stop = include,
                                                   .end_of_generation = {6}});
        specdec::test::PieceRecorder seen;
        CHECK(stream.push(0, seen));
        CHECK(stream.push(1, seen));  // "Us" held
        CHECK_FALSE(stream.push(6, seen));
        CHECK(stream.end() == TextEnd::end_of_generation);
        CHECK(stream.text() == "Hello Us");  // no stop string can complete any more
        CHECK(seen.text == stream.text());
        CHECK(stream.tokens() == (include ? std::vector<Token>{0, 1, 6} : std::vector<Token>{0, 1}));
        CHECK(seen.tokens == stream.tokens());
    }
}

TEST_CASE("A split UTF-8 character is held, then matched whole", "[text][stop]") {
    TextStream<ListVocabulary> stream(kVocab, {.stop_strings = {"\xC3\xA9:"}});
    specdec::test::PieceRecorder seen;
    CHECK(stream.push(0, seen));
    CHECK(stream.push(7, seen));
    CHECK(seen.text == "Hello");
    CHECK(stream.push(8, seen));  // "é" complete, and it may start the stop
    CHECK(seen.text == "Hello");
    CHECK_FALSE(stream.push(3, seen));
    CHECK(stream.text() == "Hello");
    CHECK(stream.tokens() == std::vector<Token>{0});
}

TEST_CASE("on_piece returning false ends the text after that piece", "[text][stop]") {
    TextStream<ListVocabulary> stream(kVocab, {});
    int calls = 0;
    auto stop_after_two = [&](const TextPiece&) { return ++calls < 2; };
    CHECK(stream.push(0, stop_after_two));
    CHECK_FALSE(stream.push(4, stop_after_two));
    CHECK(stream.end() == TextEnd::callback);
    CHECK(stream.text() == "Hello world");
}

TEST_CASE("TextStream agrees with the whole-prefix reference on random sequences", "[text][stop]") {
    // Short texts over a small alphabet, so that stop strings occur often,
    // straddle tokens and overlap; split UTF-8 characters; an EOG token.
    std::vector<std::string> texts = {"a", "b", "ab", "ba", "aab", " ", "\n", "b\n", "\xC3", "\xA9", "\xC3\xA9", "",
                                      "c", "bc", "cab"};
    const Token eog = 11;
    const ListVocabulary vocab(texts);
    specdec::test::TestRandom random{42};
    const std::vector<std::vector<std::string>> stop_sets = {
        {"ab"}, {"ba", "\n"}, {"abab", "bab"}, {"\xC3\xA9" "a"}, {"cab", "ab c", "b\n\n"}, {"aaaa"}};
    std::size_t stopped = 0, straddled = 0;
    for (int c = 0; c < 3000; ++c) {
        std::vector<Token> tokens;
        const std::size_t length = 1 + random.below(30);
        for (std::size_t i = 0; i < length; ++i) tokens.push_back(static_cast<Token>(random.below(texts.size())));
        const auto& stops = stop_sets[random.below(stop_sets.size())];
        const bool include = random.below(2) == 0;
        const bool with_eog = random.below(4) == 0;
        const std::vector<Token> eogs = with_eog ? std::vector<Token>{eog} : std::vector<Token>{};
        TextStream<ListVocabulary> stream(vocab, {.stop_strings = stops, .include_stop = include, .end_of_generation = eogs});
        specdec::test::PieceRecorder seen;
        std::size_t consumed = 0;
        for (const Token t : tokens) {
            ++consumed;
            if (!stream.push(t, seen)) break;
        }
        stream.finish(seen);
        const auto decode = [&](std::size_t n) {
            return vocab.decode(std::span<const Token>(tokens).first(n));
        };
        const specdec::test::ReferenceCut expected = specdec::test::reference_cut(tokens, decode, stops, include, eogs);
        INFO("case " << c);
        REQUIRE(stream.text() == expected.text);
        REQUIRE(stream.tokens().size() == expected.tokens);
        REQUIRE(std::equal(stream.tokens().begin(), stream.tokens().end(), tokens.begin()));
        REQUIRE(consumed == expected.consumed);
        REQUIRE(stream.stop_string_index() == expected.stop_string);
        REQUIRE(seen.text == stream.text());
        REQUIRE(seen.tokens == stream.tokens());
        if (expected.stop_string) {
            ++stopped;
            const std::size_t begin = decode(expected.consumed).find(stops[*expected.stop_string]);
            if (begin < decode(expected.consumed - 1).size()) ++straddled;
        }
    }
    CHECK(stopped > 1000);
    CHECK(straddled > 300);
}
