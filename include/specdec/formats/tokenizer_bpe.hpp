#pragma once
// GPT-2 byte-level BPE (tokenizer.ggml.model = "gpt2"):
//  1. split the text into words with the GPT-2 pre-tokenizer,
//  2. map each byte of a word to a printable character (bytes_to_unicode),
//  3. merge adjacent symbols by merge-rule rank, lowest rank first,
//  4. look the final symbols up in the vocabulary.
//
// The pre-tokenizer is GPT-2's regular expression written out by hand:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Letters, numbers and whitespace are classified exactly for ASCII and by
// ranges for the rest of Unicode (an approximation: no full Unicode tables;
// code points not in a listed punctuation, symbol, number or space range count
// as letters, which is right for the scripts of real text).
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/tokenizer_merge.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/formats/tokenizer_vocab.hpp"

namespace specdec::detail {

// GPT-2's reversible byte -> character map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 upwards in byte order.
inline const std::array<char32_t, 256>& byte_to_unicode() {
    static const std::array<char32_t, 256> table = [] {
        std::array<char32_t, 256> map{};
        char32_t next = 256;
        for (unsigned byte = 0; byte < 256; ++byte) {
            const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
            map[byte] = printable ? static_cast<char32_t>(byte) : next++;
        }
        return map;
    }();
    return table;
}

inline std::optional<unsigned char> unicode_to_byte(char32_t code_point) {
    if (code_point < 256) {
        if (byte_to_unicode()[code_point] == code_point) return static_cast<unsigned char>(code_point);
        return std::nullopt;
    }
    if (code_point >= 256 + 68) return std::nullopt;
    for (unsigned byte = 0; byte < 256; ++byte) {
        if (byte_to_unicode()[byte] == code_point) return static_cast<unsigned char>(byte);
    }
    return std::nullopt;
}

enum class Gpt2CharClass { letter, number, space, other };

inline bool in_code_point_ranges(char32_t c, std::initializer_list<std::pair<char32_t, char32_t>> ranges) {
    for (const auto& [first, last] : ranges) {
        if (c >= first && c <= last) return true;
    }
    return false;
}

inline Gpt2CharClass gpt2_char_class(char32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Gpt2CharClass::letter;
        if (c >= '0' && c <= '9') return Gpt2CharClass::number;
        if (c == ' ' || (c >= '\t' && c <= '\r')) return Gpt2CharClass::space;
        return Gpt2CharClass::other;
    }
    if (in_code_point_ranges(c, {{0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                      {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}})) {
        return Gpt2CharClass::space;
    }
    if (in_code_point_ranges(c, {{0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x0660, 0x0669}, {0x06F0, 0x06F9},
                      {0x07C0, 0x07C9}, {0x0966, 0x096F}, {0x09E6, 0x09EF}, {0x0E50, 0x0E59}, {0x2070, 0x2070},
                      {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF},
                      {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xFF10, 0xFF19}})) {
        return Gpt2CharClass::number;
    }
    if (c == 0xAA || c == 0xB5 || c == 0xBA) return Gpt2CharClass::letter;
    if (in_code_point_ranges(c, {{0x80, 0xBF},       // Latin-1 controls, punctuation and symbols
                      {0xD7, 0xD7},       // ×
                      {0xF7, 0xF7},       // ÷
                      {0x02C2, 0x02C5}, {0x02D2, 0x02DF}, {0x02E5, 0x02EB}, {0x02ED, 0x02ED}, {0x02EF, 0x02FF},
                      {0x0300, 0x036F},   // combining marks are \p{M}, not \p{L}
                      {0x0483, 0x0489}, {0x0591, 0x05C7}, {0x05F3, 0x05F4}, {0x0600, 0x061F}, {0x064B, 0x065F},
                      {0x066A, 0x066D}, {0x0964, 0x0965}, {0x0E3F, 0x0E3F},
                      {0x2010, 0x2027}, {0x2030, 0x205E}, {0x2060, 0x206F},  // general punctuation
                      {0x20A0, 0x20CF},   // currency
                      {0x20D0, 0x20FF},   // combining marks for symbols
                      {0x2100, 0x2101}, {0x2103, 0x2106}, {0x2108, 0x2109}, {0x2114, 0x2114}, {0x2116, 0x2118},
                      {0x211E, 0x2123}, {0x2125, 0x2125}, {0x2127, 0x2127}, {0x2129, 0x2129}, {0x212E, 0x212E},
                      {0x2190, 0x245F},   // arrows, mathematical operators, technical, control pictures
                      {0x249C, 0x24E9}, {0x2500, 0x2775}, {0x2794, 0x2BFF},  // boxes, shapes, dingbats, symbols
                      {0x2E00, 0x2E7F},   // supplemental punctuation
                      {0x3001, 0x3004}, {0x3008, 0x3020}, {0x3030, 0x3030}, {0x303D, 0x303F},  // CJK punctuation
                      {0x3099, 0x309C}, {0x30A0, 0x30A0}, {0x30FB, 0x30FB},
                      {0xFE00, 0xFE0F},   // variation selectors
                      {0xFE10, 0xFE6F},   // vertical forms, small forms
                      {0xFEFF, 0xFEFF},
                      {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65},
                      {0xFFE0, 0xFFFF},
                      {0x1D100, 0x1D24F},  // musical symbols
                      {0x1F000, 0x1FAFF},  // emoji and pictographs
                      {0xE0000, 0x10FFFF}})) {  // tags, private use
        return Gpt2CharClass::other;
    }
    return Gpt2CharClass::letter;
}

// Splits `text` the way GPT-2's pre-tokenizer regex does. Invalid UTF-8 bytes
// count as punctuation ("other"), so every byte lands in exactly one word.
inline std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
    struct Char {
        std::size_t begin;
        std::size_t length;
        char32_t code_point;
        Gpt2CharClass kind;
    };
    std::vector<Char> chars;
    chars.reserve(text.size());
    for (std::size_t position = 0; position < text.size();) {
        const Utf8Char c = next_utf8_char(text, position);
        chars.push_back({position, c.length, c.code_point, c.valid ? gpt2_char_class(c.code_point) : Gpt2CharClass::other});
        position += c.length;
    }
    const std::size_t n = chars.size();
    const auto kind_at = [&](std::size_t i) { return i < n ? std::optional(chars[i].kind) : std::nullopt; };
    const auto ascii_at = [&](std::size_t i) -> char32_t { return i < n ? chars[i].code_point : 0; };

    std::vector<std::string_view> words;
    const auto emit = [&](std::size_t first, std::size_t end) {
        const std::size_t begin = chars[first].begin;
        const std::size_t stop = end < n ? chars[end].begin : text.size();
        words.push_back(text.substr(begin, stop - begin));
    };

    std::size_t i = 0;
    while (i < n) {
        // 's 't 're 've 'm 'll 'd  (case-sensitive, as in GPT-2)
        if (chars[i].code_point == '\'') {
            const char32_t a = ascii_at(i + 1);
            const char32_t b = ascii_at(i + 2);
            std::size_t length = 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') length = 2;
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) length = 3;
            if (length > 0) {
                emit(i, i + length);
                i += length;
                continue;
            }
        }
        // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional single space, then a run of one class.
        const std::size_t start = i;
        std::size_t run = i;
        if (chars[i].code_point == ' ' && kind_at(i + 1) && *kind_at(i + 1) != Gpt2CharClass::space) run = i + 1;
        const Gpt2CharClass kind = chars[run].kind;
        if (kind != Gpt2CharClass::space) {
            std::size_t end = run;
            while (end < n && chars[end].kind == kind) ++end;
            emit(start, end);
            i = end;
            continue;
        }
        // "\s+(?!\S)|\s+": a whitespace run; when a non-space follows, its last
        // character is left to start the next word (unless the run is one char).
        std::size_t end = i;
        while (end < n && chars[end].kind == Gpt2CharClass::space) ++end;
        if (end < n && end - i > 1) --end;
        emit(i, end);
        i = end;
    }
    return words;
}

// Merge rules, "left right" -> rank (its line number in tokenizer.ggml.merges).
using MergeRanks = StringMap<std::size_t>;

// Appends the tokens of one pre-tokenized word to `out`.
inline void bpe_encode_word(const Vocabulary& vocab, const MergeRanks& ranks, std::string_view word, Token unknown,
                            std::vector<Token>& out) {
    std::string mapped;  // the word in byte-level characters
    std::vector<SymbolSpan> characters;
    for (const char c : word) {
        const std::size_t begin = mapped.size();
        append_utf8(mapped, byte_to_unicode()[static_cast<unsigned char>(c)]);
        characters.push_back({begin, mapped.size() - begin});
    }
    std::string key;
    const auto rank_priority = [&](std::string_view left, std::string_view right) -> std::optional<double> {
        key.assign(left).append(" ").append(right);
        const auto found = ranks.find(std::string_view(key));
        if (found == ranks.end()) return std::nullopt;
        return -static_cast<double>(found->second);  // lower rank merges first
    };
    for (const SymbolSpan symbol : merge_symbols(mapped, characters, rank_priority)) {
        const std::string_view piece = std::string_view(mapped).substr(symbol.begin, symbol.length);
        if (const auto token = vocab.find(piece)) {
            out.push_back(*token);
            continue;
        }
        // Not in the vocabulary: fall back to one token per byte-level character.
        for (std::size_t position = 0; position < piece.size();) {
            const std::size_t length = next_utf8_char(piece, position).length;
            if (const auto token = vocab.find(piece.substr(position, length))) {
                out.push_back(*token);
            } else if (unknown >= 0) {
                out.push_back(unknown);
            } else {
                throw Error("tokenizer: the byte-level BPE vocabulary has no token for '" +
                            std::string(piece.substr(position, length)) + "' and no unknown token");
            }
            position += length;
        }
    }
}

// The bytes a byte-level piece stands for; characters outside the byte map
// (not produced by GPT-2 vocabularies) are kept as their UTF-8.
inline std::string bpe_piece_bytes(std::string_view piece) {
    std::string bytes;
    for (std::size_t position = 0; position < piece.size();) {
        const Utf8Char c = next_utf8_char(piece, position);
        const auto byte = c.valid ? unicode_to_byte(c.code_point) : std::nullopt;
        if (byte) {
            bytes += static_cast<char>(*byte);
        } else {
            bytes.append(piece.substr(position, c.length));
        }
        position += c.length;
    }
    return bytes;
}

}  // namespace specdec::detail
