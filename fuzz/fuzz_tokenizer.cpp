// Arbitrary vocabularies and texts through the tokenizer: a SentencePiece
// ("llama") or byte-level BPE ("gpt2") vocabulary is built from the fuzzer's
// bytes, written as GGUF and loaded; then the rest of the input is encoded and
// decoded, whole and token by token through the stream decoder.
//
// Properties: loading either succeeds or throws specdec::Error; encoding never
// produces an id outside the vocabulary; decoding any in-range ids works and
// an out-of-range id is an Error; and when the vocabulary can spell every byte
// (the 256 byte tokens of SentencePiece's byte fallback plus its escaped space
// U+2581, or the 256 byte-level characters of BPE) and the fuzzer's own pieces
// are normal or control ones,
// decode(encode(text)) == text; the stream decoder always yields decode()'s text.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"

namespace {

using specdec::Token;
using specdec::TokenKind;

std::string bpe_byte_char(unsigned char byte) {
    std::string out;
    specdec::detail::append_utf8(out, specdec::detail::byte_to_unicode()[byte]);
    return out;
}

// Printable ASCII as is, every other byte as \xNN.
std::string escaped(const std::string& text) {
    std::string out;
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
            out += c;
        } else {
            char buffer[8];
            std::snprintf(buffer, sizeof buffer, "\\x%02X", byte);
            out += buffer;
        }
    }
    return out;
}

}  // namespace

namespace {

std::shared_ptr<const specdec::Tokenizer> load(bool bpe, bool no_space_prefix, const std::vector<std::string>& pieces,
                                               const std::vector<float>& scores, const std::vector<std::int32_t>& kinds,
                                               const std::vector<std::string>& merges) {
    static specdec::fuzz::MemoryFile memory;
    specdec::gguf::Writer writer;
    writer.add_string("tokenizer.ggml.model", bpe ? "gpt2" : "llama");
    writer.add_string_array("tokenizer.ggml.tokens", pieces);
    writer.add_float32_array("tokenizer.ggml.scores", scores);
    writer.add_int32_array("tokenizer.ggml.token_type", kinds);
    if (bpe) {
        writer.add_string_array("tokenizer.ggml.merges", merges);
        writer.add_uint32("tokenizer.ggml.bos_token_id", 0);
        writer.add_uint32("tokenizer.ggml.eos_token_id", 0);
    }
    if (no_space_prefix) writer.add_bool("tokenizer.ggml.add_space_prefix", false);
    try {
        const auto file = specdec::gguf::File::open(memory.write(writer.bytes()));
        return std::make_shared<const specdec::Tokenizer>(specdec::Tokenizer::from_gguf(file));
    } catch (const specdec::Error&) {
        return nullptr;  // a vocabulary the loader rejects (empty pieces, malformed merges, ...)
    }
}

void check(const specdec::Tokenizer& tokenizer, std::size_t pieces, const std::string& text, bool add_bos, bool round_trip_holds) {
    const std::size_t vocab = tokenizer.vocab_size();
    SPECDEC_FUZZ_ASSERT(vocab == pieces);
    std::vector<Token> tokens;
    try {
        tokens = tokenizer.encode(text, add_bos);
    } catch (const specdec::Error&) {
        // Text the vocabulary cannot spell and no unknown token to stand in:
        // an Error, which a vocabulary that spells every byte never raises.
        SPECDEC_FUZZ_ASSERT(!round_trip_holds);
        return;
    }
    for (const Token token : tokens) SPECDEC_FUZZ_ASSERT(token >= 0 && static_cast<std::size_t>(token) < vocab);
    const std::string decoded = tokenizer.decode(tokens);
    specdec::Tokenizer::StreamDecoder stream(tokenizer);
    std::string streamed;
    for (const Token token : tokens) streamed += stream.push(token);
    streamed += stream.flush();
    SPECDEC_FUZZ_ASSERT(streamed == decoded);
    if (round_trip_holds && decoded != text) {
        std::fprintf(stderr, "text:    %s\ndecoded: %s\ntokens: ", escaped(text).c_str(), escaped(decoded).c_str());
        for (const Token token : tokens) std::fprintf(stderr, "%d '%s' ", token, escaped(tokenizer.token_piece(token)).c_str());
        std::fprintf(stderr, "\n");
        specdec::fuzz::property_failed("decode(encode(text)) == text");
    }

    // Decoding arbitrary ids: in range works, out of range is an Error.
    std::vector<Token> arbitrary;
    for (std::size_t i = 0; i < text.size() / 4 && i < 16; ++i) {
        arbitrary.push_back(static_cast<Token>(static_cast<std::uint8_t>(text[4 * i])) - 2);
    }
    bool in_range = true;
    for (const Token token : arbitrary) in_range &= token >= 0 && static_cast<std::size_t>(token) < vocab;
    try {
        (void)tokenizer.decode(arbitrary);
        SPECDEC_FUZZ_ASSERT(in_range);
    } catch (const specdec::Error&) {
        SPECDEC_FUZZ_ASSERT(!in_range);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    specdec::fuzz::ByteReader in(data, size);
    const std::uint8_t flags = in.byte();
    const bool bpe = (flags & 1) != 0;
    const bool spell_every_byte = (flags & 2) != 0;
    const bool no_space_prefix = (flags & 4) != 0;
    const bool add_bos = (flags & 8) != 0;

    // Fixed specials first (<unk> <s> </s> for SentencePiece, one control token
    // for BPE), then the fuzzer's pieces, then optionally every byte.
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<std::int32_t> kinds;
    std::vector<std::string> merges;
    auto add = [&](std::string piece, float score, TokenKind kind) {
        pieces.push_back(std::move(piece));
        scores.push_back(score);
        kinds.push_back(static_cast<std::int32_t>(kind));
    };
    if (bpe) {
        add("<|endoftext|>", 0, TokenKind::control);
    } else {
        add("<unk>", 0, TokenKind::unknown);
        add("<s>", 0, TokenKind::control);
        add("</s>", 0, TokenKind::control);
    }
    bool round_trip_holds = spell_every_byte;
    const std::size_t fuzzed_pieces = in.byte() % 24;
    for (std::size_t i = 0; i < fuzzed_pieces; ++i) {
        const std::uint8_t header = in.byte();
        const std::size_t length = header % 8;
        const auto kind = static_cast<TokenKind>((header >> 3) % 7);
        const float score = static_cast<float>(static_cast<std::int8_t>(in.byte()));
        std::string piece = in.string(length);
        if (kind != TokenKind::normal && kind != TokenKind::undefined && kind != TokenKind::control) round_trip_holds = false;
        if (bpe && piece.size() >= 2) {
            // A merge rule splitting the piece at a fuzzed point (possibly a
            // malformed one: a space inside either half).
            const std::size_t split = 1 + (header >> 6) % (piece.size() - 1);
            merges.push_back(piece.substr(0, split) + " " + piece.substr(split));
        }
        add(std::move(piece), score, kind);
    }
    if (spell_every_byte) {
        // SentencePiece vocabularies always hold the escaped space itself; without
        // it a space falls back to the three bytes of U+2581 and decodes as them.
        if (!bpe) add("\xE2\x96\x81", 0, TokenKind::normal);
        static constexpr char hex[] = "0123456789ABCDEF";
        for (int byte = 0; byte < 256; ++byte) {
            if (bpe) {
                add(bpe_byte_char(static_cast<unsigned char>(byte)), 0, TokenKind::normal);
            } else {
                add(std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">", 0, TokenKind::byte);
            }
        }
    }
    const std::size_t vocabulary_bytes = size - in.remaining();
    const std::string text = in.rest();
    // SentencePiece: without BOS the space prefix that encode adds stays in the
    // decoded text; and a literal U+2581 in the text is read as an escaped space.
    if (!bpe && !add_bos && !no_space_prefix) round_trip_holds = false;
    if (!bpe && text.find("\xE2\x96\x81") != std::string::npos) round_trip_holds = false;

    // Most mutations change only the text: loading is a pure function of the
    // vocabulary bytes, so recently loaded tokenizers (or the Error a
    // vocabulary raised) are reused instead of loaded again.
    static std::unordered_map<std::string, std::shared_ptr<const specdec::Tokenizer>> loaded;
    if (loaded.size() > 512) loaded.clear();
    const std::string key(reinterpret_cast<const char*>(data), vocabulary_bytes);
    auto found = loaded.find(key);
    if (found == loaded.end()) found = loaded.emplace(key, load(bpe, no_space_prefix, pieces, scores, kinds, merges)).first;
    if (!found->second) return 0;  // the loader rejected this vocabulary with a specdec::Error
    check(*found->second, pieces.size(), text, add_bos, round_trip_holds);
    return 0;
}
