// 07: many requests at once. A BatchedDecoder keeps one cache slot per
// running request and verifies the drafts of all of them in one target pass
// per step; requests arrive and leave at any time (continuous batching).
// Each request has its own options, seed, stop tokens and stream, and its
// tokens are exactly those it would get alone: the greedy ones below are
// checked against plain autoregressive decoding of a one-slot model.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/models/synthetic.hpp>

int main() {
    // Four slots in each model: their KV caches are allocated here, once.
    specdec::SyntheticOptions synthetic{.size = "tiny", .sequences = 4};
    specdec::SyntheticPair pair = specdec::make_synthetic_pair(synthetic);
    std::printf("KV caches: %zu slots x %zu positions, %.1f MB for the target\n", pair.target.sequence_slots(),
                pair.target.context_length(), static_cast<double>(pair.target.kv_cache_bytes()) / 1e6);

    // AutoBatchLength (the default policy) chooses each request's draft length
    // for the batch's throughput, down to none when the pass is compute-bound.
    specdec::BatchedDecoder decoder(specdec::target(pair.target), specdec::draft(pair.draft));

    struct Request {
        std::vector<specdec::Token> prompt;
        specdec::DecodingOptions options;
    };
    std::vector<Request> requests;
    for (int r = 0; r < 10; ++r) {
        specdec::DecodingOptions options{.draft_tokens = 4, .seed = static_cast<std::uint64_t>(r), .max_new_tokens = 24};
        options.sampling.temperature = r % 2 == 0 ? 0.0 : 0.8;
        requests.push_back({{1, static_cast<specdec::Token>(10 + r), 42, static_cast<specdec::Token>(7 * r)}, options});
    }
    // submit() returns the request's id; results come back by id, in the order they end.
    std::map<specdec::RequestId, const Request*> by_id;
    // Six requests now (two wait for a slot), one streamed as it is decoded...
    std::string streamed;
    for (int r = 0; r < 6; ++r) {
        specdec::TokenStream stream;
        if (r == 0) stream = [&](specdec::Token t) { streamed += " " + std::to_string(t); return true; };
        by_id[decoder.submit(requests[r].prompt, requests[r].options, stream)] = &requests[r];
    }
    // ...a few steps, then four more arrive, and one of them, still waiting, is cancelled.
    for (int s = 0; s < 3; ++s) decoder.step();
    specdec::RequestId last = 0;
    for (int r = 6; r < 10; ++r) by_id[last = decoder.submit(requests[r].prompt, requests[r].options)] = &requests[r];
    decoder.cancel(last);

    bool all_identical = true;
    specdec::SyntheticOptions one_slot{.size = "tiny"};
    specdec::LlamaModel alone = specdec::make_synthetic_target(one_slot);
    for (const specdec::RequestResult& done : decoder.run()) {
        std::printf("request %2llu: %-9s %2zu tokens", static_cast<unsigned long long>(done.id),
                    std::string(specdec::to_string(done.status)).c_str(), done.generation.tokens.size());
        const Request& request = *by_id.at(done.id);
        if (done.status == specdec::RequestStatus::finished && request.options.sampling.greedy()) {
            const auto plain = specdec::AutoregressiveDecoder(alone, request.options).generate(request.prompt);
            const bool same = plain.tokens == done.generation.tokens;
            all_identical = all_identical && same;
            std::printf(", greedy: %s", same ? "identical to decoding it alone" : "DIFFERENT");
        }
        std::printf("\n");
    }
    std::printf("request 1 streamed:%s\n", streamed.c_str());
    return all_identical ? 0 : 1;
}
