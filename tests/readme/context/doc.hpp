// Context of documentation fragments: the names a snippet takes for granted,
// declared (never defined: snippets are compiled, not run). MyModel is the
// test suite's toy model, a CausalLM with the tree and last-row passes.
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <specdec/cpu.hpp>

#include "support/toy_models.hpp"

using MyModel = specdec::test::ToyLM;
using specdec::Token;

extern MyModel big, small, target_model;             // a target and a draft; any CausalLM
extern std::vector<Token> prompt, pending, ngram_tokens;
extern Token eos;
extern std::uint64_t seed;
extern std::size_t n;                               // committed tokens
extern specdec::SamplingOptions sampling;
extern specdec::CounterRng rng;
extern specdec::LogitsView target_rows, rows;        // an engine's target rows
extern specdec::TreeProposal tree;
extern specdec::Tokenizer tokenizer;
void commit(std::span<const Token> tokens);
