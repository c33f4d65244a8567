#pragma once
// The tokenizer stored in a GGUF file's metadata, for the two models the
// reference Llama-family checkpoints use:
//
//   "llama"  SentencePiece-style (tokenizer_spm.hpp): scores decide merges,
//            U+2581 stands for a space, <0xXX> tokens cover any other byte.
//   "gpt2"   byte-level BPE (tokenizer_bpe.hpp): merge rules decide merges,
//            every byte has a printable stand-in character.
//
// Keys read: tokenizer.ggml.model, .tokens, .scores, .token_type, .merges,
// .bos_token_id, .eos_token_id, .unknown_token_id, .add_bos_token,
// .add_eos_token, .add_space_prefix, .eot_token_id, .eom_token_id,
// .fim_pad_token_id, .fim_rep_token_id, .fim_sep_token_id. User-defined
// tokens (token type 4) are matched literally in the text before the model
// runs, as llama.cpp does; control tokens typed in the text stay text unless
// encode() is asked to parse special tokens (SpecialTokens::parse, for
// prompts formatted by a chat template).
//
// End of generation: EOS, EOT, EOM, the FIM pad/repeat/separator tokens and
// every token spelled as an end-of-turn marker (<|eot_id|>, <|im_end|>,
// <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, ...), as llama.cpp
// decides its EOG set. Such a marker is a control token whatever its type
// says (it decodes to nothing and is not matched in plain text), as in
// llama.cpp.
//
// A "gpt2" model splits text into words with the pre-tokenizer named by
// tokenizer.ggml.pre: "gpt2", "default" or none (GPT-2's rule), "llama-bpe"
// (Llama 3), "qwen2" (Qwen2 / Qwen2.5); any other name is an error, since a
// different split gives different tokens.
//
// Decoding is byte-exact: decode(encode(text)) == text for any text the
// vocabulary covers (with byte tokens: any text), given add_bos = true for a
// "llama" model — the space prefix encode adds is dropped again after BOS.
// Control tokens (BOS, EOS, ...) decode to nothing.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/tokenizer_bpe.hpp"
#include "specdec/formats/tokenizer_spm.hpp"
#include "specdec/formats/tokenizer_utf8.hpp"
#include "specdec/formats/tokenizer_vocab.hpp"

namespace specdec {

// Whether encode() turns the spelling of a control token in the text
// ("<|im_start|>") into that token, or leaves it text.
enum class SpecialTokens {
    as_text,  // only user-defined tokens are matched in the text
    parse,    // control (and unknown) tokens are matched too, longest first
};

enum class TokenizerModel {
    sentencepiece,   // tokenizer.ggml.model = "llama"
    byte_level_bpe,  // tokenizer.ggml.model = "gpt2"
};

class Tokenizer {
public:
    static Tokenizer from_gguf(const gguf::File& file) {
        Tokenizer tokenizer;
        tokenizer.load(file);
        return tokenizer;
    }

    // Tokens of `text` with BOS and EOS as the model file asks
    // (tokenizer.ggml.add_bos_token, tokenizer.ggml.add_eos_token).
    [[nodiscard]] std::vector<Token> encode(std::string_view text) const { return encode(text, add_bos_, add_eos_); }

    // Tokens of `text`, preceded by BOS when add_bos and followed by EOS when
    // add_eos (an Error if the vocabulary has no such token).
    [[nodiscard]] std::vector<Token> encode(std::string_view text, bool add_bos, bool add_eos = false) const {
        return encode(text, add_bos, add_eos, SpecialTokens::as_text);
    }

    // The same, with the spellings of control tokens in `text` parsed as
    // those tokens when `special` is SpecialTokens::parse. With a space
    // prefix (SentencePiece), every text fragment that follows a parsed
    // token gets one, as llama.cpp does.
    [[nodiscard]] std::vector<Token> encode(std::string_view text, bool add_bos, bool add_eos,
                                            SpecialTokens special) const {
        std::vector<Token> tokens = encode_text(text, add_bos, special == SpecialTokens::parse);
        if (add_eos) {
            if (eos_ < 0) throw Error("tokenizer: EOS requested but the vocabulary has no EOS token");
            tokens.push_back(eos_);
        }
        return tokens;
    }

private:
    [[nodiscard]] std::vector<Token> encode_text(std::string_view text, bool add_bos, bool parse_special) const {
        std::vector<Token> tokens;
        if (add_bos) {
            if (bos_ < 0) throw Error("tokenizer: BOS requested but the vocabulary has no BOS token");
            tokens.push_back(bos_);
        }
        if (text.empty()) return tokens;
        bool first_fragment = true;
        bool after_special = false;
        for (const Fragment& fragment : split_user_defined(text, parse_special)) {
            if (fragment.token) {
                tokens.push_back(*fragment.token);
                after_special = parse_special;
            } else if (model_ == TokenizerModel::sentencepiece) {
                // The space prefix marks the start of the text only, so that
                // decoding after BOS can drop it again exactly (and, when
                // parsing special tokens, the text after each of them).
                const bool prefix = add_space_prefix_ && (first_fragment || after_special);
                after_special = false;
                const std::string escaped = detail::spm_escape_spaces(fragment.text, prefix);
                detail::spm_encode(vocab_, escaped, unknown_, tokens);
            } else {
                for (const std::string_view word : detail::bpe_pretokenize(fragment.text, pre_tokenizer_)) {
                    detail::bpe_encode_word(vocab_, merge_ranks_, word, unknown_, tokens, ignore_merges_);
                }
            }
            first_fragment = false;
        }
        return tokens;
    }

public:
    [[nodiscard]] std::string decode(std::span<const Token> tokens) const {
        std::string text;
        bool after_bos = false;
        for (const Token token : tokens) append_text(token, text, after_bos);
        return text;
    }

    // The piece as stored in the vocabulary ("▁time", "<0x0A>", "Ġworld").
    [[nodiscard]] std::string token_piece(Token token) const { return vocab_.pieces[checked(token)]; }
    // The bytes the token decodes to on its own (no BOS context).
    [[nodiscard]] const std::string& token_text(Token token) const { return texts_[checked(token)]; }
    [[nodiscard]] TokenKind token_kind(Token token) const { return vocab_.kinds[checked(token)]; }
    [[nodiscard]] float token_score(Token token) const { return vocab_.scores[checked(token)]; }
    // The id of a piece the model can produce from text, if any.
    [[nodiscard]] std::optional<Token> find_token(std::string_view piece) const { return vocab_.find(piece); }

    // -1 when the vocabulary has no such token (then has_bos() etc. are false).
    [[nodiscard]] Token bos() const { return bos_; }
    [[nodiscard]] Token eos() const { return eos_; }
    [[nodiscard]] Token unknown() const { return unknown_; }
    // End of turn / end of message (-1 when the vocabulary has none).
    [[nodiscard]] Token eot() const { return eot_; }
    [[nodiscard]] Token eom() const { return eom_; }
    // Every token that ends generation (see the top of this file), ascending;
    // for DecodingOptions::stop_tokens or text::TextOptions::end_of_generation.
    [[nodiscard]] const std::vector<Token>& end_of_generation() const { return end_of_generation_; }
    [[nodiscard]] bool is_end_of_generation(Token token) const {
        return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), token);
    }
    [[nodiscard]] bool has_bos() const { return bos_ >= 0; }
    [[nodiscard]] bool has_eos() const { return eos_ >= 0; }
    [[nodiscard]] bool add_bos_by_default() const { return add_bos_; }
    [[nodiscard]] bool add_eos_by_default() const { return add_eos_; }
    // The names LlamaCppModel has, so that code runs on either engine:
    // tokenize = encode, detokenize = decode, add_bos = add_bos_by_default.
    [[nodiscard]] std::vector<Token> tokenize(std::string_view text) const { return encode(text); }
    [[nodiscard]] std::vector<Token> tokenize(std::string_view text, bool add_bos) const { return encode(text, add_bos); }
    [[nodiscard]] std::string detokenize(std::span<const Token> tokens) const { return decode(tokens); }
    [[nodiscard]] bool add_bos() const { return add_bos_; }
    [[nodiscard]] bool add_space_prefix() const { return add_space_prefix_; }
    [[nodiscard]] TokenizerModel model() const { return model_; }
    // The word-splitting rule of a byte-level BPE model.
    [[nodiscard]] detail::BpePreTokenizer pre_tokenizer() const { return pre_tokenizer_; }
    [[nodiscard]] std::size_t vocab_size() const { return vocab_.size(); }

    // Incremental decoding for streaming output: push() returns the text that
    // became complete, holding back the bytes of a UTF-8 character whose
    // remaining bytes are still to come (e.g. "é" split over two byte tokens).
    // Bytes that can never form valid UTF-8 are passed through, not held.
    // The concatenation of all push() results and flush() equals decode() of
    // the same tokens. The tokenizer must outlive its stream decoders.
    class StreamDecoder {
    public:
        explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

        std::string push(Token token) {
            tokenizer_->append_text(token, pending_, after_bos_);
            const std::size_t held = detail::incomplete_utf8_suffix(pending_);
            std::string complete = pending_.substr(0, pending_.size() - held);
            pending_.erase(0, pending_.size() - held);
            return complete;
        }

        // Whatever is held back (an incomplete character at the end of the stream).
        std::string flush() { return std::exchange(pending_, std::string()); }

    private:
        const Tokenizer* tokenizer_;
        std::string pending_;
        bool after_bos_ = false;
    };

private:
    Tokenizer() = default;

    struct Fragment {
        std::string_view text;
        std::optional<Token> token;  // set for a user-defined token
    };

    std::size_t checked(Token token) const {
        if (token < 0 || static_cast<std::size_t>(token) >= vocab_.size()) {
            throw Error("tokenizer: token id " + std::to_string(token) + " is out of range (vocabulary of " +
                        std::to_string(vocab_.size()) + " tokens)");
        }
        return static_cast<std::size_t>(token);
    }

    // Decoding shares one rule between decode() and StreamDecoder: with a space
    // prefix, the first text after a BOS loses its leading space (the prefix
    // encode added). Control tokens in between keep the rule pending.
    void append_text(Token token, std::string& out, bool& after_bos) const {
        const std::size_t index = checked(token);
        if (token == bos_) {
            after_bos = add_space_prefix_;
            return;
        }
        std::string_view text = texts_[index];
        if (text.empty()) return;
        if (after_bos && text.front() == ' ') text.remove_prefix(1);
        after_bos = false;
        out += text;
    }

    // Splits the text at occurrences of user-defined tokens (and with
    // parse_special, of control and unknown tokens), longest match first.
    std::vector<Fragment> split_user_defined(std::string_view text, bool parse_special = false) const {
        const auto& buckets = parse_special ? special_by_first_byte_ : vocab_.user_defined_by_first_byte;
        if (!(parse_special ? has_special_pieces_ : vocab_.has_user_defined)) return {Fragment{text, std::nullopt}};
        std::vector<Fragment> fragments;
        std::size_t plain_begin = 0;
        for (std::size_t position = 0; position < text.size();) {
            const std::string* match = nullptr;
            for (const std::string& piece : buckets[static_cast<unsigned char>(text[position])]) {
                if (text.substr(position, piece.size()) == piece) {
                    match = &piece;
                    break;  // sorted longest first
                }
            }
            if (match == nullptr) {
                ++position;
                continue;
            }
            if (position > plain_begin) fragments.push_back({text.substr(plain_begin, position - plain_begin), {}});
            fragments.push_back({text.substr(position, match->size()), special_token_of(*match)});
            position += match->size();
            plain_begin = position;
        }
        if (plain_begin < text.size()) fragments.push_back({text.substr(plain_begin), std::nullopt});
        return fragments;
    }

    [[noreturn]] static void fail(const gguf::File& file, const std::string& problem) {
        throw Error("tokenizer: " + problem + " in GGUF file '" + file.path().string() + "'");
    }

    // A special token id from the metadata: absent -> fallback; the value
    // 0xFFFFFFFF (llama.cpp's "none" written as uint32) -> none.
    Token special_token(const gguf::File& file, std::string_view key, Token fallback) const {
        const std::optional<std::uint64_t> id = file.find_uint(key);
        if (!id) return fallback < static_cast<Token>(vocab_.size()) ? fallback : -1;
        if (*id == 0xFFFFFFFFu || *id == std::numeric_limits<std::uint64_t>::max()) return -1;
        if (*id >= vocab_.size()) {
            fail(file, std::string(key) + " = " + std::to_string(*id) + " is out of range (vocabulary of " +
                           std::to_string(vocab_.size()) + " tokens)");
        }
        return static_cast<Token>(*id);
    }

    void load(const gguf::File& file) {
        const std::optional<std::string> model = file.find_string("tokenizer.ggml.model");
        if (!model) fail(file, "missing tokenizer.ggml.model");
        if (*model == "llama") {
            model_ = TokenizerModel::sentencepiece;
        } else if (*model == "gpt2") {
            model_ = TokenizerModel::byte_level_bpe;
        } else {
            fail(file, "unsupported tokenizer model '" + *model + "' (supported: llama, gpt2)");
        }
        load_vocabulary(file);
        if (model_ == TokenizerModel::byte_level_bpe) {
            load_merges(file);
            load_pre_tokenizer(file);
        }

        const bool spm = model_ == TokenizerModel::sentencepiece;
        // llama.cpp's defaults for SentencePiece vocabularies: <unk> 0, <s> 1, </s> 2.
        bos_ = special_token(file, "tokenizer.ggml.bos_token_id", spm ? 1 : -1);
        eos_ = special_token(file, "tokenizer.ggml.eos_token_id", spm ? 2 : -1);
        unknown_ = special_token(file, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
        add_bos_ = file.find_bool("tokenizer.ggml.add_bos_token").value_or(spm);
        add_eos_ = file.find_bool("tokenizer.ggml.add_eos_token").value_or(false);
        add_space_prefix_ = spm && file.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
        load_end_of_generation(file);
        // Whatever their type says, BOS, EOS and the end-of-generation tokens are markers, never text.
        for (const Token special : {bos_, eos_}) {
            if (special >= 0) texts_[static_cast<std::size_t>(special)].clear();
        }
        for (const Token special : end_of_generation_) texts_[static_cast<std::size_t>(special)].clear();
    }

    // The spellings llama.cpp recognises as ending a turn.
    static bool is_end_marker(std::string_view piece) {
        static constexpr std::string_view markers[] = {
            "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
            "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
            "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
            "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};
        return std::find(std::begin(markers), std::end(markers), piece) != std::end(markers);
    }
    // The spellings llama.cpp takes for the EOT token when the metadata names
    // none: the rank of `piece` in that list, or -1.
    static int eot_marker_rank(std::string_view piece) {
        static constexpr std::string_view markers[] = {
            "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
            "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
            "<end_of_utterance>"};
        const auto found = std::find(std::begin(markers), std::end(markers), piece);
        return found == std::end(markers) ? -1 : static_cast<int>(found - std::begin(markers));
    }

    void load_end_of_generation(const gguf::File& file) {
        eot_ = special_token(file, "tokenizer.ggml.eot_token_id", -1);
        eom_ = special_token(file, "tokenizer.ggml.eom_token_id", -1);
        const bool find_eot = eot_ < 0, find_eom = eom_ < 0;
        int best_rank = std::numeric_limits<int>::max();
        for (std::size_t i = 0; i < vocab_.size(); ++i) {
            const int rank = find_eot ? eot_marker_rank(vocab_.pieces[i]) : -1;
            if (rank >= 0 && rank < best_rank) {
                best_rank = rank;
                eot_ = static_cast<Token>(i);
            }
            if (find_eom && eom_ < 0 && vocab_.pieces[i] == "<|eom_id|>") eom_ = static_cast<Token>(i);
        }
        std::vector<Token> ids;
        for (const char* key : {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                "tokenizer.ggml.fim_sep_token_id"}) {
            if (const Token id = special_token(file, key, -1); id >= 0) ids.push_back(id);
        }
        bool has_return = false, has_call = false, has_calls = false, has_flush = false;
        for (std::size_t i = 0; i < vocab_.size(); ++i) {
            const std::string& piece = vocab_.pieces[i];
            has_return = has_return || piece == "<|return|>";
            has_call = has_call || piece == "<|call|>";
            has_calls = has_calls || piece == "<|calls|>";
            has_flush = has_flush || piece == "<|flush|>";
            if (is_end_marker(piece)) ids.push_back(static_cast<Token>(i));
        }
        for (const Token id : {eos_, eot_, eom_}) {
            if (id >= 0) ids.push_back(id);
        }
        // Vocabularies with <|return|> and <|call|> (or <|calls|> and <|flush|>)
        // use <|end|> between messages of one turn: it does not end generation there.
        if ((has_return && has_call) || (has_calls && has_flush)) {
            const std::optional<Token> end = find_piece("<|end|>");
            if (end) std::erase(ids, *end);
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        end_of_generation_ = std::move(ids);
        for (const Token id : end_of_generation_) mark_control(static_cast<std::size_t>(id));
        build_special_pieces();
    }

    std::optional<Token> find_piece(std::string_view piece) const {
        for (std::size_t i = 0; i < vocab_.size(); ++i)
            if (vocab_.pieces[i] == piece) return static_cast<Token>(i);
        return std::nullopt;
    }

    // A marker typed as text-producing becomes a control token: it leaves the
    // plain-text tables.
    void mark_control(std::size_t index) {
        const TokenKind kind = vocab_.kinds[index];
        if (kind == TokenKind::control || kind == TokenKind::byte) return;
        const std::string& piece = vocab_.pieces[index];
        if (const auto found = vocab_.text_tokens.find(piece);
            found != vocab_.text_tokens.end() && found->second == static_cast<Token>(index)) {
            vocab_.text_tokens.erase(found);
        }
        if (kind == TokenKind::user_defined && !piece.empty()) {
            auto& bucket = vocab_.user_defined_by_first_byte[static_cast<unsigned char>(piece.front())];
            std::erase(bucket, piece);
            vocab_.has_user_defined = std::any_of(vocab_.user_defined_by_first_byte.begin(),
                                                  vocab_.user_defined_by_first_byte.end(),
                                                  [](const auto& b) { return !b.empty(); });
        }
        vocab_.kinds[index] = TokenKind::control;
    }

    // The pieces SpecialTokens::parse matches: user-defined, control and
    // unknown tokens, bucketed by first byte, longest first.
    void build_special_pieces() {
        for (auto& bucket : special_by_first_byte_) bucket.clear();
        special_ids_.clear();
        has_special_pieces_ = false;
        for (std::size_t i = 0; i < vocab_.size(); ++i) {
            const TokenKind kind = vocab_.kinds[i];
            const std::string& piece = vocab_.pieces[i];
            if (piece.empty()) continue;
            if (kind != TokenKind::user_defined && kind != TokenKind::control && kind != TokenKind::unknown) continue;
            if (special_ids_.emplace(piece, static_cast<Token>(i)).second) {
                special_by_first_byte_[static_cast<unsigned char>(piece.front())].push_back(piece);
                has_special_pieces_ = true;
            }
        }
        for (auto& bucket : special_by_first_byte_) {
            std::stable_sort(bucket.begin(), bucket.end(),
                             [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
        }
    }

    // The token a matched piece stands for: a user-defined token's text
    // entry, else the special token of that spelling.
    std::optional<Token> special_token_of(std::string_view piece) const {
        if (const auto found = vocab_.find(piece)) return found;
        const auto found = special_ids_.find(piece);
        if (found == special_ids_.end()) return std::nullopt;
        return found->second;
    }

    void load_vocabulary(const gguf::File& file) {
        vocab_.pieces = file.get_string_array("tokenizer.ggml.tokens");
        const std::size_t size = vocab_.pieces.size();
        if (size == 0) fail(file, "empty tokenizer.ggml.tokens");
        if (size > static_cast<std::size_t>(std::numeric_limits<Token>::max())) {
            fail(file, "vocabulary of " + std::to_string(size) + " tokens does not fit 32-bit token ids");
        }
        if (file.has("tokenizer.ggml.scores")) {
            vocab_.scores = file.get_float_array("tokenizer.ggml.scores");
            if (vocab_.scores.size() != size) {
                fail(file, "tokenizer.ggml.scores has " + std::to_string(vocab_.scores.size()) + " entries for " +
                               std::to_string(size) + " tokens");
            }
        } else {
            vocab_.scores.assign(size, 0.0f);
        }
        vocab_.kinds.assign(size, TokenKind::normal);
        if (file.has("tokenizer.ggml.token_type")) {
            const std::vector<std::int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
            if (types.size() != size) {
                fail(file, "tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                               std::to_string(size) + " tokens");
            }
            for (std::size_t i = 0; i < size; ++i) {
                if (types[i] < 0 || types[i] > static_cast<std::int64_t>(TokenKind::byte)) {
                    fail(file, "invalid token type " + std::to_string(types[i]) + " of token " + std::to_string(i));
                }
                vocab_.kinds[i] = static_cast<TokenKind>(types[i]);
            }
        } else if (model_ == TokenizerModel::sentencepiece) {
            // Without types, recognise byte tokens by their spelling.
            for (std::size_t i = 0; i < size; ++i) {
                if (detail::parse_byte_piece(vocab_.pieces[i])) vocab_.kinds[i] = TokenKind::byte;
            }
        }

        vocab_.byte_tokens.fill(-1);
        texts_.resize(size);
        for (std::size_t i = 0; i < size; ++i) {
            const std::string& piece = vocab_.pieces[i];
            const auto token = static_cast<Token>(i);
            switch (vocab_.kinds[i]) {
                case TokenKind::byte: {
                    const auto byte = detail::parse_byte_piece(piece);
                    if (!byte) fail(file, "byte token " + std::to_string(i) + " is not spelled <0xXX>");
                    if (vocab_.byte_tokens[*byte] < 0) vocab_.byte_tokens[*byte] = token;
                    texts_[i] = std::string(1, static_cast<char>(*byte));
                    break;
                }
                case TokenKind::control:
                case TokenKind::unused:
                    break;  // decodes to nothing
                case TokenKind::unknown:
                    // llama.cpp prints U+2585 for an unknown SentencePiece token.
                    if (model_ == TokenizerModel::sentencepiece) texts_[i] = "\xE2\x96\x85";
                    break;
                case TokenKind::user_defined:
                    vocab_.text_tokens[piece] = token;
                    if (!piece.empty()) {
                        vocab_.user_defined_by_first_byte[static_cast<unsigned char>(piece.front())].push_back(piece);
                        vocab_.has_user_defined = true;
                    }
                    texts_[i] = piece;  // user-defined tokens are literal text
                    break;
                case TokenKind::undefined:
                case TokenKind::normal:
                    vocab_.text_tokens[piece] = token;
                    texts_[i] = normal_piece_text(piece);
                    break;
            }
        }
        for (auto& bucket : vocab_.user_defined_by_first_byte) {
            std::stable_sort(bucket.begin(), bucket.end(),
                             [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
        }
    }

    std::string normal_piece_text(std::string_view piece) const {
        if (model_ == TokenizerModel::byte_level_bpe) return detail::bpe_piece_bytes(piece);
        std::string text;
        text.reserve(piece.size());
        for (std::size_t position = 0; position < piece.size();) {
            if (piece.substr(position, detail::spm_space.size()) == detail::spm_space) {
                text += ' ';
                position += detail::spm_space.size();
            } else {
                text += piece[position++];
            }
        }
        return text;
    }

    void load_pre_tokenizer(const gguf::File& file) {
        const std::string pre = file.find_string("tokenizer.ggml.pre").value_or("default");
        if (pre == "default" || pre == "gpt2") {
            pre_tokenizer_ = detail::BpePreTokenizer::gpt2;
        } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
            pre_tokenizer_ = detail::BpePreTokenizer::llama3;
            ignore_merges_ = true;  // as Llama 3's tokenizer.json says
        } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
            pre_tokenizer_ = detail::BpePreTokenizer::qwen2;
        } else {
            fail(file, "tokenizer.ggml.pre '" + pre +
                           "' is not supported; expected one of: gpt2, default, llama-bpe (Llama 3), qwen2 (Qwen2, Qwen2.5)");
        }
    }

    void load_merges(const gguf::File& file) {
        const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
        merge_ranks_.reserve(merges.size());
        for (std::size_t rank = 0; rank < merges.size(); ++rank) {
            // "left right"; neither side contains a plain space in byte-level
            // vocabularies, but split at the first space after the first
            // character to be safe with a left side that starts with one.
            const std::string& rule = merges[rank];
            const std::size_t split = rule.find(' ', 1);
            if (split == std::string::npos || split + 1 >= rule.size()) {
                fail(file, "merge rule " + std::to_string(rank) + " '" + rule + "' is not 'left right'");
            }
            merge_ranks_.emplace(rule, rank);  // the first occurrence keeps the lowest rank
        }
    }

    TokenizerModel model_ = TokenizerModel::sentencepiece;
    detail::Vocabulary vocab_;
    std::vector<std::string> texts_;  // what each token decodes to
    detail::MergeRanks merge_ranks_;
    Token bos_ = -1;
    Token eos_ = -1;
    Token unknown_ = -1;
    Token eot_ = -1;
    Token eom_ = -1;
    std::vector<Token> end_of_generation_;  // sorted
    std::array<std::vector<std::string>, 256> special_by_first_byte_;
    detail::StringMap<Token> special_ids_;  // first id of each special spelling
    bool has_special_pieces_ = false;
    bool add_bos_ = false;
    bool add_eos_ = false;
    bool add_space_prefix_ = false;
    detail::BpePreTokenizer pre_tokenizer_ = detail::BpePreTokenizer::gpt2;
    bool ignore_merges_ = false;
};

}  // namespace specdec
