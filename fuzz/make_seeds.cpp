// Writes the seed corpora of the fuzz targets into the directory given as the
// only argument (fuzz/corpus in the repository holds its output):
//   gguf_model/   small valid "llama" GGUF files in F32, F16, Q8_0 and Q4_0,
//                 tied and untied output heads, grouped-query attention
//   tokenizer/    SentencePiece and byte-level BPE vocabularies with texts
//   acceptance/   distributions, options and drafts in the fuzz target's layout
// Each seed is a valid input that reaches deep into its target, so the fuzzer
// mutates from the interesting paths instead of rediscovering the formats.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "specdec/formats/gguf_writer.hpp"
#include "specdec/tensors/weight_matrix.hpp"

namespace {

namespace fs = std::filesystem;
using specdec::WeightType;
using specdec::gguf::TensorType;
using specdec::gguf::Writer;

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_file(const fs::path& path, const std::vector<std::byte>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

struct Shape {
    std::uint32_t vocab, dim, heads, kv_heads, ffn, layers;
    WeightType type;
    bool tied;
};

TensorType tensor_type(WeightType type) {
    switch (type) {
        case WeightType::f32: return TensorType::f32;
        case WeightType::f16: return TensorType::f16;
        case WeightType::bf16: return TensorType::bf16;
        case WeightType::q8_0: return TensorType::q8_0;
        case WeightType::q4_0: return TensorType::q4_0;
    }
    return TensorType::f32;
}

// A deterministic small value per (tensor, element): weights of a plausible scale.
float weight(std::size_t tensor, std::size_t element, float scale) {
    return scale * std::sin(0.7f * static_cast<float>(element) + 1.3f * static_cast<float>(tensor));
}

std::vector<std::byte> llama_file(const Shape& s) {
    Writer writer;
    writer.add_string("general.architecture", "llama").add_string("general.name", "seed");
    writer.add_uint32("llama.context_length", 8).add_uint32("llama.embedding_length", s.dim);
    writer.add_uint32("llama.block_count", s.layers).add_uint32("llama.feed_forward_length", s.ffn);
    writer.add_uint32("llama.attention.head_count", s.heads).add_uint32("llama.attention.head_count_kv", s.kv_heads);
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    std::size_t tensor_index = 0;
    auto matrix = [&](const std::string& name, std::size_t rows, std::size_t cols) {
        std::vector<float> values(rows * cols);
        const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = weight(tensor_index, i, scale);
        ++tensor_index;
        const std::size_t row_bytes = specdec::weight_row_bytes(s.type, cols);
        std::vector<std::byte> bytes(rows * row_bytes);
        for (std::size_t r = 0; r < rows; ++r) specdec::cpu::quantize_row(s.type, &values[r * cols], cols, &bytes[r * row_bytes]);
        writer.add_tensor(name, tensor_type(s.type), {cols, rows}, bytes);
    };
    auto norm = [&](const std::string& name) {
        writer.add_tensor_f32(name, {s.dim}, std::vector<float>(s.dim, 1.0f));
    };
    const std::size_t kv_dim = s.dim / s.heads * s.kv_heads;
    matrix("token_embd.weight", s.vocab, s.dim);
    for (std::uint32_t layer = 0; layer < s.layers; ++layer) {
        const std::string p = "blk." + std::to_string(layer) + ".";
        norm(p + "attn_norm.weight");
        matrix(p + "attn_q.weight", s.dim, s.dim);
        matrix(p + "attn_k.weight", kv_dim, s.dim);
        matrix(p + "attn_v.weight", kv_dim, s.dim);
        matrix(p + "attn_output.weight", s.dim, s.dim);
        norm(p + "ffn_norm.weight");
        matrix(p + "ffn_gate.weight", s.ffn, s.dim);
        matrix(p + "ffn_up.weight", s.ffn, s.dim);
        matrix(p + "ffn_down.weight", s.dim, s.ffn);
    }
    norm("output_norm.weight");
    if (!s.tied) matrix("output.weight", s.vocab, s.dim);
    return writer.bytes();
}

std::vector<std::uint8_t> bytes_of(std::initializer_list<int> values, const std::string& tail = "") {
    std::vector<std::uint8_t> out;
    for (const int v : values) out.push_back(static_cast<std::uint8_t>(v));
    out.insert(out.end(), tail.begin(), tail.end());
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: " << argv[0] << " <corpus directory>\n";
        return 2;
    }
    const fs::path root = argv[1];
    for (const char* name : {"gguf_model", "tokenizer", "acceptance"}) fs::create_directories(root / name);

    const Shape shapes[] = {
        {6, 4, 2, 1, 8, 1, WeightType::f32, true},
        {7, 8, 2, 2, 12, 2, WeightType::f16, false},
        {5, 32, 4, 2, 32, 1, WeightType::q8_0, false},
        {5, 32, 2, 1, 64, 1, WeightType::q4_0, true},
        {4, 8, 1, 1, 8, 1, WeightType::bf16, false},
    };
    int index = 0;
    for (const Shape& shape : shapes) write_file(root / "gguf_model" / ("llama-" + std::to_string(index++) + ".gguf"), llama_file(shape));

    // Tokenizer seeds: flags, piece count, then (header, score, piece) per piece, then the text.
    // header = length | kind << 3 (kind 1 normal, 3 control, 4 user-defined).
    write_file(root / "tokenizer" / "spm-bytes", bytes_of({0x0A, 3, 2 | 1 << 3, 5, 'h', 'e', 3 | 1 << 3, 7, 0xE2, 0x96, 0x81,
                                                           4 | 4 << 3, 0, '<', 'u', 's', '>'},
                                                          "hello world <us> caf\xC3\xA9"));
    write_file(root / "tokenizer" / "spm-no-bytes", bytes_of({0x00, 2, 1 | 1 << 3, 3, 'a', 1 | 1 << 3, 2, 'b'}, "abba ab"));
    write_file(root / "tokenizer" / "bpe-bytes", bytes_of({0x0B, 3, 2 | 1 << 3 | 1 << 6, 0, 'h', 'e', 3 | 1 << 3 | 1 << 6, 0, 'h', 'e', 'l',
                                                           2 | 1 << 3 | 1 << 6, 0, 'l', 'o'},
                                                          "hello helo world\n\t it's 42"));
    write_file(root / "tokenizer" / "bpe-no-bytes", bytes_of({0x01, 2, 1 | 1 << 3, 0, 'x', 2 | 1 << 3 | 1 << 6, 0, 'x', 'y'}, "xyxy z"));

    // Acceptance seeds: vocab-1, k, temperature, top_k, top_p, min_p, mode, position (4), seed (4), logits, tokens.
    auto acceptance = [&](const std::string& name, std::uint8_t vocab_minus_one, std::uint8_t k, std::uint8_t temperature,
                          std::uint8_t top_k, std::uint8_t top_p, std::uint8_t min_p, std::uint8_t mode) {
        std::vector<std::uint8_t> out{vocab_minus_one, k, temperature, top_k, top_p, min_p, mode, 3, 0, 0, 0, 42, 0, 0, 0};
        const std::size_t vocab = vocab_minus_one + 1u;
        for (std::size_t i = 0; i < (2 * k + 1) * vocab; ++i) out.push_back(static_cast<std::uint8_t>(100 + (i * 37) % 60));
        for (std::size_t i = 0; i < k; ++i) out.push_back(static_cast<std::uint8_t>(i % vocab));
        write_file(root / "acceptance" / name, out);
    };
    acceptance("sampled-t1", 4, 3, 0, 0, 0, 0, 0);
    acceptance("point-mass", 7, 4, 0, 0, 0, 0, 1);
    acceptance("greedy", 5, 2, 1, 0, 0, 0, 0);
    acceptance("top-k-top-p-min-p", 9, 3, 2, 4, 1, 1, 0);
    acceptance("raw-rows", 4, 2, 0, 0, 0, 0, 2);
    return 0;
}
