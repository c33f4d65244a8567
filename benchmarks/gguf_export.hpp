#pragma once
// Writes a Llama model's weights as a GGUF file that llama.cpp loads, so that
// the synthetic models can be run by other engines on the same bytes (e.g.
// llama-bench for a prefill comparison). The tensors carry llama.cpp's names;
// the vocabulary is synthetic, SentencePiece-style, of the model's size:
// <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (so that any text
// tokenises), the word-start mark alone, then made-up word pieces with
// decreasing scores.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec::bench {

namespace detail {

[[nodiscard]] inline gguf::TensorType gguf_tensor_type(WeightType type) {
    switch (type) {
        case WeightType::f32: return gguf::TensorType::f32;
        case WeightType::f16: return gguf::TensorType::f16;
        case WeightType::bf16: return gguf::TensorType::bf16;
        case WeightType::q8_0: return gguf::TensorType::q8_0;
        case WeightType::q4_0: return gguf::TensorType::q4_0;
        case WeightType::q4_1: return gguf::TensorType::q4_1;
        case WeightType::q5_0: return gguf::TensorType::q5_0;
        case WeightType::q5_1: return gguf::TensorType::q5_1;
        case WeightType::q4_k: return gguf::TensorType::q4_K;
        case WeightType::q5_k: return gguf::TensorType::q5_K;
        case WeightType::q6_k: return gguf::TensorType::q6_K;
    }
    throw Error(std::string("GGUF export: weight type ") + weight_type_name(type) + " has no GGUF tensor type");
}

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
    gguf::Writer writer;
    const LlamaConfig& c = w.config;
    writer.add_string("general.architecture", "llama").add_string("general.name", name);
    writer.add_uint32("llama.context_length", static_cast<std::uint32_t>(c.context_length));
    writer.add_uint32("llama.embedding_length", static_cast<std::uint32_t>(c.embedding_dim));
    writer.add_uint32("llama.block_count", static_cast<std::uint32_t>(c.layer_count));
    writer.add_uint32("llama.feed_forward_length", static_cast<std::uint32_t>(c.feed_forward_dim));
    writer.add_uint32("llama.attention.head_count", static_cast<std::uint32_t>(c.head_count));
    writer.add_uint32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.kv_heads()));
    writer.add_uint32("llama.rope.dimension_count", static_cast<std::uint32_t>(c.rotary_dim()));
    writer.add_float32("llama.rope.freq_base", c.rope_freq_base);
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
    writer.add_uint32("llama.vocab_size", static_cast<std::uint32_t>(c.vocab_size));
    add_synthetic_vocabulary(writer, c.vocab_size);
    auto matrix = [&](const std::string& tensor, const WeightMatrix& m) {
        writer.add_tensor(tensor, detail::gguf_tensor_type(m.type), {m.cols, m.rows},
                          std::span<const std::byte>(m.data, m.byte_size()));
    };
    auto vector = [&](const std::string& tensor, const std::vector<float>& v) { writer.add_tensor_f32(tensor, {v.size()}, v); };
    matrix("token_embd.weight", w.token_embedding);
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
        const LlamaLayerWeights& l = w.layers[i];
        const std::string p = "blk." + std::to_string(i) + ".";
        vector(p + "attn_norm.weight", l.attention_norm);
        matrix(p + "attn_q.weight", l.query);
        matrix(p + "attn_k.weight", l.key);
        matrix(p + "attn_v.weight", l.value);
        matrix(p + "attn_output.weight", l.attention_output);
        vector(p + "ffn_norm.weight", l.ffn_norm);
        matrix(p + "ffn_gate.weight", l.ffn_gate);
        matrix(p + "ffn_up.weight", l.ffn_up);
        matrix(p + "ffn_down.weight", l.ffn_down);
    }
    vector("output_norm.weight", w.output_norm);
    if (w.output.data != w.token_embedding.data) matrix("output.weight", w.output);
    writer.write(path);
}

}  // namespace specdec::bench
