// Every way a GGUF file can be malformed is reported as a specdec::Error that
// names the file and the problem; nothing reads outside the mapping (the ASan
// build of this binary checks that part).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "support/catch.hpp"

using specdec::gguf::RawTensor;
using specdec::gguf::TensorType;
using specdec::gguf::ValueBytes;
using specdec::gguf::ValueType;
using specdec::gguf::Writer;
using specdec::test::require_open_error;
using specdec::test::TempDir;

namespace {

constexpr std::uint64_t huge = std::uint64_t{1} << 62;

std::vector<std::byte> floats_bytes(std::size_t count) { return std::vector<std::byte>(count * 4, std::byte{0}); }

// A small valid file: a little metadata and two f32 tensors.
Writer small_model() {
    Writer writer;
    writer.add_string("general.architecture", "llama").add_uint32("llama.block_count", 1);
    writer.add_tensor_f32("a", {4, 2}, std::vector<float>(8, 1.0f));
    writer.add_tensor_f32("b", {8}, std::vector<float>(8, 2.0f));
    return writer;
}

void overwrite_u32(std::vector<std::byte>& bytes, std::size_t offset, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

void overwrite_u64(std::vector<std::byte>& bytes, std::size_t offset, std::uint64_t value) {
    for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

RawTensor raw_f32(std::string name, std::vector<std::uint64_t> shape, std::size_t floats) {
    return RawTensor{std::move(name), 0, std::move(shape), floats_bytes(floats), std::nullopt};
}

}  // namespace

TEST_CASE("A small valid crafted file opens (the baseline the malformed variants break)", "[gguf]") {
    const TempDir dir;
    const auto path = dir.file("ok.gguf");
    small_model().write(path);
    CHECK(specdec::test::open_error(path).empty());
}

TEST_CASE("Files that are not GGUF v2/v3 are rejected at the header", "[gguf][errors]") {
    const TempDir dir;
    auto bytes = small_model().bytes();

    SECTION("wrong magic") {
        auto bad = bytes;
        bad[0] = std::byte{'X'};
        require_open_error(dir.write("magic.gguf", bad), "wrong magic");
    }
    SECTION("version 1") { require_open_error(dir.write("v1.gguf", Writer(1).bytes()), "unsupported version 1"); }
    SECTION("version 4") { require_open_error(dir.write("v4.gguf", Writer(4).bytes()), "unsupported version 4"); }
    SECTION("a big-endian file") {
        auto bad = bytes;
        overwrite_u32(bad, 4, 0x03000000u);
        require_open_error(dir.write("be.gguf", bad), "big-endian");
    }
    SECTION("an empty file") { require_open_error(dir.write("empty.gguf", {}), "truncated file"); }
    SECTION("a file shorter than the header") {
        require_open_error(dir.write("short.gguf", std::vector<std::byte>(bytes.begin(), bytes.begin() + 20)),
                           "truncated file: the header");
    }
    SECTION("a missing file") { require_open_error(dir.file("absent.gguf"), "cannot open"); }
    SECTION("a directory") { require_open_error(dir.file(""), "not a regular file"); }
}

TEST_CASE("Counts and lengths larger than the file could hold are rejected before any allocation", "[gguf][errors]") {
    const TempDir dir;

    SECTION("tensor count") {
        require_open_error(dir.write("tensors.gguf", small_model().override_tensor_count(huge).bytes()),
                           "absurd tensor count");
    }
    SECTION("metadata count") {
        require_open_error(dir.write("kv.gguf", small_model().override_metadata_count(huge).bytes()),
                           "absurd metadata count");
    }
    SECTION("a key's string length") {
        auto encoded = small_model().encode();
        overwrite_u64(encoded.bytes, 24, huge);  // the first key's length follows the 24-byte header
        require_open_error(dir.write("key.gguf", encoded.bytes), "string length");
    }
    SECTION("a string value's length") {
        Writer writer;
        writer.add_raw("general.name", ValueType::string, ValueBytes{}.u64(1000).text("short"));
        require_open_error(dir.write("value.gguf", writer.bytes()), "string length 1000");
    }
    SECTION("an array length") {
        Writer writer;
        writer.add_raw("tokenizer.ggml.scores", ValueType::array,
                       ValueBytes{}.array_header(ValueType::float32, huge).f32(1.0f));
        require_open_error(dir.write("array.gguf", writer.bytes()), "absurd array length");
    }
    SECTION("an array of strings whose length field exceeds the file") {
        Writer writer;
        writer.add_raw("tokenizer.ggml.tokens", ValueType::array,
                       ValueBytes{}.array_header(ValueType::string, 100).string("a").string("b"));
        require_open_error(dir.write("strings.gguf", writer.bytes()), "absurd array length 100");
    }
}

TEST_CASE("A file truncated anywhere is reported, never read past", "[gguf][errors]") {
    const TempDir dir;
    const auto bytes = small_model().bytes();
    const auto path = dir.file("truncated.gguf");
    // Every proper prefix of a valid file is malformed: header, keys, values,
    // tensor infos, padding or data is cut short.
    for (std::size_t length = 0; length < bytes.size(); ++length) {
        specdec::gguf::Writer::write_bytes(path, std::span(bytes).first(length));
        const std::string message = specdec::test::open_error(path);
        INFO("prefix of " << length << " of " << bytes.size() << " bytes: " << message);
        CHECK_FALSE(message.empty());
        CHECK(message.find(path.string()) != std::string::npos);
    }
    // The tensor data specifically.
    specdec::gguf::Writer::write_bytes(path, std::span(bytes).first(bytes.size() - 4));
    require_open_error(path, "tensor data out of bounds: tensor 'b'");
}

TEST_CASE("Malformed metadata is reported with the key it concerns", "[gguf][errors]") {
    const TempDir dir;

    SECTION("unknown value type") {
        Writer writer;
        writer.add_raw("general.weird", 13u, ValueBytes{}.u32(0));
        require_open_error(dir.write("type.gguf", writer.bytes()), "unknown value type 13 of metadata key 'general.weird'");
    }
    SECTION("unknown array element type") {
        Writer writer;
        writer.add_raw("general.weird", ValueType::array, ValueBytes{}.u32(99).u64(0));
        require_open_error(dir.write("element.gguf", writer.bytes()), "unknown value type 99 in metadata array");
    }
    SECTION("duplicate key") {
        Writer writer;
        writer.add_uint32("llama.block_count", 1).add_uint32("llama.block_count", 2);
        require_open_error(dir.write("dup.gguf", writer.bytes()), "duplicate metadata key 'llama.block_count'");
    }
    SECTION("empty key") {
        Writer writer;
        writer.add_uint32("", 1);
        require_open_error(dir.write("empty-key.gguf", writer.bytes()), "empty metadata key");
    }
    SECTION("bool that is neither 0 nor 1") {
        Writer writer;
        writer.add_raw("tokenizer.ggml.add_bos_token", ValueType::boolean, ValueBytes{}.u8(7));
        require_open_error(dir.write("bool.gguf", writer.bytes()), "invalid bool value 7");
    }
    SECTION("arrays nested too deep") {
        ValueBytes value;
        for (int level = 0; level < 100; ++level) value.array_header(ValueType::array, 1);
        value.array_header(ValueType::uint8, 0);
        Writer writer;
        writer.add_raw("deep", ValueType::array, value);
        require_open_error(dir.write("deep.gguf", writer.bytes()), "nested more than");
    }
    SECTION("alignment that is not a power of two") {
        Writer writer;
        writer.set_alignment(48);
        require_open_error(dir.write("align48.gguf", writer.bytes()), "invalid general.alignment 48");
    }
    SECTION("alignment zero") {
        Writer writer;
        writer.set_alignment(0);
        require_open_error(dir.write("align0.gguf", writer.bytes()), "invalid general.alignment 0");
    }
    SECTION("absurd alignment") {
        Writer writer;
        writer.add_uint64("general.alignment", std::uint64_t{1} << 40);
        require_open_error(dir.write("align-huge.gguf", writer.bytes()), "invalid general.alignment");
    }
    SECTION("alignment of the wrong type") {
        Writer writer;
        writer.add_string("general.alignment", "32");
        require_open_error(dir.write("align-string.gguf", writer.bytes()), "'general.alignment' has type string");
    }
}

TEST_CASE("Malformed tensor infos are reported with the tensor they concern", "[gguf][errors]") {
    const TempDir dir;
    Writer writer;
    writer.add_tensor_f32("ok", {8}, std::vector<float>(8, 0.0f));

    SECTION("n_dims 0") {
        writer.add_raw_tensor(RawTensor{"scalar", 0, {}, floats_bytes(1), std::nullopt});
        require_open_error(dir.write("dims0.gguf", writer.bytes()), "invalid dimension count n_dims 0 of tensor 'scalar'");
    }
    SECTION("n_dims 5") {
        writer.add_raw_tensor(raw_f32("5d", {1, 1, 1, 1, 1}, 1));
        require_open_error(dir.write("dims5.gguf", writer.bytes()), "invalid dimension count n_dims 5");
    }
    SECTION("a zero dimension") {
        writer.add_raw_tensor(raw_f32("empty", {4, 0}, 0));
        require_open_error(dir.write("zero.gguf", writer.bytes()), "zero dimension 1 in the shape of tensor 'empty'");
    }
    SECTION("dimensions whose product overflows") {
        writer.add_raw_tensor(raw_f32("huge", {std::uint64_t{1} << 32, std::uint64_t{1} << 32}, 1));
        require_open_error(dir.write("overflow.gguf", writer.bytes()), "overflowing element count");
    }
    SECTION("an element count beyond int64") {
        writer.add_raw_tensor(raw_f32("huge", {std::uint64_t{1} << 62, 4}, 1));
        require_open_error(dir.write("int64.gguf", writer.bytes()), "overflowing element count");
    }
    SECTION("a ggml tensor type this library does not compute with") {
        // One line: the tensor, the type by id and ggml name, and the supported types.
        const std::string supported =
            "; supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K";
        writer.add_raw_tensor(RawTensor{"k_quant", 10, {256}, std::vector<std::byte>(84), std::nullopt});
        const auto q2k = dir.write("q2k.gguf", writer.bytes());
        require_open_error(q2k, "unsupported tensor type 10 (q2_K) of tensor 'k_quant'" + supported);
        CHECK(specdec::test::open_error(q2k).find('\n') == std::string::npos);
        Writer iq_writer;
        iq_writer.add_raw_tensor(RawTensor{"iq", 16, {256}, std::vector<std::byte>(66), std::nullopt});
        require_open_error(dir.write("iq2.gguf", iq_writer.bytes()),
                           "unsupported tensor type 16 (iq2_xxs) of tensor 'iq'" + supported);
    }
    SECTION("a tensor type id ggml never had") {
        writer.add_raw_tensor(RawTensor{"alien", 1000, {4}, floats_bytes(4), std::nullopt});
        require_open_error(dir.write("alien.gguf", writer.bytes()), "unsupported tensor type 1000 (unknown)");
    }
    SECTION("quantised rows that are not whole blocks") {
        writer.add_raw_tensor(RawTensor{"q", 8, {48, 2}, std::vector<std::byte>(3 * 34), std::nullopt});
        require_open_error(dir.write("block.gguf", writer.bytes()), "not a multiple of the block size 32");
    }
    SECTION("K-quant rows that are not whole super-blocks") {
        // 384 values are 12 blocks of 32 but one and a half super-blocks of 256.
        writer.add_raw_tensor(RawTensor{"k", 12, {384, 2}, std::vector<std::byte>(3 * 144), std::nullopt});
        require_open_error(dir.write("superblock.gguf", writer.bytes()),
                           "tensor 'k' of type q4_K has rows of 384 elements, not a multiple of the block size 256");
    }
    SECTION("duplicate tensor name") {
        writer.add_raw_tensor(raw_f32("ok", {8}, 8));
        require_open_error(dir.write("dup.gguf", writer.bytes()), "duplicate tensor 'ok'");
    }
    SECTION("empty tensor name") {
        writer.add_raw_tensor(raw_f32("", {8}, 8));
        require_open_error(dir.write("noname.gguf", writer.bytes()), "empty name of tensor info #1");
    }
    SECTION("misaligned data offset") {
        auto tensor = raw_f32("shifted", {8}, 8);
        tensor.offset = 36;
        writer.add_raw_tensor(tensor);
        require_open_error(dir.write("misaligned.gguf", writer.bytes()), "misaligned data offset 36 of tensor 'shifted'");
    }
    SECTION("data offset past the end of the file") {
        auto tensor = raw_f32("far", {8}, 0);
        tensor.offset = std::uint64_t{1} << 40;
        writer.add_raw_tensor(tensor);
        require_open_error(dir.write("far.gguf", writer.bytes()), "tensor data out of bounds: tensor 'far'");
    }
    SECTION("data offset that overflows when added to the data start") {
        auto tensor = raw_f32("wrap", {8}, 0);
        tensor.offset = std::numeric_limits<std::uint64_t>::max() - 31;
        writer.add_raw_tensor(tensor);
        require_open_error(dir.write("wrap.gguf", writer.bytes()), "tensor data out of bounds: tensor 'wrap'");
    }
    SECTION("tensors sharing bytes") {
        auto tensor = raw_f32("alias", {8}, 8);
        tensor.offset = 0;  // on top of 'ok'
        writer.add_raw_tensor(tensor);
        require_open_error(dir.write("overlap.gguf", writer.bytes()), "overlapping tensor data: 'ok' and 'alias'");
    }
    SECTION("a tensor count one more than the infos written") {
        // The second info is read from the padding and data: its name length is 0.
        auto bytes = writer.override_tensor_count(2).bytes();
        require_open_error(dir.write("short-info.gguf", bytes), "tensor info #1");
    }
}
