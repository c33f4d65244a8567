#pragma once
// The regular-expression subset that RegexConstraint compiles, parsed into a
// small syntax tree. The subset is what a structured-output pattern needs and
// nothing that a finite automaton cannot express:
//
//   literals        any byte but the metacharacters . [ ( ) { | * + ? \ ^ $
//                   (] and } outside a class are literal, as in ECMAScript's Annex B)
//   escapes         \\ \" \. \{ \/ ... (any punctuation stands for itself),
//                   \n \t \r \f \v \0 \xHH, and the classes \d \D \w \W \s \S
//   classes         [a-z0-9_], negated [^"], escapes inside ([\]\-\n\d])
//   any byte        .  (every byte but \n and \r, as in ECMAScript)
//   groups          ( ) and (?: ), alternation |
//   quantifiers     * + ? {m} {m,} {m,n}  (counts up to kMaxRegexRepeat)
//   anchors         ^ as the first and $ as the last character only: the
//                   whole text must match anyway (full-match semantics)
//
// Everything else is refused with a specdec::Error that names the construct
// and its byte offset: backreferences, lookahead and lookbehind, anchors and
// word boundaries inside the pattern, lazy and possessive quantifiers, named
// groups, POSIX classes, \u escapes. The automaton reads bytes: '.' and a
// negated class match one byte, so a multi-byte UTF-8 character is several.
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec::regex {

using ByteSet = std::bitset<256>;

inline constexpr std::size_t kMaxRegexRepeat = 1000;     // largest m or n of {m,n}
inline constexpr std::size_t kMaxRegexNesting = 200;     // deepest group nesting
inline constexpr std::size_t kUnboundedRepeat = std::numeric_limits<std::size_t>::max();

// One node of the syntax tree; children are indices into SyntaxTree::nodes.
struct SyntaxNode {
    enum class Kind : unsigned char { empty, bytes, concat, alternate, repeat };
    Kind kind = Kind::empty;
    ByteSet bytes{};                  // Kind::bytes: the bytes this position accepts
    std::vector<std::size_t> children{};
    std::size_t min = 0;              // Kind::repeat: {min, max} of its one child
    std::size_t max = 0;              // kUnboundedRepeat for * and +
};

struct SyntaxTree {
    std::vector<SyntaxNode> nodes;
    std::size_t root = 0;
};

namespace detail {

class RegexParser {
public:
    explicit RegexParser(std::string_view pattern) : pattern_(pattern) {}

    SyntaxTree parse() {
        if (!at_end() && peek() == '^') ++pos_;  // a leading ^ is implied by full matching
        const std::size_t root = parse_alternation(0);
        if (!at_end()) fail("unmatched )", pos_);
        return SyntaxTree{std::move(nodes_), root};
    }

private:
    [[noreturn]] void fail(const std::string& construct, std::size_t offset) const {
        throw Error("regex \"" + std::string(pattern_) + "\": " + construct + " at offset " + std::to_string(offset) +
                    " is not supported");
    }
    [[noreturn]] void malformed(const std::string& what, std::size_t offset) const {
        throw Error("regex \"" + std::string(pattern_) + "\": " + what + " at offset " + std::to_string(offset));
    }

    [[nodiscard]] bool at_end() const { return pos_ >= pattern_.size(); }
    [[nodiscard]] char peek(std::size_t ahead = 0) const {
        return pos_ + ahead < pattern_.size() ? pattern_[pos_ + ahead] : '\0';
    }
    [[nodiscard]] bool has(std::size_t ahead) const { return pos_ + ahead < pattern_.size(); }

    std::size_t add(SyntaxNode node) {
        nodes_.push_back(std::move(node));
        return nodes_.size() - 1;
    }
    std::size_t add_bytes(const ByteSet& bytes) { return add(SyntaxNode{.kind = SyntaxNode::Kind::bytes, .bytes = bytes}); }

    std::size_t parse_alternation(std::size_t depth) {
        std::vector<std::size_t> branches{parse_concat(depth)};
        while (!at_end() && peek() == '|') {
            ++pos_;
            branches.push_back(parse_concat(depth));
        }
        if (branches.size() == 1) return branches.front();
        return add(SyntaxNode{.kind = SyntaxNode::Kind::alternate, .children = std::move(branches)});
    }

    std::size_t parse_concat(std::size_t depth) {
        std::vector<std::size_t> items;
        while (!at_end() && peek() != '|' && peek() != ')') {
            const std::size_t atom = parse_atom(depth);
            items.push_back(parse_quantifier(atom));
        }
        if (!at_end() && peek() == ')' && depth == 0) malformed("unmatched )", pos_);
        if (items.size() == 1) return items.front();
        if (items.empty()) return add(SyntaxNode{});
        return add(SyntaxNode{.kind = SyntaxNode::Kind::concat, .children = std::move(items)});
    }

    // A quantifier after `atom`, if any; a second one right after is refused
    // (a*? is lazy and a*+ possessive in other dialects, a** is an error).
    std::size_t parse_quantifier(std::size_t atom) {
        if (at_end()) return atom;
        const std::size_t start = pos_;
        std::size_t min = 0, max = 0;
        switch (peek()) {
            case '*': min = 0, max = kUnboundedRepeat, ++pos_; break;
            case '+': min = 1, max = kUnboundedRepeat, ++pos_; break;
            case '?': min = 0, max = 1, ++pos_; break;
            case '{': parse_counts(min, max); break;
            default: return atom;
        }
        if (!at_end()) {
            if (peek() == '?') fail("lazy quantifier " + std::string(pattern_.substr(start, pos_ + 1 - start)), start);
            if (peek() == '+')
                fail("possessive quantifier " + std::string(pattern_.substr(start, pos_ + 1 - start)), start);
            if (peek() == '*' || peek() == '{') malformed("a quantifier after a quantifier", pos_);
        }
        return add(SyntaxNode{.kind = SyntaxNode::Kind::repeat, .children = {atom}, .min = min, .max = max});
    }

    std::size_t parse_number() {
        const std::size_t start = pos_;
        std::size_t value = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            value = value * 10 + static_cast<std::size_t>(peek() - '0');
            if (value > kMaxRegexRepeat)
                malformed("repetition count above " + std::to_string(kMaxRegexRepeat), start);
            ++pos_;
        }
        if (pos_ == start) malformed("malformed repetition { (expected {m}, {m,} or {m,n}; write \\{ for a brace)", start - 1);
        return value;
    }

    void parse_counts(std::size_t& min, std::size_t& max) {
        const std::size_t start = pos_;
        ++pos_;  // {
        min = parse_number();
        max = min;
        if (!at_end() && peek() == ',') {
            ++pos_;
            max = !at_end() && peek() == '}' ? kUnboundedRepeat : parse_number();
        }
        if (at_end() || peek() != '}')
            malformed("malformed repetition { (expected {m}, {m,} or {m,n}; write \\{ for a brace)", start);
        ++pos_;
        if (max < min) malformed("repetition {m,n} with n < m", start);
    }

    std::size_t parse_atom(std::size_t depth) {
        const std::size_t start = pos_;
        const char c = peek();
        switch (c) {
            case '(': return parse_group(depth);
            case '[': return add_bytes(parse_class());
            case '.': {
                ++pos_;
                ByteSet any;
                any.set();
                any.reset('\n');
                any.reset('\r');
                return add_bytes(any);
            }
            case '\\': return add_bytes(parse_escape(false));
            case '^': fail("anchor ^ inside the pattern", start);
            case '$':
                if (start + 1 == pattern_.size()) {  // a trailing $ is implied by full matching
                    ++pos_;
                    return add(SyntaxNode{});
                }
                fail("anchor $ inside the pattern", start);
            case '*':
            case '+':
            case '?': malformed(std::string("quantifier ") + c + " with nothing to repeat", start);
            case '{': malformed("quantifier { with nothing to repeat (write \\{ for a brace)", start);
            default: {
                ++pos_;
                ByteSet one;
                one.set(static_cast<unsigned char>(c));
                return add_bytes(one);
            }
        }
    }

    std::size_t parse_group(std::size_t depth) {
        const std::size_t open = pos_;
        if (depth + 1 > kMaxRegexNesting)
            malformed("groups nested deeper than " + std::to_string(kMaxRegexNesting), open);
        ++pos_;
        if (peek() == '?') {
            if (peek(1) == ':') {
                pos_ += 2;
            } else if (peek(1) == '=') {
                fail("lookahead (?=", open);
            } else if (peek(1) == '!') {
                fail("negative lookahead (?!", open);
            } else if (peek(1) == '<' && peek(2) == '=') {
                fail("lookbehind (?<=", open);
            } else if (peek(1) == '<' && peek(2) == '!') {
                fail("negative lookbehind (?<!", open);
            } else if (peek(1) == '<' || peek(1) == 'P') {
                fail("named group (?<name>", open);
            } else {
                fail("group modifier (?" + std::string(has(1) ? std::string(1, peek(1)) : ""), open);
            }
        }
        const std::size_t inner = parse_alternation(depth + 1);
        if (at_end() || peek() != ')') malformed("unclosed group ( opened", open);
        ++pos_;
        return inner;
    }

    static ByteSet digits() {
        ByteSet set;
        for (int b = '0'; b <= '9'; ++b) set.set(static_cast<std::size_t>(b));
        return set;
    }
    static ByteSet word() {
        ByteSet set = digits();
        for (int b = 'a'; b <= 'z'; ++b) set.set(static_cast<std::size_t>(b));
        for (int b = 'A'; b <= 'Z'; ++b) set.set(static_cast<std::size_t>(b));
        set.set('_');
        return set;
    }
    static ByteSet spaces() {
        ByteSet set;
        for (const char b : {' ', '\t', '\n', '\v', '\f', '\r'}) set.set(static_cast<unsigned char>(b));
        return set;
    }
    static int hex_value(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    // The bytes one escape stands for; pos_ is at the backslash.
    ByteSet parse_escape(bool in_class) {
        const std::size_t start = pos_;
        if (!has(1)) malformed("trailing backslash", start);
        const char c = peek(1);
        pos_ += 2;
        ByteSet set;
        auto single = [&](unsigned char byte) {
            set.set(byte);
            return set;
        };
        switch (c) {
            case 'd': return digits();
            case 'D': return ~digits();
            case 'w': return word();
            case 'W': return ~word();
            case 's': return spaces();
            case 'S': return ~spaces();
            case 'n': return single('\n');
            case 't': return single('\t');
            case 'r': return single('\r');
            case 'f': return single('\f');
            case 'v': return single('\v');
            case '0':
                if (!at_end() && peek() >= '0' && peek() <= '9') fail("octal escape \\0" + std::string(1, peek()), start);
                return single('\0');
            case 'x': {
                const int high = hex_value(peek()), low = hex_value(peek(1));
                if (high < 0 || low < 0) malformed("malformed escape \\x (expected two hex digits)", start);
                pos_ += 2;
                return single(static_cast<unsigned char>(high * 16 + low));
            }
            case 'b':
                if (in_class) return single('\b');  // [\b] is a backspace, as in ECMAScript
                fail("word boundary \\b", start);
            case 'B': fail("word boundary \\B", start);
            case 'k': fail("named backreference \\k", start);
            case 'u': fail("escape \\u (write the character's UTF-8 bytes)", start);
            case 'c': fail("control escape \\c", start);
            default: break;
        }
        if (c >= '1' && c <= '9') fail(std::string("backreference \\") + c, start);
        const bool alphanumeric = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (alphanumeric) fail(std::string("escape \\") + c, start);
        return single(static_cast<unsigned char>(c));  // \\ \" \. \{ and every other punctuation
    }

    ByteSet parse_class() {
        const std::size_t open = pos_;
        ++pos_;  // [
        bool negated = false;
        if (peek() == '^' && has(0)) {
            negated = true;
            ++pos_;
        }
        if (!at_end() && peek() == ']') malformed(negated ? "empty class [^]" : "empty class []", open);
        ByteSet set;
        while (true) {
            if (at_end()) malformed("unclosed class [ opened", open);
            if (peek() == ']') break;
            if (peek() == '[' && (peek(1) == ':' || peek(1) == '=' || peek(1) == '.'))
                fail(std::string("POSIX class [") + peek(1), pos_);
            const std::size_t item = pos_;
            int low = -1;  // the byte when the item is one byte (a range end)
            if (peek() == '\\') {
                const ByteSet escaped = parse_escape(true);
                if (escaped.count() == 1)
                    for (int b = 0; b < 256; ++b)
                        if (escaped.test(static_cast<std::size_t>(b))) low = b;
                set |= escaped;
            } else {
                low = static_cast<unsigned char>(peek());
                set.set(static_cast<std::size_t>(low));
                ++pos_;
            }
            // a-z: a range; a '-' first, last or after a range is literal.
            if (peek() == '-' && has(1) && peek(1) != ']') {
                if (low < 0) malformed("class range starting with a class escape", item);
                ++pos_;
                int high = -1;
                const std::size_t end_item = pos_;
                if (peek() == '\\') {
                    const ByteSet escaped = parse_escape(true);
                    if (escaped.count() != 1) malformed("class range ending with a class escape", end_item);
                    for (int b = 0; b < 256; ++b)
                        if (escaped.test(static_cast<std::size_t>(b))) high = b;
                } else {
                    if (peek() == '[' && (peek(1) == ':' || peek(1) == '=' || peek(1) == '.'))
                        fail(std::string("POSIX class [") + peek(1), pos_);
                    high = static_cast<unsigned char>(peek());
                    ++pos_;
                }
                if (high < low) malformed("class range out of order", item);
                for (int b = low; b <= high; ++b) set.set(static_cast<std::size_t>(b));
            }
        }
        ++pos_;  // ]
        return negated ? ~set : set;
    }

    std::string_view pattern_;
    std::size_t pos_ = 0;
    std::vector<SyntaxNode> nodes_;
};

}  // namespace detail

// Throws specdec::Error naming the unsupported construct or the malformed
// part and its byte offset.
[[nodiscard]] inline SyntaxTree parse_regex(std::string_view pattern) { return detail::RegexParser(pattern).parse(); }

}  // namespace specdec::regex
