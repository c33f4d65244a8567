#pragma once
// UTF-8 helpers for the tokenizers. Text given to a tokenizer may be invalid
// UTF-8; such bytes are treated as one-byte "characters" so that they still
// reach the byte fallback and round-trip exactly.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specdec::detail {

// Length a sequence announces by its first byte: 1-4, or 0 for a byte that
// cannot start a sequence (a continuation byte or 0xF8-0xFF).
inline std::size_t utf8_announced_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead < 0xC0) return 0;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    if (lead < 0xF8) return 4;
    return 0;
}

inline bool is_utf8_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

struct Utf8Char {
    char32_t code_point;  // for an invalid byte: the byte value, flagged by `valid`
    std::size_t length;   // bytes consumed, >= 1
    bool valid;
};

// The character starting at `position`, strictly validated (no overlong
// forms, no surrogates, nothing above U+10FFFF); an invalid byte is returned
// alone with valid = false.
inline Utf8Char next_utf8_char(std::string_view text, std::size_t position) {
    const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte_at(position);
    const std::size_t length = utf8_announced_length(lead);
    const Utf8Char invalid{lead, 1, false};
    if (length == 1) return {lead, 1, true};
    if (length == 0 || position + length > text.size()) return invalid;
    char32_t code_point = lead & (0x7F >> length);
    for (std::size_t i = 1; i < length; ++i) {
        const unsigned char next = byte_at(position + i);
        if (!is_utf8_continuation(next)) return invalid;
        code_point = (code_point << 6) | (next & 0x3F);
    }
    static constexpr char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < smallest[length] || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
        return invalid;
    }
    return {code_point, length, true};
}

inline void append_utf8(std::string& out, char32_t code_point) {
    if (code_point < 0x80) {
        out += static_cast<char>(code_point);
    } else if (code_point < 0x800) {
        out += static_cast<char>(0xC0 | (code_point >> 6));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else if (code_point < 0x10000) {
        out += static_cast<char>(0xE0 | (code_point >> 12));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (code_point >> 18));
        out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    }
}

// How many bytes at the end of `text` form a sequence that is still waiting
// for continuation bytes (0 when the text ends on a character boundary or on
// bytes that can never become valid). Streaming decoders hold these back.
inline std::size_t incomplete_utf8_suffix(std::string_view text) {
    const std::size_t look_back = text.size() < 3 ? text.size() : 3;
    for (std::size_t back = 1; back <= look_back; ++back) {
        const auto byte = static_cast<unsigned char>(text[text.size() - back]);
        if (is_utf8_continuation(byte)) continue;
        const std::size_t announced = utf8_announced_length(byte);
        return announced > back ? back : 0;
    }
    return 0;
}

}  // namespace specdec::detail
