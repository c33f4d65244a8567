// RegexConstraint over a real vocabulary: the stories260K SentencePiece
// tokenizer's token texts (vocabulary_token_texts), masks checked against
// plain string prefix tests, and the tokenizer's own encoding of a matching
// text accepted token by token.
#include <cstddef>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/constraints/token_texts.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

TEST_CASE("regex constraint: over the stories260K tokenizer's texts", "[constraints][regex][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    const specdec::gguf::File file = specdec::gguf::File::open(model_path);
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(file);
    const std::vector<std::string> texts = specdec::vocabulary_token_texts(tokenizer);
    REQUIRE(texts.size() == tokenizer.vocab_size());
    CHECK(texts[static_cast<std::size_t>(tokenizer.bos())].empty());  // control tokens have no text
    CHECK(texts[static_cast<std::size_t>(tokenizer.eos())].empty());

    // A token's text is what it decodes to on its own: SentencePiece's word
    // pieces carry their leading space ("\u2581Once" is " Once").
    const std::string sentence = " Once upon a time";
    specdec::RegexConstraint constraint(sentence, texts, {tokenizer.eos()});
    std::vector<std::uint8_t> mask(texts.size());
    std::string text;
    for (const specdec::Token token : tokenizer.encode(sentence.substr(1), false)) {
        constraint.allowed(mask);
        // Allowed: exactly the tokens whose text continues `text` within the sentence.
        for (std::size_t x = 0; x < texts.size(); ++x) {
            const std::string next = text + texts[x];
            const bool expected = !texts[x].empty() && sentence.compare(0, next.size(), next) == 0;
            REQUIRE(mask[x] == (expected ? 1 : 0));
        }
        CHECK(mask[static_cast<std::size_t>(tokenizer.eos())] == 0);
        REQUIRE(constraint.advance(token));
        text += texts[static_cast<std::size_t>(token)];
    }
    CHECK(text == sentence);
    CHECK(constraint.matches());
    constraint.allowed(mask);
    std::size_t allowed = 0;
    for (const std::uint8_t a : mask) allowed += a;
    CHECK(allowed == 1);  // the sentence is complete: only the end token
    CHECK(mask[static_cast<std::size_t>(tokenizer.eos())] == 1);
}
