// The GGUF reader on files crafted with gguf::Writer: every value type, tensor
// placement, and the accessors' errors.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "support/catch.hpp"

using specdec::gguf::File;
using specdec::gguf::TensorType;
using specdec::gguf::ValueBytes;
using specdec::gguf::ValueType;
using specdec::gguf::Writer;
using specdec::test::error_message;

namespace {

Writer every_value_type() {
    Writer writer;
    writer.add_uint8("u8", 200)
        .add_int8("i8", -100)
        .add_uint16("u16", 60000)
        .add_int16("i16", -30000)
        .add_uint32("u32", 4000000000u)
        .add_int32("i32", 7)
        .add_int32("negative", -5)
        .add_uint64("u64", std::numeric_limits<std::uint64_t>::max())
        .add_int64("i64", -(std::int64_t{1} << 40))
        .add_float32("f32", 0.25f)
        .add_float64("f64", -1.5e300)
        .add_bool("yes", true)
        .add_bool("no", false)
        .add_string("text", "h\xc3\xa9llo")
        .add_string("empty", "");
    const std::vector<std::string> words{"a", "", "\xe2\x96\x81the"};
    writer.add_string_array("words", words);
    const std::vector<float> floats{1.0f, -2.5f, 3.75f};
    writer.add_float32_array("floats", floats);
    const std::vector<std::int32_t> ints{1, -2, 3};
    writer.add_int32_array("ints", ints);
    ValueBytes doubles;
    doubles.array_header(ValueType::float64, 2).f64(0.5).f64(1e10);
    writer.add_raw("doubles", ValueType::array, doubles);
    ValueBytes u64s;
    u64s.array_header(ValueType::uint64, 2).u64(9).u64(std::numeric_limits<std::uint64_t>::max());
    writer.add_raw("big_u64s", ValueType::array, u64s);
    ValueBytes bools;
    bools.array_header(ValueType::boolean, 3).u8(1).u8(0).u8(1);
    writer.add_raw("bools", ValueType::array, bools);
    writer.add_raw("nested", ValueType::array, specdec::test::nested_array(ValueType::uint16));
    return writer;
}

}  // namespace

TEST_CASE("Metadata of every GGUF value type reads back through the typed accessors", "[gguf]") {
    const specdec::test::TempDir dir;
    const auto path = dir.file("values.gguf");
    every_value_type().write(path);
    const File file = File::open(path);

    CHECK(file.version() == 3);
    CHECK(file.get_uint("u8") == 200);
    CHECK(file.get_uint("u16") == 60000);
    CHECK(file.get_uint("u32") == 4000000000u);
    CHECK(file.get_uint("i32") == 7);
    CHECK(file.get_uint("u64") == std::numeric_limits<std::uint64_t>::max());
    CHECK(file.get_int("i8") == -100);
    CHECK(file.get_int("i64") == -(std::int64_t{1} << 40));
    CHECK(file.get_int("u32") == 4000000000);
    CHECK(file.get_int("u8") == 200);
    CHECK_FALSE(file.find_int("absent").has_value());
    CHECK(file.get_float("i8") == -100.0);
    CHECK(file.get_float("i16") == -30000.0);
    CHECK(file.get_float("i64") == -static_cast<double>(std::int64_t{1} << 40));
    CHECK(file.get_float("u32") == 4000000000.0);
    CHECK(file.get_float("f32") == 0.25);
    CHECK(file.get_float("f64") == -1.5e300);
    CHECK(file.get_bool("yes"));
    CHECK_FALSE(file.get_bool("no"));
    CHECK(file.get_string("text") == "h\xc3\xa9llo");
    CHECK(file.get_string("empty").empty());
    CHECK(file.get_string_array("words") == std::vector<std::string>{"a", "", "\xe2\x96\x81the"});
    CHECK(file.get_float_array("floats") == std::vector<float>{1.0f, -2.5f, 3.75f});
    CHECK(file.get_float_array("ints") == std::vector<float>{1.0f, -2.0f, 3.0f});
    CHECK(file.get_float_array("doubles") == std::vector<float>{0.5f, 1e10f});
    CHECK(file.get_int_array("ints") == std::vector<std::int64_t>{1, -2, 3});
    CHECK(file.array_element_type("nested") == ValueType::array);
    CHECK(file.array_size("nested") == 2);
    CHECK(file.type_of("bools") == ValueType::array);
    CHECK(file.type_of("u8") == ValueType::uint8);
    CHECK_FALSE(file.type_of("absent").has_value());
    CHECK(file.keys().front() == "u8");
    CHECK(file.keys().back() == "nested");
    CHECK(file.tensors().empty());

    CHECK_FALSE(file.has("absent"));
    CHECK_FALSE(file.find_uint("absent").has_value());
    CHECK_FALSE(file.find_float("absent").has_value());
    CHECK_FALSE(file.find_string("absent").has_value());
}

TEST_CASE("Typed accessors reject missing keys, wrong types and negative unsigned values by name", "[gguf]") {
    const specdec::test::TempDir dir;
    const auto path = dir.file("values.gguf");
    every_value_type().write(path);
    const File file = File::open(path);

    const std::string missing = error_message([&] { (void)file.get_uint("llama.block_count"); });
    CHECK(missing.find("missing metadata key 'llama.block_count'") != std::string::npos);
    CHECK(missing.find(path.string()) != std::string::npos);
    CHECK(error_message([&] { (void)file.get_string("u8"); }).find("'u8' has type uint8, expected a string") !=
          std::string::npos);
    CHECK(error_message([&] { (void)file.find_uint("text"); }).find("expected an unsigned integer") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_uint("negative"); }).find("negative value -5") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_uint("i8"); }).find("negative value -100") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_int("u64"); }).find("too large for a signed 64-bit integer") !=
          std::string::npos);
    CHECK(error_message([&] { (void)file.get_int("f32"); }).find("expected an integer") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_float("text"); }).find("expected a number") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_uint("yes"); }).find("has type bool") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_string_array("floats"); }).find("holds float32 elements, expected strings") !=
          std::string::npos);
    CHECK(error_message([&] { (void)file.get_int_array("floats"); }).find("expected integers") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_int_array("big_u64s"); }).find("too large") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_float_array("words"); }).find("expected numbers") != std::string::npos);
    CHECK(error_message([&] { (void)file.get_string_array("text"); }).find("expected an array") != std::string::npos);
    CHECK(error_message([&] { (void)file.tensor("token_embd.weight"); }).find("missing tensor 'token_embd.weight'") !=
          std::string::npos);
}

TEST_CASE("Tensors are found by name with their shape, type and data in place", "[gguf]") {
    const specdec::test::TempDir dir;
    const auto path = dir.file("tensors.gguf");

    std::vector<float> matrix(3 * 4);
    for (std::size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<float>(i) * 0.5f;
    std::vector<std::byte> q8(2 * 34, std::byte{0x11});  // two q8_0 blocks
    std::vector<std::byte> half(5 * 2, std::byte{0x3c});

    Writer writer(2);  // version 2 has the same layout as version 3
    writer.set_alignment(64);
    writer.add_tensor_f32("matrix", {4, 3}, matrix);
    writer.add_tensor("quantised", TensorType::q8_0, {64}, q8);
    writer.add_tensor("half", TensorType::f16, {5}, half);
    writer.add_tensor("brain", TensorType::bf16, {1, 5}, half);
    writer.add_tensor("nibbles", TensorType::q4_0, {32, 1, 1, 2}, std::vector<std::byte>(2 * 18));
    writer.write(path);

    File opened = File::open(path);
    // Moving the File keeps TensorInfo::data valid: the mapping does not move.
    const File file = std::move(opened);
    CHECK(file.version() == 2);
    CHECK(file.alignment() == 64);
    REQUIRE(file.tensors().size() == 5);
    CHECK(file.tensors()[0].name == "matrix");

    const auto& info = file.tensor("matrix");
    CHECK(info.type == TensorType::f32);
    CHECK(info.shape == std::vector<std::uint64_t>{4, 3});
    CHECK(info.element_count == 12);
    CHECK(info.byte_size == 48);
    std::vector<float> read_back(12);
    std::memcpy(read_back.data(), info.data, info.byte_size);
    CHECK(read_back == matrix);

    CHECK(file.tensor("quantised").byte_size == 68);
    CHECK(std::memcmp(file.tensor("quantised").data, q8.data(), q8.size()) == 0);
    CHECK(file.tensor("half").byte_size == 10);
    CHECK(file.tensor("brain").type == TensorType::bf16);
    CHECK(file.tensor("nibbles").element_count == 64);
    CHECK(file.tensor("nibbles").byte_size == 36);
    for (const auto& tensor : file.tensors()) {
        CHECK(reinterpret_cast<std::uintptr_t>(tensor.data) % 64 == 0);
    }
    CHECK(file.data_offset() % 64 == 0);
}

TEST_CASE("Type traits give the block layout of each supported tensor type", "[gguf]") {
    using specdec::gguf::type_traits;
    CHECK(type_traits(TensorType::f32).block_elements == 1);
    CHECK(type_traits(TensorType::f32).block_bytes == 4);
    CHECK(type_traits(TensorType::f16).block_bytes == 2);
    CHECK(type_traits(TensorType::bf16).block_bytes == 2);
    CHECK(type_traits(TensorType::q8_0).block_elements == 32);
    CHECK(type_traits(TensorType::q8_0).block_bytes == 34);
    CHECK(type_traits(TensorType::q4_0).block_elements == 32);
    CHECK(type_traits(TensorType::q4_0).block_bytes == 18);
    CHECK(std::string(type_traits(TensorType::q4_0).name) == "q4_0");
    CHECK(type_traits(TensorType::q4_K).block_elements == 256);
    CHECK(type_traits(TensorType::q4_K).block_bytes == 144);
    CHECK(type_traits(TensorType::q5_K).block_bytes == 176);
    CHECK(type_traits(TensorType::q6_K).block_bytes == 210);
    CHECK(type_traits(TensorType::q4_1).block_bytes == 20);
    CHECK(type_traits(TensorType::q5_0).block_bytes == 22);
    CHECK(type_traits(TensorType::q5_1).block_bytes == 24);
    CHECK(error_message([] { (void)type_traits(static_cast<TensorType>(10)); }).find("unsupported tensor type 10 (q2_K)") !=
          std::string::npos);
}

TEST_CASE("The writer refuses a tensor whose data does not match its shape", "[gguf]") {
    Writer writer;
    CHECK(error_message([&] { writer.add_tensor_f32("t", {3}, std::vector<float>{1, 2}); }).find("need 12") !=
          std::string::npos);
}
