#pragma once
// Byte-level BPE (tokenizer.ggml.model = "gpt2"):
//  1. split the text into words with the pre-tokenizer the file names in
//     tokenizer.ggml.pre (its regular expression written out by hand, below),
//  2. map each byte of a word to a printable character (bytes_to_unicode),
//  3. merge adjacent symbols by merge-rule rank, lowest rank first (Llama 3
//     first looks the whole word up: "ignore_merges" in its tokenizer.json),
//  4. look the final symbols up in the vocabulary.
//
// The pre-tokenizers, as the Hugging Face tokenizer.json files define them:
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//            \s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:   the same with \p{N} alone instead of \p{N}{1,3}
// \p{L}, \p{N} are the Unicode general categories (unicode_categories.hpp) and
// \s the White_Space property.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/formats/tokenizer_merge.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/formats/tokenizer_vocab.hpp"
#include "specdec/formats/unicode_categories.hpp"

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

inline Gpt2CharClass gpt2_char_class(char32_t c) {
    if (is_unicode_letter(c)) return Gpt2CharClass::letter;
    if (is_unicode_number(c)) return Gpt2CharClass::number;
    if (is_unicode_space(c)) return Gpt2CharClass::space;
    return Gpt2CharClass::other;
}

// The characters of `text` with their byte offsets and pre-tokenizer classes
// (invalid UTF-8 bytes are single "other" characters).
struct ClassifiedChar {
    std::size_t begin;
    std::size_t length;
    char32_t code_point;
    Gpt2CharClass kind;
};

inline std::vector<ClassifiedChar> classify_chars(std::string_view text) {
    std::vector<ClassifiedChar> chars;
    chars.reserve(text.size());
    for (std::size_t position = 0; position < text.size();) {
        const Utf8Char c = next_utf8_char(text, position);
        chars.push_back({position, c.length, c.code_point, c.valid ? gpt2_char_class(c.code_point) : Gpt2CharClass::other});
        position += c.length;
    }
    return chars;
}

// Splits `text` the way GPT-2's pre-tokenizer regex does. Invalid UTF-8 bytes
// count as punctuation ("other"), so every byte lands in exactly one word.
inline std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
    const std::vector<ClassifiedChar> chars = classify_chars(text);
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

// The pre-tokenizers tokenizer.ggml.pre can name.
enum class BpePreTokenizer {
    gpt2,    // "gpt2", "default" or no key: GPT-2's rule
    llama3,  // "llama-bpe" (Llama 3, 3.1, 3.2): digits in groups of up to three
    qwen2,   // "qwen2" (Qwen2, Qwen2.5): single digits
};

// Splits `text` with Llama 3's rule (max_digits = 3) or Qwen2's (max_digits = 1).
inline std::vector<std::string_view> llama3_pretokenize(std::string_view text, std::size_t max_digits) {
    const std::vector<ClassifiedChar> chars = classify_chars(text);
    const std::size_t n = chars.size();
    const auto kind = [&](std::size_t i) { return i < n ? chars[i].kind : Gpt2CharClass::space; };
    const auto newline = [&](std::size_t i) { return i < n && (chars[i].code_point == '\r' || chars[i].code_point == '\n'); };
    const auto lower_ascii = [&](std::size_t i) -> char32_t {
        if (i >= n) return 0;
        const char32_t c = chars[i].code_point;
        return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
    };
    std::vector<std::string_view> words;
    std::size_t i = 0;
    const auto emit = [&](std::size_t end) {
        const std::size_t stop = end < n ? chars[end].begin : text.size();
        words.push_back(text.substr(chars[i].begin, stop - chars[i].begin));
        i = end;
    };
    const auto letters_from = [&](std::size_t j) {
        while (j < n && chars[j].kind == Gpt2CharClass::letter) ++j;
        return j;
    };
    while (i < n) {
        const Gpt2CharClass k = chars[i].kind;
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if (chars[i].code_point == '\'') {
            const char32_t a = lower_ascii(i + 1), b = lower_ascii(i + 2);
            if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                emit(i + 2);
                continue;
            }
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
                emit(i + 3);
                continue;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (k == Gpt2CharClass::letter) {
            emit(letters_from(i));
            continue;
        }
        if (k != Gpt2CharClass::number && !newline(i) && kind(i + 1) == Gpt2CharClass::letter) {
            emit(letters_from(i + 1));
            continue;
        }
        // \p{N}{1,max_digits}
        if (k == Gpt2CharClass::number) {
            std::size_t end = i;
            while (end < n && end - i < max_digits && chars[end].kind == Gpt2CharClass::number) ++end;
            emit(end);
            continue;
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        const bool space_then_other = chars[i].code_point == ' ' && kind(i + 1) == Gpt2CharClass::other;
        if (k == Gpt2CharClass::other || space_then_other) {
            std::size_t end = space_then_other ? i + 1 : i;
            while (end < n && chars[end].kind == Gpt2CharClass::other) ++end;
            while (newline(end)) ++end;
            emit(end);
            continue;
        }
        // Whitespace: \s*[\r\n]+ up to the run's last line break, else
        // \s+(?!\S) (the run less its last character when a non-space follows), else \s+.
        std::size_t end = i;
        std::size_t after_last_newline = 0;
        while (end < n && chars[end].kind == Gpt2CharClass::space) {
            if (newline(end)) after_last_newline = end + 1;
            ++end;
        }
        if (after_last_newline > 0) {
            emit(after_last_newline);
        } else if (end < n && end - i > 1) {
            emit(end - 1);
        } else {
            emit(end);
        }
    }
    return words;
}

inline std::vector<std::string_view> bpe_pretokenize(std::string_view text, BpePreTokenizer rule) {
    switch (rule) {
        case BpePreTokenizer::llama3: return llama3_pretokenize(text, 3);
        case BpePreTokenizer::qwen2: return llama3_pretokenize(text, 1);
        case BpePreTokenizer::gpt2: break;
    }
    return gpt2_pretokenize(text);
}

// Merge rules, "left right" -> rank (its line number in tokenizer.ggml.merges).
using MergeRanks = StringMap<std::size_t>;

// Appends the tokens of one pre-tokenized word to `out`.
// With ignore_merges, a word that is a vocabulary entry as a whole is that token.
inline void bpe_encode_word(const Vocabulary& vocab, const MergeRanks& ranks, std::string_view word, Token unknown,
                            std::vector<Token>& out, bool ignore_merges = false) {
    std::string mapped;  // the word in byte-level characters
    std::vector<SymbolSpan> characters;
    for (const char c : word) {
        const std::size_t begin = mapped.size();
        append_utf8(mapped, byte_to_unicode()[static_cast<unsigned char>(c)]);
        characters.push_back({begin, mapped.size() - begin});
    }
    if (ignore_merges) {
        if (const auto token = vocab.find(mapped)) {
            out.push_back(*token);
            return;
        }
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
