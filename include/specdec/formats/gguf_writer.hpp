#pragma once
// A small GGUF writer for tests and tools: builds a file in memory from
// metadata and tensors, in the layout gguf.hpp reads. Besides the typed
// add_* calls it has raw hooks (any value type id, any tensor type id, forced
// offsets and counts) so that tests can craft malformed files on purpose.
//
//   gguf::Writer writer;
//   writer.add_string("general.architecture", "llama").add_uint32("llama.block_count", 2);
//   writer.add_tensor_f32("output_norm.weight", {4}, std::vector<float>{1, 1, 1, 1});
//   writer.write(path);
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_types.hpp"

namespace specdec::gguf {

// Little-endian encoder for GGUF values; also useful on its own to craft a
// raw value (a nested array, a string with a lying length...).
struct ValueBytes {
    std::vector<std::byte> bytes;

    ValueBytes& unsigned_le(std::uint64_t value, std::size_t width) {
        for (std::size_t i = 0; i < width; ++i) bytes.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
        return *this;
    }
    ValueBytes& u8(std::uint8_t value) { return unsigned_le(value, 1); }
    ValueBytes& u16(std::uint16_t value) { return unsigned_le(value, 2); }
    ValueBytes& u32(std::uint32_t value) { return unsigned_le(value, 4); }
    ValueBytes& u64(std::uint64_t value) { return unsigned_le(value, 8); }
    ValueBytes& f32(float value) { return u32(std::bit_cast<std::uint32_t>(value)); }
    ValueBytes& f64(double value) { return u64(std::bit_cast<std::uint64_t>(value)); }
    ValueBytes& raw(std::span<const std::byte> data) {
        bytes.insert(bytes.end(), data.begin(), data.end());
        return *this;
    }
    ValueBytes& text(std::string_view value) {  // the characters only, no length
        for (const char c : value) bytes.push_back(static_cast<std::byte>(c));
        return *this;
    }
    ValueBytes& string(std::string_view value) { return u64(value.size()).text(value); }
    // Array header: element type id and length; the caller appends the elements.
    ValueBytes& array_header(ValueType element_type, std::uint64_t length) {
        return u32(static_cast<std::uint32_t>(element_type)).u64(length);
    }
};

// Everything about one tensor entry, including values a valid file would never
// have (unknown type id, forced offset, data that does not match the shape).
struct RawTensor {
    std::string name;
    std::uint32_t type_id = 0;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> data;
    std::optional<std::uint64_t> offset;  // relative to the data section; default: next aligned position
};

class Writer {
public:
    // The encoded file plus where its u64 fields sit, so that corruption tests
    // can overwrite counts, lengths, dims and offsets precisely.
    struct Encoded {
        std::vector<std::byte> bytes;
        std::vector<std::size_t> u64_field_offsets;
    };

    explicit Writer(std::uint32_t version = 3) : version_(version) {}

    Writer& add_uint8(std::string_view key, std::uint8_t v) { return add_raw(key, ValueType::uint8, ValueBytes{}.u8(v)); }
    Writer& add_int8(std::string_view key, std::int8_t v) {
        return add_raw(key, ValueType::int8, ValueBytes{}.u8(static_cast<std::uint8_t>(v)));
    }
    Writer& add_uint16(std::string_view key, std::uint16_t v) { return add_raw(key, ValueType::uint16, ValueBytes{}.u16(v)); }
    Writer& add_int16(std::string_view key, std::int16_t v) {
        return add_raw(key, ValueType::int16, ValueBytes{}.u16(static_cast<std::uint16_t>(v)));
    }
    Writer& add_uint32(std::string_view key, std::uint32_t v) { return add_raw(key, ValueType::uint32, ValueBytes{}.u32(v)); }
    Writer& add_int32(std::string_view key, std::int32_t v) {
        return add_raw(key, ValueType::int32, ValueBytes{}.u32(static_cast<std::uint32_t>(v)));
    }
    Writer& add_uint64(std::string_view key, std::uint64_t v) { return add_raw(key, ValueType::uint64, ValueBytes{}.u64(v)); }
    Writer& add_int64(std::string_view key, std::int64_t v) {
        return add_raw(key, ValueType::int64, ValueBytes{}.u64(static_cast<std::uint64_t>(v)));
    }
    Writer& add_float32(std::string_view key, float v) { return add_raw(key, ValueType::float32, ValueBytes{}.f32(v)); }
    Writer& add_float64(std::string_view key, double v) { return add_raw(key, ValueType::float64, ValueBytes{}.f64(v)); }
    Writer& add_bool(std::string_view key, bool v) { return add_raw(key, ValueType::boolean, ValueBytes{}.u8(v ? 1 : 0)); }
    Writer& add_string(std::string_view key, std::string_view v) {
        return add_raw(key, ValueType::string, ValueBytes{}.string(v));
    }

    Writer& add_string_array(std::string_view key, std::span<const std::string> values) {
        ValueBytes value;
        value.array_header(ValueType::string, values.size());
        for (const auto& s : values) value.string(s);
        return add_raw(key, ValueType::array, value);
    }
    Writer& add_float32_array(std::string_view key, std::span<const float> values) {
        ValueBytes value;
        value.array_header(ValueType::float32, values.size());
        for (const float v : values) value.f32(v);
        return add_raw(key, ValueType::array, value);
    }
    Writer& add_int32_array(std::string_view key, std::span<const std::int32_t> values) {
        ValueBytes value;
        value.array_header(ValueType::int32, values.size());
        for (const std::int32_t v : values) value.u32(static_cast<std::uint32_t>(v));
        return add_raw(key, ValueType::array, value);
    }

    // Any value: `type_id` need not be a valid ValueType and `value` is written verbatim.
    Writer& add_raw(std::string_view key, std::uint32_t type_id, const ValueBytes& value) {
        metadata_.push_back({std::string(key), type_id, value.bytes});
        return *this;
    }
    Writer& add_raw(std::string_view key, ValueType type, const ValueBytes& value) {
        return add_raw(key, static_cast<std::uint32_t>(type), value);
    }

    // Sets the data alignment and records it as general.alignment (uint32).
    Writer& set_alignment(std::uint32_t alignment) {
        alignment_ = alignment;
        return add_uint32("general.alignment", alignment);
    }

    // A well-formed tensor: `data` must hold exactly the bytes the shape and type need.
    Writer& add_tensor(std::string_view name, TensorType type, std::vector<std::uint64_t> shape,
                       std::span<const std::byte> data) {
        const TypeTraits traits = type_traits(type);
        std::uint64_t elements = 1;
        for (const auto extent : shape) elements *= extent;
        const std::uint64_t expected = elements / traits.block_elements * traits.block_bytes;
        if (shape.empty() || elements % traits.block_elements != 0 || data.size() != expected) {
            throw Error("gguf::Writer: tensor '" + std::string(name) + "' has " + std::to_string(data.size()) +
                        " bytes of data; its shape and type " + traits.name + " need " + std::to_string(expected));
        }
        return add_raw_tensor(RawTensor{std::string(name), static_cast<std::uint32_t>(type), std::move(shape),
                                        std::vector<std::byte>(data.begin(), data.end()), std::nullopt});
    }

    Writer& add_tensor_f32(std::string_view name, std::vector<std::uint64_t> shape, std::span<const float> values) {
        ValueBytes data;
        for (const float v : values) data.f32(v);
        return add_tensor(name, TensorType::f32, std::move(shape), data.bytes);
    }

    Writer& add_raw_tensor(RawTensor tensor) {
        tensors_.push_back(std::move(tensor));
        return *this;
    }

    // Header counts that disagree with the entries actually written.
    Writer& override_tensor_count(std::uint64_t count) {
        tensor_count_override_ = count;
        return *this;
    }
    Writer& override_metadata_count(std::uint64_t count) {
        metadata_count_override_ = count;
        return *this;
    }

    [[nodiscard]] Encoded encode() const {
        Encoded out;
        ValueBytes file;
        const auto mark_u64 = [&] { out.u64_field_offsets.push_back(file.bytes.size()); };
        file.text("GGUF").u32(version_);
        mark_u64();
        file.u64(tensor_count_override_.value_or(tensors_.size()));
        mark_u64();
        file.u64(metadata_count_override_.value_or(metadata_.size()));
        for (const auto& entry : metadata_) {
            mark_u64();
            file.string(entry.key).u32(entry.type_id);
            // Only the top-level length of a plain string or array value is
            // marked; nested fields are the caller's business.
            if (entry.type_id == static_cast<std::uint32_t>(ValueType::string)) mark_u64();
            if (entry.type_id == static_cast<std::uint32_t>(ValueType::array) && entry.value.size() >= 12) {
                out.u64_field_offsets.push_back(file.bytes.size() + 4);
            }
            file.raw(entry.value);
        }
        const std::vector<std::uint64_t> offsets = tensor_offsets();
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            const RawTensor& tensor = tensors_[i];
            mark_u64();
            file.string(tensor.name).u32(static_cast<std::uint32_t>(tensor.shape.size()));
            for (const auto extent : tensor.shape) {
                mark_u64();
                file.u64(extent);
            }
            file.u32(tensor.type_id);
            mark_u64();
            file.u64(offsets[i]);
        }
        const std::size_t data_start = static_cast<std::size_t>(align_up(file.bytes.size()));
        file.bytes.resize(data_start);
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            const auto& data = tensors_[i].data;
            if (data.empty()) continue;  // a forced, possibly absurd offset with nothing to write
            const std::size_t begin = data_start + static_cast<std::size_t>(offsets[i]);
            if (file.bytes.size() < begin + data.size()) file.bytes.resize(begin + data.size());
            std::copy(data.begin(), data.end(), file.bytes.begin() + static_cast<std::ptrdiff_t>(begin));
        }
        out.bytes = std::move(file.bytes);
        return out;
    }

    [[nodiscard]] std::vector<std::byte> bytes() const { return encode().bytes; }

    void write(const std::filesystem::path& path) const { write_bytes(path, bytes()); }

    static void write_bytes(const std::filesystem::path& path, std::span<const std::byte> data) {
        std::ofstream stream(path, std::ios::binary | std::ios::trunc);
        stream.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
        if (!stream) throw Error("gguf::Writer: cannot write '" + path.string() + "'");
    }

private:
    struct MetadataEntry {
        std::string key;
        std::uint32_t type_id;
        std::vector<std::byte> value;
    };

    // Tolerates alignments a valid file would reject (0, 3...) so such files can be crafted.
    [[nodiscard]] std::uint64_t align_up(std::uint64_t value) const {
        const std::uint64_t alignment = alignment_ == 0 ? 1 : alignment_;
        return (value + alignment - 1) / alignment * alignment;
    }

    [[nodiscard]] std::vector<std::uint64_t> tensor_offsets() const {
        std::vector<std::uint64_t> offsets;
        std::uint64_t next = 0;
        for (const auto& tensor : tensors_) {
            const std::uint64_t offset = tensor.offset.value_or(next);
            offsets.push_back(offset);
            next = std::max(next, align_up(offset + tensor.data.size()));
        }
        return offsets;
    }

    std::uint32_t version_;
    std::uint32_t alignment_ = 32;
    std::vector<MetadataEntry> metadata_;
    std::vector<RawTensor> tensors_;
    std::optional<std::uint64_t> tensor_count_override_;
    std::optional<std::uint64_t> metadata_count_override_;
};

}  // namespace specdec::gguf
