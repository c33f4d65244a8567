// The GGUF reader on the real stories260K model files (see ../shared/fixtures/README.md).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include <string>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using specdec::gguf::File;
using specdec::gguf::TensorType;

TEST_CASE("The stories260K GGUF has the hyper-parameters its README states", "[gguf][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    const File file = File::open(path);

    CHECK(file.version() == 3);
    CHECK(file.get_string("general.architecture") == "llama");
    CHECK(file.get_uint("llama.block_count") == 5);
    CHECK(file.get_uint("llama.embedding_length") == 64);
    CHECK(file.get_uint("llama.attention.head_count") == 8);
    CHECK(file.get_uint("llama.attention.head_count_kv") == 4);
    CHECK(file.get_uint("llama.feed_forward_length") == 172);
    CHECK(file.get_uint("llama.context_length") == 128);
    CHECK(file.get_uint("llama.rope.dimension_count") == 8);
    CHECK(std::abs(file.get_float("llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-9);
    CHECK_FALSE(file.has("llama.rope.freq_base"));  // the README's 10000 is the llama default

    CHECK(file.get_string("tokenizer.ggml.model") == "llama");
    CHECK(file.get_string_array("tokenizer.ggml.tokens").size() == 512);
    CHECK(file.get_float_array("tokenizer.ggml.scores").size() == 512);
    CHECK(file.get_int_array("tokenizer.ggml.token_type").size() == 512);
    CHECK(file.get_uint("tokenizer.ggml.bos_token_id") == 1);
    CHECK(file.get_uint("tokenizer.ggml.eos_token_id") == 2);
    CHECK(file.array_element_type("tokenizer.ggml.tokens") == specdec::gguf::ValueType::string);
    CHECK(file.array_size("tokenizer.ggml.scores") == 512);
}

TEST_CASE("The stories260K GGUF lists its 48 F32 tensors with ggml shapes and aligned data", "[gguf][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    const File file = File::open(path);

    REQUIRE(file.tensors().size() == 2 + 1 + 5 * 9);
    const auto& embedding = file.tensor("token_embd.weight");
    CHECK(embedding.type == TensorType::f32);
    CHECK(embedding.shape == std::vector<std::uint64_t>{64, 512});  // 64 contiguous floats per token
    CHECK(embedding.element_count == 64 * 512);
    CHECK(embedding.byte_size == 64 * 512 * 4);

    CHECK(file.tensor("output.weight").shape == std::vector<std::uint64_t>{64, 512});
    CHECK(file.tensor("blk.0.attn_k.weight").shape == std::vector<std::uint64_t>{64, 32});  // 4 KV heads of 8
    CHECK(file.tensor("blk.4.ffn_down.weight").shape == std::vector<std::uint64_t>{172, 64});
    CHECK(file.find_tensor("blk.5.attn_q.weight") == nullptr);

    for (const auto& tensor : file.tensors()) {
        INFO(tensor.name);
        CHECK(tensor.type == TensorType::f32);
        CHECK(reinterpret_cast<std::uintptr_t>(tensor.data) % 32 == 0);
    }

    // RMSNorm weights of a trained model are finite and mostly positive (a
    // wrong data offset or element type reads other bytes and breaks this).
    const auto& norm = file.tensor("output_norm.weight");
    REQUIRE(norm.element_count == 64);
    std::vector<float> weights(norm.element_count);
    std::memcpy(weights.data(), norm.data, weights.size() * sizeof(float));
    std::size_t finite = 0, positive = 0;
    for (const float w : weights) {
        finite += std::isfinite(w) ? 1 : 0;
        positive += w > 0.0f ? 1 : 0;
    }
    CHECK(finite == weights.size());
    CHECK(positive >= weights.size() * 9 / 10);
}

TEST_CASE("The quantised stories260K files hold the tensor types their README states", "[gguf][fixture]") {
    const auto block_bytes = [](std::uint64_t elements, std::uint64_t per_block) { return elements / 32 * per_block; };

    SECTION("Q8_0") {
        SPECDEC_REQUIRE_FIXTURE(path, "stories260K-q8_0.gguf");
        const File file = File::open(path);
        CHECK(file.tensor("blk.0.attn_q.weight").type == TensorType::q8_0);
        CHECK(file.tensor("blk.0.attn_q.weight").byte_size == block_bytes(64 * 64, 34));
        CHECK(file.tensor("blk.2.ffn_gate.weight").type == TensorType::q8_0);
        CHECK(file.tensor("blk.2.ffn_down.weight").type == TensorType::f16);  // 172 columns: not whole blocks
        CHECK(file.tensor("blk.2.ffn_down.weight").byte_size == 172 * 64 * 2);
        CHECK(file.tensor("output.weight").type == TensorType::q8_0);
        CHECK(file.tensor("output_norm.weight").type == TensorType::f32);
        CHECK(file.tensor("blk.3.attn_norm.weight").type == TensorType::f32);
        CHECK(file.get_uint("llama.block_count") == 5);
    }
    SECTION("Q4_0") {
        SPECDEC_REQUIRE_FIXTURE(path, "stories260K-q4_0.gguf");
        const File file = File::open(path);
        CHECK(file.tensor("blk.0.attn_q.weight").type == TensorType::q4_0);
        CHECK(file.tensor("blk.0.attn_q.weight").byte_size == block_bytes(64 * 64, 18));
        CHECK(file.tensor("blk.4.ffn_up.weight").type == TensorType::q4_0);
        CHECK(file.tensor("blk.4.ffn_down.weight").type == TensorType::f16);
        CHECK(file.tensor("output.weight").type == TensorType::q8_0);
        CHECK(file.tensor("blk.1.ffn_norm.weight").type == TensorType::f32);
        CHECK(file.get_string_array("tokenizer.ggml.tokens").size() == 512);
    }
}
