#pragma once
// Reader for GGUF, the llama.cpp model file format (versions 2 and 3).
//
//   header      "GGUF", u32 version, u64 tensor count, u64 metadata count
//   metadata    (string key, u32 value type, value) * count
//   tensors     (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset) * count
//   padding     to general.alignment (default 32)
//   data        tensor bytes at data start + offset, each offset aligned
//
// Strings are a u64 byte length followed by UTF-8 bytes; arrays are a u32
// element type, a u64 length and the elements. Everything is little-endian.
//
// File::open maps the file and validates all of it before returning, so that
// every later accessor works on a file known to be well formed; a malformed
// file (truncated, absurd counts, bad offsets...) throws specdec::Error naming
// the file and the problem, and nothing ever reads outside the mapping.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_mapping.hpp"
#include "specdec/formats/gguf_types.hpp"

namespace specdec::gguf {

struct TensorInfo {
    std::string name;
    TensorType type;
    std::vector<std::uint64_t> shape;  // GGUF/ggml order: shape[0] is the contiguous (fastest) dimension
    std::uint64_t element_count;
    // Points into the memory mapping, at a multiple of general.alignment from
    // the start of the file (so absolutely aligned for alignments up to the page size).
    const std::byte* data;
    std::size_t byte_size;
};

namespace detail {

inline constexpr std::uint32_t default_alignment = 32;
// Larger alignments are legal powers of two but no writer uses them; a huge
// one is far more likely a corrupted value than an intent.
inline constexpr std::uint64_t max_alignment = std::uint64_t{1} << 16;
inline constexpr std::uint32_t max_dims = 4;
// Nested arrays are legal; the limit only stops a crafted file from
// exhausting the stack while it is being validated.
inline constexpr int max_array_nesting = 8;
// The smallest encodings, used to reject counts the file cannot possibly hold:
// a key/value is a non-empty key (8 + 1 bytes), a type (4) and a value (>= 1);
// a tensor info is a non-empty name (8 + 1), n_dims (4), one dim (8), type (4), offset (8).
inline constexpr std::uint64_t min_metadata_bytes = 8 + 1 + 4 + 1;
inline constexpr std::uint64_t min_tensor_info_bytes = 8 + 1 + 4 + 8 + 4 + 8;
inline constexpr std::size_t header_bytes = 4 + 4 + 8 + 8;

inline std::string quoted(std::string_view text) {
    std::string out = "'";
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f) {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[byte >> 4];
            out += hex[byte & 15];
        } else {
            out += c;
        }
    }
    return out + "'";
}

[[noreturn]] inline void fail(const std::filesystem::path& file, const std::string& problem) {
    throw Error(problem + " in GGUF file '" + file.string() + "'");
}

inline std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
    return a * b;
}

inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
    if (b > std::numeric_limits<std::uint64_t>::max() - a) return std::nullopt;
    return a + b;
}

inline std::size_t scalar_size(ValueType type) {
    switch (type) {
        case ValueType::uint8:
        case ValueType::int8:
        case ValueType::boolean: return 1;
        case ValueType::uint16:
        case ValueType::int16: return 2;
        case ValueType::uint32:
        case ValueType::int32:
        case ValueType::float32: return 4;
        case ValueType::uint64:
        case ValueType::int64:
        case ValueType::float64: return 8;
        case ValueType::string:
        case ValueType::array: return 0;
    }
    return 0;
}

// Fewest bytes one value of this type occupies (a string is at least its length field).
inline std::uint64_t min_value_size(ValueType type) {
    if (type == ValueType::string) return 8;
    if (type == ValueType::array) return 4 + 8;
    return scalar_size(type);
}

inline bool is_integer(ValueType type) {
    switch (type) {
        case ValueType::uint8:
        case ValueType::int8:
        case ValueType::uint16:
        case ValueType::int16:
        case ValueType::uint32:
        case ValueType::int32:
        case ValueType::uint64:
        case ValueType::int64: return true;
        default: return false;
    }
}

inline bool is_signed(ValueType type) {
    return type == ValueType::int8 || type == ValueType::int16 || type == ValueType::int32 || type == ValueType::int64;
}

// Bounds-checked little-endian reads from the mapping. Every read checks the
// remaining length first and reports a truncation naming what it was reading.
class Cursor {
public:
    Cursor(const std::byte* data, std::size_t size, std::size_t position, const std::filesystem::path& file)
        : data_(data), size_(size), position_(position), file_(&file) {}

    [[nodiscard]] std::size_t position() const { return position_; }
    [[nodiscard]] std::size_t remaining() const { return size_ - position_; }

    void require(std::uint64_t bytes, std::string_view what) const {
        if (bytes > remaining()) {
            fail(*file_, "truncated file: " + std::string(what) + " at offset " + std::to_string(position_) +
                             " needs " + std::to_string(bytes) + " bytes but only " + std::to_string(remaining()) +
                             " remain");
        }
    }

    void skip(std::uint64_t bytes, std::string_view what) {
        require(bytes, what);
        position_ += static_cast<std::size_t>(bytes);
    }

    std::uint64_t read_unsigned(std::size_t bytes, std::string_view what) {
        require(bytes, what);
        std::uint64_t value = 0;
        for (std::size_t i = 0; i < bytes; ++i) {
            value |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(data_[position_ + i])) << (8 * i);
        }
        position_ += bytes;
        return value;
    }

    std::uint32_t read_u32(std::string_view what) { return static_cast<std::uint32_t>(read_unsigned(4, what)); }
    std::uint64_t read_u64(std::string_view what) { return read_unsigned(8, what); }

    std::string_view read_string(std::string_view what) {
        const std::uint64_t length = read_u64(what);
        if (length > remaining()) {
            fail(*file_, "string length " + std::to_string(length) + " of " + std::string(what) + " at offset " +
                             std::to_string(position_ - 8) + " exceeds the " + std::to_string(remaining()) +
                             " bytes left in the file (truncated file or corrupt length)");
        }
        const std::string_view text(reinterpret_cast<const char*>(data_ + position_), static_cast<std::size_t>(length));
        position_ += static_cast<std::size_t>(length);
        return text;
    }

    // Reads one scalar stored as `type` and widens it; used after validation.
    std::int64_t read_signed(ValueType type, std::string_view what) {
        const std::size_t bytes = scalar_size(type);
        const std::uint64_t raw = read_unsigned(bytes, what);
        if (bytes == 8) return static_cast<std::int64_t>(raw);
        const std::uint64_t sign_bit = std::uint64_t{1} << (8 * bytes - 1);
        return static_cast<std::int64_t>((raw ^ sign_bit) - sign_bit);  // sign extension without UB
    }

    double read_float(ValueType type, std::string_view what) {
        if (type == ValueType::float32) return std::bit_cast<float>(read_u32(what));
        return std::bit_cast<double>(read_u64(what));
    }

private:
    const std::byte* data_;
    std::size_t size_;
    std::size_t position_;
    const std::filesystem::path* file_;
};

struct MetadataEntry {
    ValueType type;
    std::size_t value_offset;  // where the value's bytes start in the mapping
};

}  // namespace detail

class File {
public:
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    File(File&&) noexcept = default;
    File& operator=(File&&) noexcept = default;
    ~File() = default;

    static File open(const std::filesystem::path& path) {
        File file;
        file.path_ = path;
        file.mapping_ = specdec::detail::MappedFile::open(path);
        file.parse();
        return file;
    }

    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] std::uint32_t version() const { return version_; }
    [[nodiscard]] std::size_t file_size() const { return mapping_.size(); }
    [[nodiscard]] std::uint32_t alignment() const { return alignment_; }
    // Offset of the tensor data section from the start of the file.
    [[nodiscard]] std::size_t data_offset() const { return data_offset_; }

    // --- metadata ---------------------------------------------------------
    [[nodiscard]] bool has(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }
    // Keys in file order.
    [[nodiscard]] const std::vector<std::string>& keys() const { return key_order_; }
    [[nodiscard]] std::optional<ValueType> type_of(std::string_view key) const {
        const auto* entry = find_entry(key);
        return entry ? std::optional(entry->type) : std::nullopt;
    }
    // Element type and length of an array value; Error when the key is not an array.
    [[nodiscard]] ValueType array_element_type(std::string_view key) const { return array_header(key).first; }
    [[nodiscard]] std::uint64_t array_size(std::string_view key) const { return array_header(key).second; }

    // find_*: nullopt when the key is absent; Error when present with the wrong type.
    [[nodiscard]] std::optional<std::uint64_t> find_uint(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) return std::nullopt;
        if (!detail::is_integer(entry->type)) wrong_type(key, *entry, "an unsigned integer");
        auto cursor = cursor_at(entry->value_offset);
        if (entry->type == ValueType::uint64) return cursor.read_u64(key);
        const std::int64_t value = cursor.read_signed(entry->type, key);
        if (detail::is_signed(entry->type) && value < 0) {
            detail::fail(path_, "metadata key " + detail::quoted(key) + " has the negative value " +
                                    std::to_string(value) + " where an unsigned integer is expected");
        }
        if (!detail::is_signed(entry->type)) {
            // Unsigned types narrower than 64 bits: undo the sign extension.
            const std::size_t bits = 8 * detail::scalar_size(entry->type);
            return static_cast<std::uint64_t>(value) & ((std::uint64_t{1} << bits) - 1);
        }
        return static_cast<std::uint64_t>(value);
    }

    // Any integer type as a signed value; a uint64 above INT64_MAX is an Error.
    [[nodiscard]] std::optional<std::int64_t> find_int(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) return std::nullopt;
        if (!detail::is_integer(entry->type)) wrong_type(key, *entry, "an integer");
        auto cursor = cursor_at(entry->value_offset);
        if (entry->type == ValueType::uint64) {
            const std::uint64_t value = cursor.read_u64(key);
            if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                detail::fail(path_, "metadata key " + detail::quoted(key) + " holds " + std::to_string(value) +
                                        ", too large for a signed 64-bit integer");
            }
            return static_cast<std::int64_t>(value);
        }
        return read_integer_element(cursor, entry->type, key);
    }

    [[nodiscard]] std::optional<double> find_float(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) return std::nullopt;
        auto cursor = cursor_at(entry->value_offset);
        if (entry->type == ValueType::float32 || entry->type == ValueType::float64) {
            return cursor.read_float(entry->type, key);
        }
        if (detail::is_integer(entry->type)) {
            if (entry->type == ValueType::uint64) return static_cast<double>(cursor.read_u64(key));
            if (!detail::is_signed(entry->type)) return static_cast<double>(*find_uint(key));
            return static_cast<double>(cursor.read_signed(entry->type, key));
        }
        wrong_type(key, *entry, "a number");
    }

    [[nodiscard]] std::optional<std::string> find_string(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) return std::nullopt;
        if (entry->type != ValueType::string) wrong_type(key, *entry, "a string");
        auto cursor = cursor_at(entry->value_offset);
        return std::string(cursor.read_string(key));
    }

    [[nodiscard]] std::optional<bool> find_bool(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) return std::nullopt;
        if (entry->type != ValueType::boolean) wrong_type(key, *entry, "a bool");
        auto cursor = cursor_at(entry->value_offset);
        return cursor.read_unsigned(1, key) != 0;
    }

    [[nodiscard]] std::uint64_t get_uint(std::string_view key) const { return required(find_uint(key), key); }
    [[nodiscard]] std::int64_t get_int(std::string_view key) const { return required(find_int(key), key); }
    [[nodiscard]] double get_float(std::string_view key) const { return required(find_float(key), key); }
    [[nodiscard]] std::string get_string(std::string_view key) const { return required(find_string(key), key); }
    [[nodiscard]] bool get_bool(std::string_view key) const { return required(find_bool(key), key); }

    [[nodiscard]] std::vector<std::string> get_string_array(std::string_view key) const {
        auto [element_type, count, cursor] = array_elements(key);
        if (element_type != ValueType::string) wrong_element_type(key, element_type, "strings");
        std::vector<std::string> values;
        values.reserve(static_cast<std::size_t>(count));
        for (std::uint64_t i = 0; i < count; ++i) values.emplace_back(cursor.read_string(key));
        return values;
    }

    // Elements stored as float32, float64 or any integer type.
    [[nodiscard]] std::vector<float> get_float_array(std::string_view key) const {
        auto [element_type, count, cursor] = array_elements(key);
        const bool is_float = element_type == ValueType::float32 || element_type == ValueType::float64;
        if (!is_float && !detail::is_integer(element_type)) wrong_element_type(key, element_type, "numbers");
        std::vector<float> values;
        values.reserve(static_cast<std::size_t>(count));
        for (std::uint64_t i = 0; i < count; ++i) {
            if (is_float) {
                values.push_back(static_cast<float>(cursor.read_float(element_type, key)));
            } else if (element_type == ValueType::uint64) {
                values.push_back(static_cast<float>(cursor.read_u64(key)));
            } else {
                values.push_back(static_cast<float>(read_integer_element(cursor, element_type, key)));
            }
        }
        return values;
    }

    // Elements of any integer type; a uint64 above INT64_MAX is an Error.
    [[nodiscard]] std::vector<std::int64_t> get_int_array(std::string_view key) const {
        auto [element_type, count, cursor] = array_elements(key);
        if (!detail::is_integer(element_type)) wrong_element_type(key, element_type, "integers");
        std::vector<std::int64_t> values;
        values.reserve(static_cast<std::size_t>(count));
        for (std::uint64_t i = 0; i < count; ++i) {
            if (element_type == ValueType::uint64) {
                const std::uint64_t value = cursor.read_u64(key);
                if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                    detail::fail(path_, "metadata array " + detail::quoted(key) + " holds " + std::to_string(value) +
                                            ", too large for a signed 64-bit integer");
                }
                values.push_back(static_cast<std::int64_t>(value));
            } else {
                values.push_back(read_integer_element(cursor, element_type, key));
            }
        }
        return values;
    }

    // --- tensors ------------------------------------------------------------
    [[nodiscard]] const TensorInfo* find_tensor(std::string_view name) const {
        const auto found = tensor_index_.find(name);
        return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
    }

    [[nodiscard]] const TensorInfo& tensor(std::string_view name) const {
        const TensorInfo* info = find_tensor(name);
        if (info == nullptr) detail::fail(path_, "missing tensor " + detail::quoted(name));
        return *info;
    }

    [[nodiscard]] std::span<const TensorInfo> tensors() const { return tensors_; }

private:
    File() = default;

    struct ArrayElements {
        ValueType element_type;
        std::uint64_t count;
        detail::Cursor cursor;  // positioned at the first element
    };

    [[nodiscard]] detail::Cursor cursor_at(std::size_t offset) const {
        return detail::Cursor(mapping_.data(), mapping_.size(), offset, path_);
    }

    [[nodiscard]] const detail::MetadataEntry* find_entry(std::string_view key) const {
        const auto found = metadata_.find(key);
        return found == metadata_.end() ? nullptr : &found->second;
    }

    template <class T>
    T required(std::optional<T> value, std::string_view key) const {
        if (!value) detail::fail(path_, "missing metadata key " + detail::quoted(key));
        return std::move(*value);
    }

    [[noreturn]] void wrong_type(std::string_view key, const detail::MetadataEntry& entry, const char* expected) const {
        detail::fail(path_, "metadata key " + detail::quoted(key) + " has type " + value_type_name(entry.type) +
                                ", expected " + expected);
    }

    [[noreturn]] void wrong_element_type(std::string_view key, ValueType element_type, const char* expected) const {
        detail::fail(path_, "metadata array " + detail::quoted(key) + " holds " + value_type_name(element_type) +
                                " elements, expected " + expected);
    }

    static std::int64_t read_integer_element(detail::Cursor& cursor, ValueType type, std::string_view key) {
        const std::int64_t value = cursor.read_signed(type, key);
        if (detail::is_signed(type)) return value;
        const std::size_t bits = 8 * detail::scalar_size(type);
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(value) & ((std::uint64_t{1} << bits) - 1));
    }

    [[nodiscard]] std::pair<ValueType, std::uint64_t> array_header(std::string_view key) const {
        const auto elements = array_elements(key);
        return {elements.element_type, elements.count};
    }

    [[nodiscard]] ArrayElements array_elements(std::string_view key) const {
        const auto* entry = find_entry(key);
        if (entry == nullptr) detail::fail(path_, "missing metadata key " + detail::quoted(key));
        if (entry->type != ValueType::array) wrong_type(key, *entry, "an array");
        auto cursor = cursor_at(entry->value_offset);
        const auto element_type = static_cast<ValueType>(cursor.read_u32(key));
        const std::uint64_t count = cursor.read_u64(key);
        return {element_type, count, cursor};
    }

    // --- validation ---------------------------------------------------------
    void parse() {
        if (mapping_.size() < detail::header_bytes) {
            detail::fail(path_, "truncated file: the header needs " + std::to_string(detail::header_bytes) +
                                    " bytes but the file has " + std::to_string(mapping_.size()));
        }
        detail::Cursor cursor = cursor_at(0);
        const std::uint32_t magic = cursor.read_u32("magic");
        if (magic != 0x46554747u) {  // "GGUF" read as a little-endian u32
            detail::fail(path_, "wrong magic (not a GGUF file: the first bytes are not \"GGUF\")");
        }
        version_ = cursor.read_u32("version");
        if (version_ != 2 && version_ != 3) {
            std::string problem = "unsupported version " + std::to_string(version_) + " (supported: 2 and 3)";
            if (version_ == 0x02000000u || version_ == 0x03000000u) {
                problem += "; this looks like a big-endian GGUF file, which is not supported";
            }
            detail::fail(path_, problem);
        }
        const std::uint64_t tensor_count = cursor.read_u64("tensor count");
        const std::uint64_t metadata_count = cursor.read_u64("metadata count");
        if (metadata_count > cursor.remaining() / detail::min_metadata_bytes) {
            detail::fail(path_, "absurd metadata count " + std::to_string(metadata_count) +
                                    ": larger than the file could hold");
        }
        if (tensor_count > (cursor.remaining() - metadata_count * detail::min_metadata_bytes) /
                               detail::min_tensor_info_bytes) {
            detail::fail(path_, "absurd tensor count " + std::to_string(tensor_count) +
                                    ": larger than the file could hold");
        }
        parse_metadata(cursor, metadata_count);
        read_alignment();
        std::vector<RawTensor> raw = parse_tensor_infos(cursor, tensor_count);
        const std::uint64_t data_start = align_up(cursor.position(), "data section");
        data_offset_ = static_cast<std::size_t>(std::min<std::uint64_t>(data_start, mapping_.size()));
        place_tensors(raw, data_start);
    }

    void parse_metadata(detail::Cursor& cursor, std::uint64_t count) {
        for (std::uint64_t i = 0; i < count; ++i) {
            const std::string what = "metadata key #" + std::to_string(i);
            const std::string_view key = cursor.read_string(what);
            if (key.empty()) detail::fail(path_, "empty " + what);
            const std::uint32_t type_id = cursor.read_u32("value type of " + detail::quoted(key));
            if (!detail::is_known_value_type(type_id)) {
                detail::fail(path_, "unknown value type " + std::to_string(type_id) + " of metadata key " +
                                        detail::quoted(key));
            }
            const std::size_t value_offset = cursor.position();
            skip_value(cursor, static_cast<ValueType>(type_id), key, 0);
            const auto [position, inserted] =
                metadata_.emplace(std::string(key), detail::MetadataEntry{static_cast<ValueType>(type_id), value_offset});
            if (!inserted) detail::fail(path_, "duplicate metadata key " + detail::quoted(key));
            key_order_.push_back(position->first);
        }
    }

    // Checks one value (recursively for arrays) and moves past it.
    void skip_value(detail::Cursor& cursor, ValueType type, std::string_view key, int depth) {
        const std::string what = "value of " + detail::quoted(key);
        switch (type) {
            case ValueType::string:
                cursor.read_string(what);
                return;
            case ValueType::boolean:
                check_bool(cursor.read_unsigned(1, what), key);
                return;
            case ValueType::array: break;
            default:
                cursor.skip(detail::scalar_size(type), what);
                return;
        }
        if (depth >= detail::max_array_nesting) {
            detail::fail(path_, "metadata array " + detail::quoted(key) + " is nested more than " +
                                    std::to_string(detail::max_array_nesting) + " levels deep");
        }
        const std::uint32_t element_id = cursor.read_u32("array element type of " + detail::quoted(key));
        if (!detail::is_known_value_type(element_id)) {
            detail::fail(path_, "unknown value type " + std::to_string(element_id) + " in metadata array " +
                                    detail::quoted(key));
        }
        const auto element_type = static_cast<ValueType>(element_id);
        const std::uint64_t count = cursor.read_u64("array length of " + detail::quoted(key));
        if (count > cursor.remaining() / detail::min_value_size(element_type)) {
            detail::fail(path_, "absurd array length " + std::to_string(count) + " of metadata key " +
                                    detail::quoted(key) + ": larger than the file could hold");
        }
        if (element_type == ValueType::boolean) {
            for (std::uint64_t i = 0; i < count; ++i) check_bool(cursor.read_unsigned(1, what), key);
        } else if (element_type != ValueType::string && element_type != ValueType::array) {
            cursor.skip(count * detail::scalar_size(element_type), what);  // no overflow: count <= remaining / size
        } else {
            for (std::uint64_t i = 0; i < count; ++i) skip_value(cursor, element_type, key, depth + 1);
        }
    }

    void check_bool(std::uint64_t byte, std::string_view key) const {
        if (byte > 1) {
            detail::fail(path_, "invalid bool value " + std::to_string(byte) + " in metadata key " + detail::quoted(key));
        }
    }

    void read_alignment() {
        alignment_ = detail::default_alignment;
        const auto* entry = find_entry("general.alignment");
        if (entry == nullptr) return;
        if (!detail::is_integer(entry->type)) wrong_type("general.alignment", *entry, "an unsigned integer");
        const std::uint64_t alignment = *find_uint("general.alignment");
        if (alignment == 0 || !std::has_single_bit(alignment) || alignment > detail::max_alignment) {
            detail::fail(path_, "invalid general.alignment " + std::to_string(alignment) +
                                    " (expected a power of two no larger than " +
                                    std::to_string(detail::max_alignment) + ")");
        }
        alignment_ = static_cast<std::uint32_t>(alignment);
    }

    struct RawTensor {
        std::string_view name;
        TensorType type;
        std::vector<std::uint64_t> shape;
        std::uint64_t element_count;
        std::uint64_t byte_size;
        std::uint64_t offset;
    };

    std::vector<RawTensor> parse_tensor_infos(detail::Cursor& cursor, std::uint64_t count) {
        std::vector<RawTensor> raw;
        raw.reserve(static_cast<std::size_t>(count));
        std::set<std::string_view> names;
        for (std::uint64_t i = 0; i < count; ++i) {
            const std::string what = "tensor info #" + std::to_string(i);
            RawTensor tensor;
            tensor.name = cursor.read_string("name of " + what);
            if (tensor.name.empty()) detail::fail(path_, "empty name of " + what);
            const std::string tensor_label = "tensor " + detail::quoted(tensor.name);
            if (!names.insert(tensor.name).second) detail::fail(path_, "duplicate " + tensor_label);
            const std::uint32_t dims = cursor.read_u32("dimension count of " + tensor_label);
            if (dims == 0 || dims > detail::max_dims) {
                detail::fail(path_, "invalid dimension count n_dims " + std::to_string(dims) + " of " + tensor_label +
                                        " (expected 1 to " + std::to_string(detail::max_dims) + ")");
            }
            std::uint64_t elements = 1;
            for (std::uint32_t d = 0; d < dims; ++d) {
                const std::uint64_t extent = cursor.read_u64("shape of " + tensor_label);
                if (extent == 0) {
                    detail::fail(path_, "zero dimension " + std::to_string(d) + " in the shape of " + tensor_label);
                }
                const auto product = detail::checked_multiply(elements, extent);
                if (!product || *product > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                    detail::fail(path_, "overflowing element count in the shape of " + tensor_label);
                }
                elements = *product;
                tensor.shape.push_back(extent);
            }
            tensor.element_count = elements;
            const std::uint32_t type_id = cursor.read_u32("type of " + tensor_label);
            if (!detail::is_supported_tensor_type(type_id)) {
                detail::fail(path_, "unsupported tensor type " + std::to_string(type_id) + " (" +
                                        detail::ggml_type_name(type_id) + ") of " + tensor_label +
                                        "; supported: " + detail::supported_tensor_type_list());
            }
            tensor.type = static_cast<TensorType>(type_id);
            const TypeTraits traits = type_traits(tensor.type);
            // ggml quantises row by row, so the row length (not only the total)
            // must be a whole number of blocks.
            if (tensor.shape[0] % traits.block_elements != 0) {
                detail::fail(path_, tensor_label + " of type " + traits.name + " has rows of " +
                                        std::to_string(tensor.shape[0]) +
                                        " elements, not a multiple of the block size " +
                                        std::to_string(traits.block_elements));
            }
            tensor.byte_size = elements / traits.block_elements * traits.block_bytes;  // <= elements * 4: no overflow
            tensor.offset = cursor.read_u64("data offset of " + tensor_label);
            raw.push_back(std::move(tensor));
        }
        return raw;
    }

    std::uint64_t align_up(std::uint64_t value, const char* what) const {
        const auto padded = detail::checked_add(value, alignment_ - 1);
        if (!padded) detail::fail(path_, std::string("overflowing offset of the ") + what);
        return *padded & ~static_cast<std::uint64_t>(alignment_ - 1);
    }

    void place_tensors(std::vector<RawTensor>& raw, std::uint64_t data_start) {
        for (const RawTensor& tensor : raw) {
            const std::string tensor_label = "tensor " + detail::quoted(tensor.name);
            if (tensor.offset % alignment_ != 0) {
                detail::fail(path_, "misaligned data offset " + std::to_string(tensor.offset) + " of " + tensor_label +
                                        " (alignment " + std::to_string(alignment_) + ")");
            }
            const auto begin = detail::checked_add(data_start, tensor.offset);
            const auto end = begin ? detail::checked_add(*begin, tensor.byte_size) : std::nullopt;
            if (!end || *end > mapping_.size()) {
                detail::fail(path_, "tensor data out of bounds: " + tensor_label + " at data offset " +
                                        std::to_string(tensor.offset) + " with " + std::to_string(tensor.byte_size) +
                                        " bytes ends past the end of the file (" + std::to_string(mapping_.size()) +
                                        " bytes; truncated file?)");
            }
        }
        // Tensors must not share bytes: sort by offset and compare neighbours.
        std::vector<std::size_t> order(raw.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return raw[a].offset < raw[b].offset; });
        for (std::size_t i = 1; i < order.size(); ++i) {
            const RawTensor& previous = raw[order[i - 1]];
            const RawTensor& current = raw[order[i]];
            if (previous.offset + previous.byte_size > current.offset) {
                detail::fail(path_, "overlapping tensor data: " + detail::quoted(previous.name) + " and " +
                                        detail::quoted(current.name));
            }
        }
        tensors_.reserve(raw.size());
        for (RawTensor& tensor : raw) {
            tensor_index_.emplace(std::string(tensor.name), tensors_.size());
            tensors_.push_back(TensorInfo{std::string(tensor.name), tensor.type, std::move(tensor.shape),
                                          tensor.element_count,
                                          mapping_.data() + data_start + tensor.offset,
                                          static_cast<std::size_t>(tensor.byte_size)});
        }
    }

    std::filesystem::path path_;
    specdec::detail::MappedFile mapping_;
    std::uint32_t version_ = 0;
    std::uint32_t alignment_ = detail::default_alignment;
    std::size_t data_offset_ = 0;
    std::map<std::string, detail::MetadataEntry, std::less<>> metadata_;
    std::vector<std::string> key_order_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

}  // namespace specdec::gguf
