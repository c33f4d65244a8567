// The library's own single-request greedy decoding, for the server tests to
// compare the server's answers with:
//   specdec-server-reference SIZE MAX_NEW_TOKENS TOKEN...
//     the embedded synthetic target; prints the generated token ids on one
//     line, separated by spaces.
//   specdec-server-reference chat TARGET.gguf TEMPLATE MAX_NEW_TOKENS ROLE CONTENT [ROLE CONTENT]...
//     the conversation formatted with text::ChatTemplate::from_name(TEMPLATE),
//     encoded with special tokens parsed, decoded until an end-of-generation
//     token; prints the token ids (the end-of-generation token included) on
//     one line and the answer's text, hex-encoded, on the next.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <specdec/formats/tokenizer.hpp>
#include <specdec/models/llama_model.hpp>
#include <specdec/models/synthetic.hpp>
#include <specdec/specdec.hpp>
#include <specdec/text/chat_template.hpp>
#include <specdec/text/text_stream.hpp>

namespace {

void print_tokens(const std::vector<specdec::Token>& tokens) {
    for (std::size_t i = 0; i < tokens.size(); ++i) std::printf(i ? " %d" : "%d", static_cast<int>(tokens[i]));
    std::printf("\n");
}

int chat(int argc, char** argv) {
    if (argc < 7 || (argc - 5) % 2 != 0) {
        std::fprintf(stderr, "usage: %s chat TARGET.gguf TEMPLATE MAX_NEW_TOKENS ROLE CONTENT [ROLE CONTENT]...\n", argv[0]);
        return 2;
    }
    const auto file = specdec::gguf::File::open(argv[2]);
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(file);
    const auto format = specdec::text::ChatTemplate::from_name(argv[3]);
    std::vector<specdec::text::ChatMessage> messages;
    for (int i = 5; i + 1 < argc; i += 2) messages.push_back({argv[i], argv[i + 1]});
    const std::vector<specdec::Token> prompt =
        tokenizer.encode(format.apply(messages), tokenizer.add_bos_by_default(), false, specdec::SpecialTokens::parse);
    specdec::LlamaModel target = specdec::LlamaModel::from_gguf(argv[2], specdec::LlamaOptions{.threads = 1});
    specdec::DecodingOptions options{.max_new_tokens = std::stoul(argv[4])};
    options.sampling.temperature = 0.0;
    options.stop_tokens = tokenizer.end_of_generation();
    const specdec::GenerationResult result = specdec::AutoregressiveDecoder(target, options).generate(prompt);
    specdec::text::TextStream stream(tokenizer, {.end_of_generation = tokenizer.end_of_generation()}, prompt);
    for (const specdec::Token t : result.tokens)
        if (!stream.push(t)) break;
    stream.finish();
    print_tokens(result.tokens);
    for (const char c : stream.text()) std::printf("%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc > 1 && std::string(argv[1]) == "chat") return chat(argc, argv);
        if (argc < 4) {
            std::fprintf(stderr, "usage: %s SIZE MAX_NEW_TOKENS TOKEN...\n", argv[0]);
            return 2;
        }
        specdec::SyntheticOptions synthetic{.size = argv[1], .threads = 1};
        specdec::LlamaModel target = specdec::make_synthetic_target(synthetic);
        specdec::DecodingOptions options{.max_new_tokens = std::stoul(argv[2])};
        options.sampling.temperature = 0.0;
        std::vector<specdec::Token> prompt;
        for (int i = 3; i < argc; ++i) prompt.push_back(static_cast<specdec::Token>(std::stol(argv[i])));
        print_tokens(specdec::AutoregressiveDecoder(target, options).generate(prompt).tokens);
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s\n", error.what());
        return 1;
    }
}
