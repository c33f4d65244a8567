#pragma once
// Writes a Llama model as a GGUF file that llama.cpp loads, so that the
// synthetic models can be run by other engines on the same bytes (e.g.
// llama-bench for a prefill comparison): the model through
// llama_gguf_writer(), plus a synthetic SentencePiece-style vocabulary of the
// model's size: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (so that
// any text tokenises), the word-start mark alone, then made-up word pieces
// with decreasing scores.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/models/llama_gguf_writer.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec::bench {

namespace detail {

// Token types of llama.cpp's SentencePiece vocabularies.
enum SpmTokenType : std::int32_t { spm_normal = 1, spm_unknown = 2, spm_control = 3, spm_byte = 6 };

// A unique lower-case word for piece index i ("a", "b", ..., "z", "aa", ...).
[[nodiscard]] inline std::string synthetic_word(std::size_t i) {
    std::string word;
    do {
        word.insert(word.begin(), static_cast<char>('a' + i % 26));
        i /= 26;
    } while (i-- > 0);
    return word;
}

}  // namespace detail

// Tokens before the first made-up word: <unk>, <s>, </s>, 256 byte tokens and the word-start mark.
inline constexpr std::size_t kSyntheticVocabularyReserved = 3 + 256 + 1;

inline void add_synthetic_vocabulary(gguf::Writer& writer, std::size_t vocab_size) {
    if (vocab_size < kSyntheticVocabularyReserved) {
        throw Error("GGUF export: vocabulary of " + std::to_string(vocab_size) + " tokens; expected at least " +
                    std::to_string(kSyntheticVocabularyReserved) + " (3 special tokens, 256 byte tokens and the word-start mark)");
    }
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    std::vector<std::int32_t> types{detail::spm_unknown, detail::spm_control, detail::spm_control};
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
        types.push_back(detail::spm_byte);
    }
    // U+2581, SentencePiece's word-start mark (a space), is a piece of its own
    // as in real vocabularies: without it a space would decode as the mark's bytes.
    const std::string mark = "\xE2\x96\x81";
    tokens.push_back(mark);
    types.push_back(detail::spm_normal);
    for (std::size_t i = 0; tokens.size() < vocab_size; ++i) {
        tokens.push_back(mark + detail::synthetic_word(i));
        types.push_back(detail::spm_normal);
    }
    std::vector<float> scores(vocab_size, 0.0f);
    for (std::size_t i = kSyntheticVocabularyReserved; i < vocab_size; ++i) scores[i] = -static_cast<float>(i - kSyntheticVocabularyReserved);
    writer.add_string("tokenizer.ggml.model", "llama");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_float32_array("tokenizer.ggml.scores", scores);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0);
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1);
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2);
    writer.add_bool("tokenizer.ggml.add_bos_token", true);
}

// The file's bytes are the model's own: loading it back gives the same logits.
inline void write_llama_gguf(const LlamaWeights& w, const std::string& name, const std::filesystem::path& path) {
    gguf::Writer writer = llama_gguf_writer(w, name);
    writer.add_uint32(w.config.rope_style == RopeStyle::halves ? "qwen2.vocab_size" : "llama.vocab_size",
                      static_cast<std::uint32_t>(w.config.vocab_size));
    add_synthetic_vocabulary(writer, w.config.vocab_size);
    writer.write(path);
}

}  // namespace specdec::bench
