// docs/text.md's snippet (extracted by tests/CMakeLists.txt) compiles, and
// runs on the synthetic pair with the stories260K tokenizer: what it
// streams is what it returns.
#include <cstdio>
#include <string>

#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

#include "text_doc_snippet.inc"

TEST_CASE("docs/text.md's chat snippet streams what it returns", "[text][docs]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(specdec::gguf::File::open(path));
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = "tiny", .seed = 3, .threads = 1});
    std::FILE* out = std::tmpfile();
    REQUIRE(out != nullptr);
    const std::string answer = chat_turn(pair.target, pair.draft, tokenizer,
                                                           specdec::text::ChatTemplate::from_name("chatml"), "Hi?", out);
    std::rewind(out);
    std::string streamed;
    for (int c = std::fgetc(out); c != EOF; c = std::fgetc(out)) streamed += static_cast<char>(c);
    std::fclose(out);
    CHECK(streamed == answer);
    CHECK_FALSE(answer.empty());
}
