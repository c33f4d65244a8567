// Seeded random corruption of valid GGUF files: opening a corrupted file must
// either succeed or throw specdec::Error, and a file that opens must be safe
// to read completely. Under the ASan/UBSan build this also proves that no
// corruption makes the reader touch memory outside the mapping.
#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using specdec::gguf::File;
using specdec::gguf::TensorType;
using specdec::gguf::ValueType;
using specdec::gguf::Writer;

namespace {

Writer fuzz_seed_model() {
    Writer writer;
    writer.add_string("general.architecture", "llama").add_uint32("llama.block_count", 2);
    writer.add_string("tokenizer.ggml.model", "llama");
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f).add_bool("tokenizer.ggml.add_bos_token", true);
    writer.add_int64("signed", -3).add_uint64("big", 1u << 20).add_uint8("byte", 7).add_float64("pi", 3.14159);
    const std::vector<std::string> tokens{"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "a", "b"};
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_float32_array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, -2, -3});
    writer.add_int32_array("tokenizer.ggml.token_type", std::vector<std::int32_t>{2, 3, 3, 1, 1, 1});
    writer.add_raw("nested", ValueType::array, specdec::test::nested_array(ValueType::int16));
    writer.add_tensor_f32("token_embd.weight", {4, 6}, std::vector<float>(24, 0.5f));
    writer.add_tensor("blk.0.attn_q.weight", TensorType::q8_0, {32, 2}, std::vector<std::byte>(2 * 34));
    writer.add_tensor("blk.0.attn_k.weight", TensorType::q4_0, {64}, std::vector<std::byte>(2 * 18));
    writer.add_tensor("blk.0.ffn_down.weight", TensorType::f16, {3, 5}, std::vector<std::byte>(30));
    return writer;
}

// Reads everything a successfully opened file offers, so that ASan sees any
// access a validation gap would let through.
std::uint64_t read_everything(const File& file) {
    std::uint64_t checksum = 0;
    for (const auto& key : file.keys()) {
        try {
            switch (*file.type_of(key)) {
                case ValueType::string: checksum += file.get_string(key).size(); break;
                case ValueType::float32:
                case ValueType::float64: checksum += file.get_float(key) > 0; break;
                case ValueType::boolean: checksum += file.get_bool(key); break;
                case ValueType::array:
                    switch (file.array_element_type(key)) {
                        case ValueType::string: checksum += file.get_string_array(key).size(); break;
                        case ValueType::float32:
                        case ValueType::float64: checksum += file.get_float_array(key).size(); break;
                        case ValueType::array:
                        case ValueType::boolean: checksum += file.array_size(key); break;
                        default: checksum += file.get_int_array(key).size(); break;
                    }
                    break;
                default: checksum += file.get_uint(key); break;
            }
        } catch (const specdec::Error&) {
            // Valid file, value of a kind the accessor refuses (negative, too large): fine.
        }
    }
    // The tokenizer must likewise accept or reject corrupted vocabularies cleanly.
    try {
        const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(file);
        const auto tokens = tokenizer.encode("the a b \xC3\xA9", tokenizer.has_bos());
        checksum += tokenizer.decode(tokens).size();
        std::vector<specdec::Token> every_token(tokenizer.vocab_size());
        for (std::size_t i = 0; i < every_token.size(); ++i) every_token[i] = static_cast<specdec::Token>(i);
        checksum += tokenizer.decode(every_token).size();
    } catch (const specdec::Error&) {
    }
    for (const auto& tensor : file.tensors()) {
        for (std::size_t i = 0; i < tensor.byte_size; ++i) checksum += std::to_integer<std::uint8_t>(tensor.data[i]);
    }
    return checksum;
}

std::uint64_t interesting_u64(std::mt19937_64& rng, std::size_t file_size) {
    const std::uint64_t choices[] = {0,
                                     1,
                                     2,
                                     4,
                                     5,
                                     31,
                                     32,
                                     file_size,
                                     file_size + 1,
                                     std::uint64_t{1} << 32,
                                     std::uint64_t{1} << 62,
                                     std::numeric_limits<std::uint64_t>::max(),
                                     std::numeric_limits<std::uint64_t>::max() - 7,
                                     static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())};
    if (rng() % 4 == 0) return rng();
    return choices[rng() % std::size(choices)];
}

std::vector<std::byte> corrupt(const specdec::gguf::Writer::Encoded& original, std::mt19937_64& rng) {
    std::vector<std::byte> bytes = original.bytes;
    const auto position = [&](std::size_t size) { return size == 0 ? 0 : static_cast<std::size_t>(rng() % size); };
    const int corruptions = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < corruptions; ++c) {
        switch (rng() % 7) {
            case 0:  // bit flips
                for (int flips = 1 + static_cast<int>(rng() % 8); flips > 0 && !bytes.empty(); --flips) {
                    bytes[position(bytes.size())] ^= static_cast<std::byte>(1u << (rng() % 8));
                }
                break;
            case 1:  // truncation
                bytes.resize(position(bytes.size() + 1));
                break;
            case 2: {  // inserted bytes
                const std::size_t at = position(bytes.size() + 1);
                std::vector<std::byte> inserted(1 + rng() % 16);
                for (auto& b : inserted) b = static_cast<std::byte>(rng());
                bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), inserted.begin(), inserted.end());
                break;
            }
            case 3: {  // deleted range
                if (bytes.empty()) break;
                const std::size_t at = position(bytes.size());
                const std::size_t count = std::min<std::size_t>(1 + rng() % 16, bytes.size() - at);
                bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                            bytes.begin() + static_cast<std::ptrdiff_t>(at + count));
                break;
            }
            case 4:
            case 5: {  // a count, length, dimension or offset field set to an extreme value
                const std::size_t at = original.u64_field_offsets[position(original.u64_field_offsets.size())];
                if (at + 8 > bytes.size()) break;
                const std::uint64_t value = interesting_u64(rng, bytes.size());
                for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
                break;
            }
            case 6: {  // a small u32 (type ids, n_dims) written anywhere
                if (bytes.size() < 4) break;
                const std::size_t at = position(bytes.size() - 3);
                const std::uint32_t value = static_cast<std::uint32_t>(rng() % 40);
                for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
                break;
            }
        }
    }
    return bytes;
}

struct FuzzOutcome {
    int opened = 0;
    int rejected = 0;
    // Distinct rejection messages with the path and numbers removed: how many
    // different validation checks the corruptions reached.
    std::set<std::string> reasons;
};

std::string reason_of(std::string message, const std::string& path) {
    if (const auto at = message.find(path); at != std::string::npos) message.erase(at, path.size());
    std::string reason;
    for (const char c : message)
        if (!std::isdigit(static_cast<unsigned char>(c))) reason += c;
    return reason;
}

FuzzOutcome fuzz(const specdec::gguf::Writer::Encoded& original, int iterations, std::uint64_t seed,
                 const std::filesystem::path& path) {
    std::mt19937_64 rng(seed);
    FuzzOutcome outcome;
    for (int iteration = 0; iteration < iterations; ++iteration) {
        const auto bytes = corrupt(original, rng);
        specdec::gguf::Writer::write_bytes(path, bytes);
        try {
            const File file = File::open(path);
            (void)read_everything(file);
            ++outcome.opened;
        } catch (const specdec::Error& error) {
            ++outcome.rejected;
            outcome.reasons.insert(reason_of(error.what(), path.string()));
            if (std::string(error.what()).find(path.string()) == std::string::npos) {
                FAIL("iteration " << iteration << " (seed " << seed << "): message without the file name: "
                                  << error.what());
            }
        } catch (const std::exception& error) {
            FAIL("iteration " << iteration << " (seed " << seed << "): unexpected exception: " << error.what());
        }
    }
    return outcome;
}

}  // namespace

TEST_CASE("Thousands of random corruptions of a crafted GGUF either open or throw specdec::Error", "[gguf][fuzz]") {
    const specdec::test::TempDir dir;
    const auto original = fuzz_seed_model().encode();
    REQUIRE(specdec::test::open_error(dir.write("seed.gguf", original.bytes)).empty());

    const FuzzOutcome outcome = fuzz(original, 3000, 20260601, dir.file("fuzzed.gguf"));
    INFO("opened " << outcome.opened << ", rejected " << outcome.rejected << " for " << outcome.reasons.size()
                    << " distinct reasons");
    // Many different checks reject the corruptions, not one catch-all.
    CHECK(outcome.reasons.size() >= 100);
    // Both outcomes occur: the corruptions are neither all harmless nor all fatal.
    CHECK(outcome.rejected > 1000);
    CHECK(outcome.opened > 50);
}

TEST_CASE("Random corruptions of the stories260K GGUF either open or throw specdec::Error", "[gguf][fuzz][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(fixture, "stories260K-q4_0.gguf");
    std::ifstream stream(fixture, std::ios::binary);
    specdec::gguf::Writer::Encoded original;
    for (auto it = std::istreambuf_iterator<char>(stream); it != std::istreambuf_iterator<char>(); ++it) {
        original.bytes.push_back(static_cast<std::byte>(*it));
    }
    // The header fields whose positions are known without parsing: the two counts
    // and the first key's length.
    original.u64_field_offsets = {8, 16, 24};

    const specdec::test::TempDir dir;
    const FuzzOutcome outcome = fuzz(original, 200, 7, dir.file("fuzzed.gguf"));
    INFO("opened " << outcome.opened << ", rejected " << outcome.rejected << " for " << outcome.reasons.size()
                    << " distinct reasons");
    CHECK(outcome.rejected > 100);
    CHECK(outcome.reasons.size() >= 10);
}
