// The library's own single-request greedy decoding on the embedded synthetic
// target, for the server tests to compare the server's tokens with:
//   specdec-server-reference SIZE MAX_NEW_TOKENS TOKEN...
// prints the generated token ids on one line, separated by spaces.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <specdec/models/synthetic.hpp>
#include <specdec/specdec.hpp>

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s SIZE MAX_NEW_TOKENS TOKEN...\n", argv[0]);
        return 2;
    }
    try {
        specdec::SyntheticOptions synthetic{.size = argv[1], .threads = 1};
        specdec::LlamaModel target = specdec::make_synthetic_target(synthetic);
        specdec::DecodingOptions options{.max_new_tokens = std::stoul(argv[2])};
        options.sampling.temperature = 0.0;
        std::vector<specdec::Token> prompt;
        for (int i = 3; i < argc; ++i) prompt.push_back(static_cast<specdec::Token>(std::stol(argv[i])));
        const specdec::GenerationResult result = specdec::AutoregressiveDecoder(target, options).generate(prompt);
        for (std::size_t i = 0; i < result.tokens.size(); ++i) std::printf(i ? " %d" : "%d", static_cast<int>(result.tokens[i]));
        std::printf("\n");
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s\n", error.what());
        return 1;
    }
}
