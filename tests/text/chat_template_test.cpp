// Chat templates: each family's prompt for one conversation against the
// text llama.cpp's llama_chat_apply_template produces for it (the expected
// strings of its chat-template test), detection from template sources and
// from a GGUF's tokenizer.chat_template, refusal of other templates, and a
// formatted prompt encoded with its special tokens parsed.
#include <string>
#include <vector>

#include "formats/format_test_support.hpp"
#include "specdec/core/error.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/text/chat_template.hpp"
#include "support/catch.hpp"
#ifdef SPECDEC_TEXT_WITH_LLAMA_CPP
#include "specdec/text/llama_cpp_chat.hpp"
#endif

using specdec::text::ChatFamily;
using specdec::text::ChatMessage;
using specdec::text::ChatTemplate;

namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},
    {"assistant", "Hi there"},                 {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},  {"user", "Another question"},
};

// Template sources (as GGUF files carry them, abridged to their markers) and
// the family each one is.
const std::vector<std::pair<std::string, ChatFamily>> kSources = {
    {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
     "'<|im_end|>' + '\\n'}}{% endfor %}",
     ChatFamily::chatml},
    {"{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
     "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
     ChatFamily::llama3},
    {"{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + "
     "message['content'] + ' [/INST]' }}",
     ChatFamily::mistral_v1},
    {"{%- if message['role'] == 'user' %}{%- if tools is not none %}{{- \"[AVAILABLE_TOOLS] [\" }}{%- endif %}"
     "{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}",
     ChatFamily::mistral_v3},
    {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
     ChatFamily::mistral_v3_tekken},
    {"{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' + message['content'] + "
     "'[/INST]' }}",
     ChatFamily::mistral_v7},
    {"mistral-v3", ChatFamily::mistral_v3},
};

std::string error_of(auto&& action) {
    try {
        action();
    } catch (const specdec::Error& error) {
        return error.what();
    }
    return "";
}

}  // namespace

TEST_CASE("Each chat family formats a conversation as llama.cpp does", "[text][chat]") {
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"chatml",
         "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
         "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
         "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
         "<|im_start|>assistant\n"},
        {"llama3",
         "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"mistral-v1",
         " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
         "assistant   </s> [INST] Another question [/INST]"},
        {"mistral-v3",
         "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
         "assistant</s>[INST] Another question[/INST]"},
        {"mistral-v3-tekken",
         "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
         "</s>[INST]Another question[/INST]"},
        {"mistral-v7",
         "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
         "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
        {"mistral-v7-tekken",
         "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there</s>[INST]Who are "
         "you[/INST]   I am an assistant   </s>[INST]Another question[/INST]"},
    };
    for (const auto& [name, text] : expected) {
        INFO(name);
        const ChatTemplate chat = ChatTemplate::from_name(name);
        CHECK(chat.name() == name);
        CHECK(chat.apply(kConversation) == text);
    }
    // Without the assistant's opening.
    CHECK(ChatTemplate::from_name("chatml").apply({{"user", "Hi"}}, false) == "<|im_start|>user\nHi<|im_end|>\n");
    CHECK(ChatTemplate::from_name("llama3").apply({{"user", " Hi\n"}}, false) ==
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST_CASE("Chat templates are recognised from their sources, and others refused", "[text][chat]") {
    const auto& sources = kSources;
    for (const auto& [source, family] : sources) {
        INFO(source);
        CHECK(ChatTemplate::detect(source).family() == family);
    }
    // Llama 2, Gemma and Phi-4 are not supported: refused by name, with the way out.
    const std::string llama2 = error_of([] {
        (void)ChatTemplate::detect("{{ '[INST] <<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' }}");
    });
    CHECK(llama2.find("Llama 2") != std::string::npos);
    CHECK(llama2.find("SpecialTokens::parse") != std::string::npos);
    const std::string gemma = error_of([] {
        (void)ChatTemplate::detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}");
    });
    CHECK(gemma.find("<start_of_turn>") != std::string::npos);
    CHECK_FALSE(error_of([] { (void)ChatTemplate::detect("<|im_start|>{{ x }}<|im_sep|>"); }).empty());
    CHECK(error_of([] { (void)ChatTemplate::from_name("llama2"); }).find("chatml, llama3") != std::string::npos);
}

TEST_CASE("A GGUF's tokenizer.chat_template selects the family; the prompt encodes with its markers",
          "[text][chat]") {
    specdec::gguf::Writer writer;
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (int byte = 0; byte < 256; ++byte) {
        std::string piece;
        specdec::detail::append_utf8(piece, specdec::detail::byte_to_unicode()[static_cast<unsigned char>(byte)]);
        tokens.push_back(piece);
        types.push_back(1);
    }
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.emplace_back(special);
        types.push_back(3);
    }
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string("tokenizer.ggml.pre", "qwen2");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
    writer.add_uint32("tokenizer.ggml.eos_token_id", 256);
    writer.add_string("tokenizer.chat_template",
                      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                      "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    const specdec::test::LoadedTokenizer loaded(writer);
    const ChatTemplate chat = ChatTemplate::from_gguf(loaded.file);
    CHECK(chat.family() == ChatFamily::chatml);
    const std::string prompt = chat.apply({{"user", "Hi"}});
    const std::vector<specdec::Token> ids =
        loaded.tokenizer.encode(prompt, false, false, specdec::SpecialTokens::parse);
    const std::vector<specdec::Token> expected = {257, 'u', 's', 'e', 'r', '\n', 'H', 'i', 258, '\n',
                                                  257, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
    CHECK(ids == expected);
    // <|im_end|> ends the assistant's turn.
    CHECK(loaded.tokenizer.is_end_of_generation(258));

    specdec::gguf::Writer bare;
    bare.add_string("general.architecture", "llama");
    const specdec::test::TempDir dir;
    const auto path = dir.file("bare.gguf");
    bare.write(path);
    const std::string missing = error_of([&] { (void)ChatTemplate::from_gguf(specdec::gguf::File::open(path)); });
    CHECK(missing.find("no tokenizer.chat_template") != std::string::npos);
}

#ifdef SPECDEC_TEXT_WITH_LLAMA_CPP
TEST_CASE("Every chat family formats as llama.cpp's llama_chat_apply_template, by name and from its source",
          "[text][chat][llama_cpp]") {
    for (const std::string_view name : {"chatml", "llama3", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
                                        "mistral-v7-tekken"}) {
        INFO(name);
        const ChatTemplate chat = ChatTemplate::from_name(name);
        for (const bool add_assistant : {true, false}) {
            CHECK(chat.apply(kConversation, add_assistant) ==
                  specdec::text::llama_cpp_apply_chat(std::string(name), kConversation, add_assistant));
        }
    }
    // From the template source: the family we detect formats as llama.cpp does with the source itself.
    for (const auto& [source, family] : kSources) {
        INFO(source);
        CHECK(ChatTemplate::detect(source).apply(kConversation) == specdec::text::llama_cpp_apply_chat(source, kConversation));
    }
    CHECK_THROWS_WITH(specdec::text::llama_cpp_apply_chat("{{ no known markers }}", kConversation),
                      Catch::Matchers::Contains("llama.cpp does not support the chat template"));
}
#endif
