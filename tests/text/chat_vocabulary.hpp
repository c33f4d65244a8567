#pragma once
// Byte-level BPE vocabularies for the chat tests: ids 0-255 are the byte
// characters (GPT-2's byte-to-unicode spelling), then the given special
// pieces, no merges. They give a chat family's markers and end-of-turn
// tokens where the committed fixtures' vocabularies hold none.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/formats/tokenizer_bpe.hpp"

namespace specdec::test {

struct SpecialPiece {
    std::string piece;
    std::int32_t type = 3;  // tokenizer.ggml.token_type: 3 control, 4 user-defined, 1 normal
};

// The piece that stands for `byte` in a byte-level vocabulary.
inline std::string byte_level_piece(unsigned char byte) {
    std::string piece;
    detail::append_utf8(piece, detail::byte_to_unicode()[byte]);
    return piece;
}

// The tokenizer.ggml.* keys of such a vocabulary, BOS and EOS given by id.
inline gguf::Writer byte_level_vocabulary(const std::vector<SpecialPiece>& specials, std::uint32_t bos,
                                          std::uint32_t eos) {
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (int byte = 0; byte < 256; ++byte) {
        tokens.push_back(byte_level_piece(static_cast<unsigned char>(byte)));
        types.push_back(1);
    }
    for (const SpecialPiece& special : specials) {
        tokens.push_back(special.piece);
        types.push_back(special.type);
    }
    gguf::Writer writer;
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string("tokenizer.ggml.pre", "llama-bpe");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
    writer.add_uint32("tokenizer.ggml.bos_token_id", bos);
    writer.add_uint32("tokenizer.ggml.eos_token_id", eos);
    return writer;
}

// The id of `piece` in `tokenizer`; throws where it has none.
inline Token token_of(const Tokenizer& tokenizer, std::string_view piece) {
    for (std::size_t i = 0; i < tokenizer.vocab_size(); ++i)
        if (tokenizer.token_piece(static_cast<Token>(i)) == piece) return static_cast<Token>(i);
    throw Error("no token " + std::string(piece));
}

}  // namespace specdec::test
