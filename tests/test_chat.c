/* test_chat.c - chat formats (model/chat.h) and special-token encoding (mn_tok_encode_special).
 *
 * The detection and rendering cases are llama.cpp's tests/test-chat-template.cpp: the same six
 * messages, the models' real templates and the text llama.cpp's hand-written renderer gives for
 * them (its expected_output), so a difference from llama.cpp fails here. The formats it has no case
 * for are checked against the table in chat.h. Special tokens are checked on the real SmolLM2
 * vocabulary (skipped when it is not fetched), on the bundled target, and on a tiny in-memory
 * vocabulary whose control tokens overlap (longest match) and start with a non-ASCII byte.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "gbuf.h"
#include "testutil.h"
#include "util/alloc.h"

/* SmolLM2-135M-Instruct's tokenizer.chat_template, copied from its GGUF file (checked below). */
static const char SMOLLM2_TEMPLATE[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* llama.cpp's conversation: system, then user and assistant by turns, ending with the user. */
static const mn_chat_msg CONV[] = {
    {"system", "You are a helpful assistant", 27},
    {"user", "Hello", 5},
    {"assistant", "Hi there", 8},
    {"user", "Who are you", 11},
    {"assistant", "   I am an assistant   ", 23},
    {"user", "Another question", 16},
};
#define N_CONV (sizeof CONV / sizeof CONV[0])

typedef struct chat_case {
    mn_chat_format f;
    const char *name;  /* mn_chat_format_name(f), llama.cpp's name */
    const char *tmpl;  /* a template of the format (a real one where llama.cpp's test has it) */
    const char *want;  /* CONV rendered */
} chat_case;

static const chat_case CASES[] = {
    /* ---- llama.cpp's cases: the template and llama.cpp's rendering, verbatim ---- */
    {MN_CHAT_CHATML, "chatml",  /* "teknium/OpenHermes-2.5-Mistral-7B" */
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
        "endif %}",
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
        "<|im_start|>assistant\n"},
    {MN_CHAT_LLAMA2, "llama2",  /* "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)" */
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
        "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif "
        "%}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
        "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
        "user and assistant roles are supported!') }}{% endif %}{% endfor %}",
        "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
        "assistant   </s>[INST] Another question [/INST]"},
    {MN_CHAT_LLAMA2_SYS_BOS, "llama2-sys-bos",  /* "TheBloke/FusionNet_34Bx2_MoE-AWQ" */
        "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > "
        "1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- "
        "messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n"
        "{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif "
        "messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% "
        "endif %}\n{% endfor %}",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you "
        "[/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {MN_CHAT_LLAMA2_SYS_STRIP, "llama2-sys-strip",  /* "bofenghuang/vigogne-2-70b-chat" */
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
        "system_message = messages[0]['content'] %}{% elif true == true and not '<<SYS>>' in "
        "messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'Vous êtes Vigogne, "
        "un assistant IA créé par Zaion Lab. Vous suivez extrêmement bien les instructions. Aidez autant que "
        "vous le pouvez.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
        "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% "
        "if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
        "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif "
        "%}{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
        "message['role'] == 'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif "
        "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
        "[/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {MN_CHAT_GEMMA, "gemma",  /* "google/gemma-7b-it" */
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% "
        "for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% "
        "if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] "
        "%}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% "
        "endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
        "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
        "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {MN_CHAT_LLAMA3, "llama3",  /* "Llama-3" */
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content "
        "}}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi "
        "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
        "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
        "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {MN_CHAT_PHI3, "phi3",  /* "Phi-3-mini" */
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
        "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == "
        "'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
        "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
        "question<|end|>\n<|assistant|>\n"},
    {MN_CHAT_GLMEDGE, "glmedge",  /* "GLMEdge" */
        "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}{% elif "
        "item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' "
        "%}<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>",
        "<|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\nWho are "
        "you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>"},
    {MN_CHAT_MISTRAL_V1, "mistral-v1",  /* "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)" */
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    "
        "{%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- "
        "endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == "
        "'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, "
        "conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if "
        "message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            "
        "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n  "
        "          {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif "
        "message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n"
        "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an "
        "initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n",
        " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
        "assistant   </s> [INST] Another question [/INST]"},
    {MN_CHAT_MISTRAL_V7, "mistral-v7",  /* "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)" */
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
        "message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
        "message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles "
        "are supported!') }}{% endif %}{% endfor %}",
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who "
        "are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {MN_CHAT_PHI4, "phi4",  /* "phi-4" */
        "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + "
        "message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' "
        "+ message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == "
        "'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
        "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end"
        "|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are "
        "you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   "
        "<|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>"},
    /* ---- formats llama.cpp's test has no case for: templates cut to their markers, rendering from
     * the table in chat.h (the same code path in llama.cpp) ---- */
    {MN_CHAT_MISTRAL_V3, "mistral-v3",  /* Mistral-Large-Instruct-2407, the lines that matter */
        "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n"
        "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
        "            {{- \"[AVAILABLE_TOOLS] [\" }}\n        {%- endif %}\n"
        "        {%- if loop.last and system_message is defined %}\n"
        "            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
        "        {%- else %}\n            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n"
        "        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n"
        "        {{- \" \" + message[\"content\"]|trim + eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
        "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
        "assistant</s>[INST] Another question[/INST]"},
    {MN_CHAT_MISTRAL_V3_TEKKEN, "mistral-v3-tekken",  /* Mistral-Nemo-Instruct-2407, the lines that matter */
        "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n"
        "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
        "            {{- \"[AVAILABLE_TOOLS][\" }}\n        {%- endif %}\n"
        "        {%- if loop.last and system_message is defined %}\n"
        "            {{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
        "        {%- else %}\n            {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n"
        "        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n"
        "        {{- message[\"content\"] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
        "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an "
        "assistant   </s>[INST]Another question[/INST]"},
    {MN_CHAT_LLAMA2_SYS, "llama2-sys",
        "{% if message['role'] == 'system' %}{{ '[INST] <<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}"
        "{% elif message['role'] == 'user' %}{{ message['content'] + ' [/INST]' }}{% endif %}",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
        "[/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {MN_CHAT_ZEPHYR, "zephyr",
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + "
        "'<|endoftext|>\\n' }}{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
        "'<|endoftext|>\\n' }}{% endif %}{% endfor %}",
        "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\n"
        "Hi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
        "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {MN_CHAT_FALCON3, "falcon3",
        "{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif "
        "message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + '</s>\\n' }}{% endif %}",
        "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there\n<|user|>\n"
        "Who are you\n<|assistant|>\n   I am an assistant   \n<|user|>\nAnother question\n<|assistant|>\n"},
    {MN_CHAT_PLAIN, "plain", "{{ messages }}",
        "You are a helpful assistant\n\nUser: Hello\nAssistant: Hi there\nUser: Who are you\n"
        "Assistant:    I am an assistant   \nUser: Another question\nAssistant:"},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* CONV (or msgs) rendered in f, checked for a NUL-terminated text of the length reported. */
static char *render(mn_chat_format f, const mn_chat_msg *msgs, size_t n, size_t *len)
{
    char *out = NULL;
    mn_err err = {{0}};
    cr_assert_eq(mn_chat_render(f, msgs, n, &out, len, &err), MN_OK, "%s: %s", mn_chat_format_name(f), err.msg);
    cr_assert_not_null(out);
    cr_assert_eq(out[*len], 0, "NUL-terminated");
    return out;
}

/* ---- detection --------------------------------------------------------------------------------- */

Test(chat_detect, smollm2_template_is_chatml)
{
    cr_assert_eq(mn_chat_detect(SMOLLM2_TEMPLATE, strlen(SMOLLM2_TEMPLATE)), MN_CHAT_CHATML);
    /* only the first len bytes count: the first marker is bytes 88..99 */
    cr_assert_eq(mn_chat_detect(SMOLLM2_TEMPLATE, 99), MN_CHAT_PLAIN);
    cr_assert_eq(mn_chat_detect(SMOLLM2_TEMPLATE, 100), MN_CHAT_CHATML);
}

Test(chat_detect, every_case_template_gives_its_format_and_name)
{
    for (size_t i = 0; i < N_CASES; i++) {
        mn_chat_format f = mn_chat_detect(CASES[i].tmpl, strlen(CASES[i].tmpl));
        cr_assert_eq(f, CASES[i].f, "%s: detected as %s", CASES[i].name, mn_chat_format_name(f));
        cr_assert_str_eq(mn_chat_format_name(f), CASES[i].name);
    }
}

Test(chat_detect, llama_cpp_order_decides_between_shared_markers)
{
    /* Phi-3 and GLMEdge templates also write "<|user|>" (and Phi-3 "<|endoftext|>" may be there):
     * they are tested before Zephyr */
    const char *phi3 = "{{ '<|user|>\\n' + content + '<|end|>\\n<|assistant|>\\n' }}<|endoftext|>";
    cr_assert_eq(mn_chat_detect(phi3, strlen(phi3)), MN_CHAT_PHI3);
    const char *glm = "<|user|>\\n{{ content }}<|assistant|><|endoftext|>";
    cr_assert_eq(mn_chat_detect(glm, strlen(glm)), MN_CHAT_GLMEDGE);
    /* ChatML first: a ChatML template that mentions [INST] or <start_of_turn> is still ChatML */
    const char *mixed = "<|im_start|>[INST]<start_of_turn><|start_header_id|><|end_header_id|>";
    cr_assert_eq(mn_chat_detect(mixed, strlen(mixed)), MN_CHAT_CHATML);
    /* formats we do not render are plain, even with markers of ones we do: SmolVLM's (ChatML's
     * <|im_start|> beside its <end_of_utterance>), ChatGLM-4's (GLM-Edge's beside [gMASK]<sop>) */
    const char *smolvlm = "<|im_start|>{{ message['role'] }}: {{ content }}<end_of_utterance>\\n";
    cr_assert_eq(mn_chat_detect(smolvlm, strlen(smolvlm)), MN_CHAT_PLAIN);
    const char *chatglm4 = "[gMASK]<sop>{% for m in messages %}<|user|>\\n{{ m.content }}<|assistant|>";
    cr_assert_eq(mn_chat_detect(chatglm4, strlen(chatglm4)), MN_CHAT_PLAIN);
    /* one Llama-3 marker alone is not enough */
    cr_assert_eq(mn_chat_detect("<|start_header_id|>", 19), MN_CHAT_PLAIN);
    /* a text starting with "mistral" is the [INST] family, plain Llama-2 without other markers */
    cr_assert_eq(mn_chat_detect("mistral-whatever", 16), MN_CHAT_LLAMA2);
}

Test(chat_detect, names_are_formats)
{
    for (int f = 0; f < MN_CHAT_N_FORMATS; f++) {
        const char *name = mn_chat_format_name((mn_chat_format)f);
        cr_assert_eq(mn_chat_detect(name, strlen(name)), (mn_chat_format)f, "%s", name);
    }
    cr_assert_eq(mn_chat_detect("chatmlX", 6), MN_CHAT_CHATML, "only len bytes are the name");
    cr_assert_eq(mn_chat_detect("chatml ", 7), MN_CHAT_PLAIN);
    cr_assert_str_eq(mn_chat_format_name((mn_chat_format)99), "plain");
    cr_assert_str_eq(mn_chat_format_name((mn_chat_format)-1), "plain");
}

Test(chat_detect, unknown_templates_and_garbage_are_plain)
{
    cr_assert_eq(mn_chat_detect(NULL, 0), MN_CHAT_PLAIN);
    cr_assert_eq(mn_chat_detect(NULL, 100), MN_CHAT_PLAIN);
    cr_assert_eq(mn_chat_detect("", 0), MN_CHAT_PLAIN);
    cr_assert_eq(mn_chat_detect("{{ messages }}", 14), MN_CHAT_PLAIN);
    /* formats llama.cpp knows and minions does not render */
    const char *command_r = "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}";
    cr_assert_eq(mn_chat_detect(command_r, strlen(command_r)), MN_CHAT_PLAIN);
    const char *vicuna = "{{-'USER: ' + message['content'] + '\\n'-}}{{-'ASSISTANT: ' + message['content'] }}";
    cr_assert_eq(mn_chat_detect(vicuna, strlen(vicuna)), MN_CHAT_PLAIN);
    /* bytes, NULs included: NUL is data, not the end of the text */
    char junk[4096];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof junk; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = (char)(x % 7 == 0 ? 0 : x >> 24);
    }
    cr_assert_eq(mn_chat_detect(junk, sizeof junk), MN_CHAT_PLAIN);
    static const char nul_first[] = "\0\0{{ '<start_of_turn>' }}";
    cr_assert_eq(mn_chat_detect(nul_first, sizeof nul_first - 1), MN_CHAT_GEMMA);
}

/* ---- rendering --------------------------------------------------------------------------------- */

Test(chat_render, every_format_renders_the_conversation_exactly)
{
    bool seen[MN_CHAT_N_FORMATS] = {0};
    for (size_t i = 0; i < N_CASES; i++) {
        size_t len;
        char *out = render(CASES[i].f, CONV, N_CONV, &len);
        cr_assert_str_eq(out, CASES[i].want, "%s", CASES[i].name);
        cr_assert_eq(len, strlen(CASES[i].want));
        mn_free(out);
        seen[CASES[i].f] = true;
    }
    for (int f = 0; f < MN_CHAT_N_FORMATS; f++)
        cr_assert(seen[f], "no rendering case for %s", mn_chat_format_name((mn_chat_format)f));
}

Test(chat_render, one_user_message)
{
    const mn_chat_msg hi = {"user", "Hi", 2};
    static const struct {
        mn_chat_format f;
        const char *want;
    } cases[] = {
        {MN_CHAT_CHATML, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
        {MN_CHAT_LLAMA3, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {MN_CHAT_GEMMA, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"},
        {MN_CHAT_ZEPHYR, "<|user|>\nHi<|endoftext|>\n<|assistant|>\n"},
        {MN_CHAT_LLAMA2, "[INST] Hi [/INST]"},
        {MN_CHAT_MISTRAL_V7, "[INST] Hi[/INST]"},
        {MN_CHAT_PLAIN, "User: Hi\nAssistant:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        char *out = render(cases[i].f, &hi, 1, &len);
        cr_assert_str_eq(out, cases[i].want, "%s", mn_chat_format_name(cases[i].f));
        mn_free(out);
    }
}

Test(chat_render, gemma_folds_the_system_message_into_the_next_user_turn)
{
    /* after a model turn, and trimmed; a system text that trims to nothing adds nothing */
    const mn_chat_msg a[] = {{"system", " Be brief. ", 11}, {"assistant", "Hello.", 6}, {"user", " Why? ", 6}};
    size_t len;
    char *out = render(MN_CHAT_GEMMA, a, 3, &len);
    cr_assert_str_eq(out, "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nBe brief.\n\nWhy?"
                          "<end_of_turn>\n<start_of_turn>model\n");
    mn_free(out);
    const mn_chat_msg b[] = {{"user", "a", 1}, {"system", " \n\t", 3}, {"user", "b", 1}};
    out = render(MN_CHAT_GEMMA, b, 3, &len);
    cr_assert_str_eq(out, "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>user\nb<end_of_turn>\n"
                          "<start_of_turn>model\n");
    mn_free(out);
    /* several system messages: llama.cpp adds their trimmed texts together (no separator) */
    const mn_chat_msg c[] = {{"system", "You are terse. ", 15}, {"system", " Answer in French.", 18}, {"user", "Hi", 2}};
    out = render(MN_CHAT_GEMMA, c, 3, &len);
    cr_assert_str_eq(out, "<start_of_turn>user\nYou are terse.Answer in French.\n\nHi<end_of_turn>\n"
                          "<start_of_turn>model\n");
    mn_free(out);
}

Test(chat_render, content_is_its_length_nul_bytes_included)
{
    static const char content[] = "a\0b<junk after the length>";
    const mn_chat_msg m[] = {{"user", content, 3}, {"assistant", NULL, 0}};
    static const char want[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
                               "<|im_start|>assistant\n";
    size_t len;
    char *out = render(MN_CHAT_CHATML, m, 2, &len);
    cr_assert_eq(len, sizeof want - 1);
    cr_assert_arr_eq(out, want, len);
    mn_free(out);
    /* trimming stops at a NUL (not whitespace) and never reads past the length: " \0 x" is "\0 x" */
    const mn_chat_msg t[] = {{"user", " \0 x  ", 4}};
    out = render(MN_CHAT_LLAMA3, t, 1, &len);
    static const char want3[] = "<|start_header_id|>user<|end_header_id|>\n\n\0 x<|eot_id|>"
                                "<|start_header_id|>assistant<|end_header_id|>\n\n";
    cr_assert_eq(len, sizeof want3 - 1);
    cr_assert_arr_eq(out, want3, len);
    mn_free(out);
}

Test(chat_render, a_role_outside_system_user_assistant_is_refused_by_name)
{
    char *out = (char *)"untouched";
    size_t len = 12345;
    mn_err err = {{0}};
    const mn_chat_msg bad[] = {{"user", "a", 1}, {"tool", "b", 1}};
    for (int f = 0; f < MN_CHAT_N_FORMATS; f++) {
        cr_assert_eq(mn_chat_render((mn_chat_format)f, bad, 2, &out, &len, &err), MN_INVALID);
        cr_assert(strstr(err.msg, "messages[1]") && strstr(err.msg, "'tool'"), "%s", err.msg);
    }
    const mn_chat_msg upper[] = {{"User", "a", 1}};
    cr_assert_eq(mn_chat_render(MN_CHAT_CHATML, upper, 1, &out, &len, &err), MN_INVALID, "roles are exact");
    cr_assert(strstr(err.msg, "messages[0]") && strstr(err.msg, "'User'"), "%s", err.msg);
    const mn_chat_msg none[] = {{"user", "a", 1}, {"assistant", "b", 1}, {NULL, "c", 1}};
    cr_assert_eq(mn_chat_render(MN_CHAT_CHATML, none, 3, &out, &len, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "messages[2]"), "%s", err.msg);
    cr_assert_eq(mn_chat_render(MN_CHAT_CHATML, CONV, 0, &out, &len, &err), MN_INVALID, "no messages");
    cr_assert_str_eq(out, "untouched");
    cr_assert_eq(len, 12345);
}

Test(chat_render, a_format_out_of_range_renders_plain)
{
    size_t a_len, b_len;
    char *a = render((mn_chat_format)99, CONV, N_CONV, &a_len), *b = render(MN_CHAT_PLAIN, CONV, N_CONV, &b_len);
    cr_assert_str_eq(a, b);
    mn_free(a);
    mn_free(b);
}

Test(chat_render, end_of_turn_follows_the_assistant_content)
{
    cr_assert_str_eq(mn_chat_end_of_turn(MN_CHAT_CHATML), "<|im_end|>");
    cr_assert_str_eq(mn_chat_end_of_turn(MN_CHAT_LLAMA3), "<|eot_id|>");
    cr_assert_str_eq(mn_chat_end_of_turn(MN_CHAT_GEMMA), "<end_of_turn>");
    cr_assert_null(mn_chat_end_of_turn(MN_CHAT_PLAIN));
    cr_assert_null(mn_chat_end_of_turn(MN_CHAT_FALCON3));
    cr_assert_null(mn_chat_end_of_turn((mn_chat_format)99));
    for (size_t i = 0; i < N_CASES; i++) {
        const char *eot = mn_chat_end_of_turn(CASES[i].f);
        if (!eot)
            continue;
        char want[64];
        snprintf(want, sizeof want, "Hi there%s", eot);
        cr_assert(strstr(CASES[i].want, want), "%s: '%s' does not end the assistant's turn", CASES[i].name, eot);
    }
}

/* ---- formats of model files -------------------------------------------------------------------- */

/* The fetched SmolLM2 GGUF, or NULL (the file alone: no fixtures needed). */
static const char *smollm2_gguf(void)
{
    const char *path = path_in("MINIONS_MODELS_DIR", "models/cache", "SmolLM2-135M-Instruct.Q4_1.gguf");
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fclose(f);
    return path;
}

static gguf_file *open_gguf(const char *path)
{
    gguf_file *f = NULL;
    mn_err err = {{0}};
    cr_assert_eq(gguf_open_file(path, &f, &err), MN_OK, "%s: %s", path, err.msg);
    return f;
}

static mn_tokenizer *load_tok(const gguf_file *f)
{
    const gguf_kv *toks;
    mn_err err = {{0}};
    cr_assert_eq(gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_STRING, &toks, &err), MN_OK, "%s", err.msg);
    mn_tokenizer *t = NULL;
    cr_assert_eq(mn_tok_load(f, (uint32_t)toks->arr_n, &t, &err), MN_OK, "%s", err.msg);
    return t;
}

Test(chat_file, smollm2_is_chatml_and_its_template_is_the_copy_above)
{
    const char *path = smollm2_gguf();
    if (!path)
        cr_skip_test("SmolLM2 was not fetched (MINIONS_MODELS_DIR): skipped");
    gguf_file *f = open_gguf(path);
    cr_assert_eq(mn_chat_format_of(f), MN_CHAT_CHATML);
    gguf_str s;
    cr_assert_eq(gguf_get_string(f, "tokenizer.chat_template", &s, NULL), MN_OK);
    cr_assert_eq(s.len, strlen(SMOLLM2_TEMPLATE));
    cr_assert_arr_eq(s.ptr, SMOLLM2_TEMPLATE, s.len);
    gguf_close(f);
}

Test(chat_file, bundled_target_has_no_template)
{
    gguf_file *f = open_gguf(source_file("models/target.gguf"));
    cr_assert_null(gguf_find_kv(f, "tokenizer.chat_template"));
    cr_assert_eq(mn_chat_format_of(f), MN_CHAT_PLAIN);
    gguf_close(f);
}

/* ---- a tiny in-memory vocabulary ---------------------------------------------------------------- */

/* Controls of the tiny vocabulary: three nested ones (longest must win), one elsewhere, one whose
 * first byte is not ASCII, one empty (never matches). */
static const char *const TINY_CTRL[] = {"<|x|>", "<|x|>y", "[A]", "<|x", "\xe2\x96\x81" "ctl", ""};
enum { TINY_N_CTRL = 6, TINY_LT_BAR = 256 + TINY_N_CTRL, TINY_N_VOCAB = TINY_LT_BAR + 1 };

/* A GGUF holding only a tokenizer: ids 0..255 the bytes (as GPT-2 byte-level strings), then the
 * controls 256.., then "<|" with the merge "< |". BOS is control 256 and asked for. template: the
 * tokenizer.chat_template key (none when NULL); template_u32: that key as a number instead. */
static gguf_file *tiny_gguf(gbuf *b, const char *tmpl, bool template_u32)
{
    uint64_t n_keys = 7 + (tmpl || template_u32);
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, 0);
    put_u64(b, n_keys);
    put_key(b, "tokenizer.ggml.model", GGUF_STRING);
    put_str(b, "gpt2", 4);
    put_key(b, "tokenizer.ggml.pre", GGUF_STRING);
    put_str(b, "gpt-2", 5);
    put_key(b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    put_u32(b, GGUF_STRING);
    put_u64(b, TINY_N_VOCAB);
    put_byte_tokens(b);
    for (int i = 0; i < TINY_N_CTRL; i++)
        put_str(b, TINY_CTRL[i], strlen(TINY_CTRL[i]));
    put_str(b, "<|", 2);
    put_key(b, "tokenizer.ggml.token_type", GGUF_ARRAY);
    put_u32(b, GGUF_I32);
    put_u64(b, TINY_N_VOCAB);
    for (uint32_t i = 0; i < TINY_N_VOCAB; i++)
        put_u32(b, i >= 256 && i < TINY_LT_BAR ? 3 : 1);
    put_key(b, "tokenizer.ggml.merges", GGUF_ARRAY);
    put_u32(b, GGUF_STRING);
    put_u64(b, 1);
    put_str(b, "< |", 3);
    put_key(b, "tokenizer.ggml.bos_token_id", GGUF_U32);
    put_u32(b, 256);
    put_key(b, "tokenizer.ggml.add_bos_token", GGUF_BOOL);
    put(b, "\1", 1);
    if (tmpl) {
        put_key(b, "tokenizer.chat_template", GGUF_STRING);
        put_str(b, tmpl, strlen(tmpl));
    } else if (template_u32) {
        put_key(b, "tokenizer.chat_template", GGUF_U32);
        put_u32(b, 7);
    }
    gguf_file *f = NULL;
    mn_err err = {{0}};
    cr_assert_eq(gguf_open_mem(b->p, b->n, &f, &err), MN_OK, "%s", err.msg);
    return f;
}

Test(chat_file, format_of_reads_the_template_key)
{
    static const struct {
        const char *tmpl;
        bool u32;
        mn_chat_format want;
    } cases[] = {
        {"{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' }}", false, MN_CHAT_LLAMA3},
        {"gemma", false, MN_CHAT_GEMMA},
        {"{{ nothing we know }}", false, MN_CHAT_PLAIN},
        {NULL, false, MN_CHAT_PLAIN},
        {NULL, true, MN_CHAT_PLAIN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gbuf b = {0};
        gguf_file *f = tiny_gguf(&b, cases[i].tmpl, cases[i].u32);
        cr_assert_eq(mn_chat_format_of(f), cases[i].want, "case %zu", i);
        gguf_close(f);
        free(b.p);
    }
}

static void expect_special(const mn_tokenizer *t, const char *text, bool add_bos, const int32_t *want, size_t n)
{
    mn_tokens out = {0};
    cr_assert_eq(mn_tok_encode_special(t, text, strlen(text), add_bos, &out), MN_OK);
    cr_assert_eq(out.n, n, "'%s': %zu tokens, expected %zu", text, out.n, n);
    if (n) /* memcmp(NULL, NULL, 0) is undefined */
        cr_assert_arr_eq(out.ids, want, n * sizeof *want, "'%s'", text);
    mn_tokens_free(&out);
}

Test(chat_special, tiny_vocabulary_longest_match_and_pieces)
{
    gbuf b = {0};
    gguf_file *f = tiny_gguf(&b, NULL, false);
    mn_tokenizer *t = load_tok(f);
    gguf_close(f);
    free(b.p);
    /* a, "<|x|>y", b, "<|x|>", "[A]", "<|x", ' ', "▁ctl", then "<|" left as text (one merged piece) */
    static const int32_t want[] = {'a', 257, 'b', 256, 258, 259, ' ', 260, TINY_LT_BAR};
    expect_special(t, "a<|x|>yb<|x|>[A]<|x \xe2\x96\x81" "ctl<|", false, want, 9);
    /* BOS once, first; never between pieces */
    static const int32_t bos[] = {256, 256, 'z', 256};
    expect_special(t, "<|x|>z<|x|>", true, bos, 4);
    /* the plain encoder never makes them */
    mn_tokens plain = {0};
    const char *s = "a<|x|>yb<|x|>[A]<|x \xe2\x96\x81" "ctl<|";
    cr_assert_eq(mn_tok_encode(t, s, strlen(s), false, &plain), MN_OK);
    for (size_t i = 0; i < plain.n; i++)
        cr_assert(!mn_tok_is_control(t, plain.ids[i]), "token %zu is control %d", i, plain.ids[i]);
    mn_tokens_free(&plain);
    /* a control at the very end, a lone first byte, an empty text */
    static const int32_t end[] = {'q', 258};
    expect_special(t, "q[A]", false, end, 2);
    static const int32_t lone[] = {'['};
    expect_special(t, "[", false, lone, 1);
    expect_special(t, "", false, NULL, 0);
    /* a control by its exact text only */
    cr_assert_eq(mn_tok_control(t, "<|x|>", 5), 256);
    cr_assert_eq(mn_tok_control(t, "<|x|>y", 6), 257);
    cr_assert_eq(mn_tok_control(t, "<|x", 3), 259);
    cr_assert_eq(mn_tok_control(t, "<|x|>yz", 7), -1);
    cr_assert_eq(mn_tok_control(t, "<|", 2), -1, "an ordinary token is no control");
    cr_assert_eq(mn_tok_control(t, "", 0), -1, "the empty control never matches");
    mn_tok_free(t);
}

/* mn_tok_encode_special against a reference built here: controls found by trying every control
 * text at every position (longest wins), the stretches between encoded with mn_tok_encode. */
static void reference_special(const mn_tokenizer *t, const gguf_str *ctrl, const int32_t *ctrl_id, size_t n_ctrl,
                              const char *text, size_t len, mn_tokens *out)
{
    size_t plain = 0, i = 0;
    while (i < len) {
        int best = -1;
        for (size_t k = 0; k < n_ctrl; k++)
            if (ctrl[k].len && ctrl[k].len <= len - i && !memcmp(text + i, ctrl[k].ptr, ctrl[k].len) &&
                (best < 0 || ctrl[k].len > ctrl[best].len))
                best = (int)k;
        if (best < 0) {
            i++;
            continue;
        }
        cr_assert_eq(mn_tok_encode(t, text + plain, i - plain, false, out), MN_OK);
        cr_assert_eq(mn_tokens_push(out, ctrl_id[best]), MN_OK);
        i += ctrl[best].len;
        plain = i;
    }
    cr_assert_eq(mn_tok_encode(t, text + plain, len - plain, false, out), MN_OK);
}

Test(chat_special, smollm2_markers_are_its_control_tokens)
{
    const char *path = smollm2_gguf();
    if (!path)
        cr_skip_test("SmolLM2 was not fetched (MINIONS_MODELS_DIR): skipped");
    gguf_file *f = open_gguf(path);
    mn_tokenizer *t = load_tok(f);
    const int32_t im_start = 1, im_end = 2;
    cr_assert(mn_tok_is_control(t, im_start) && mn_tok_is_control(t, im_end));
    cr_assert_eq(mn_tok_eos(t), im_end, "SmolLM2's <|im_end|> is its end of text");

    const char *text = "<|im_start|>user\nHi<|im_end|>\n";
    mn_tokens sp = {0}, part = {0}, nl = {0}, plain = {0};
    cr_assert_eq(mn_tok_encode_special(t, text, strlen(text), true, &sp), MN_OK);
    cr_assert_eq(mn_tok_encode(t, "user\nHi", 7, false, &part), MN_OK);
    cr_assert_eq(mn_tok_encode(t, "\n", 1, false, &nl), MN_OK);
    cr_assert_eq(sp.n, 1 + part.n + 1 + nl.n);
    cr_assert_eq(sp.ids[0], im_start, "no BOS: SmolLM2 does not ask for one");
    cr_assert_arr_eq(sp.ids + 1, part.ids, part.n * sizeof *part.ids);
    cr_assert_eq(sp.ids[1 + part.n], im_end);
    cr_assert_arr_eq(sp.ids + 2 + part.n, nl.ids, nl.n * sizeof *nl.ids);
    /* the plain encoder spells the same text with ordinary tokens */
    cr_assert_eq(mn_tok_encode(t, text, strlen(text), false, &plain), MN_OK);
    cr_assert_gt(plain.n, sp.n);
    for (size_t i = 0; i < plain.n; i++)
        cr_assert(!mn_tok_is_control(t, plain.ids[i]), "plain token %zu is control %d", i, plain.ids[i]);
    mn_tokens_free(&sp), mn_tokens_free(&part), mn_tokens_free(&nl), mn_tokens_free(&plain);

    /* without markers: what mn_tok_encode gives */
    const char *none = "Hello there, <|im_star and <im_end|> are not markers. 12345 \xff\xfe";
    mn_tokens a = {0}, b = {0};
    cr_assert_eq(mn_tok_encode_special(t, none, strlen(none), false, &a), MN_OK);
    cr_assert_eq(mn_tok_encode(t, none, strlen(none), false, &b), MN_OK);
    cr_assert_eq(a.n, b.n);
    cr_assert_arr_eq(a.ids, b.ids, a.n * sizeof *a.ids);
    mn_tokens_free(&a), mn_tokens_free(&b);

    /* the rendered conversation: one <|im_start|> per message and for the open turn, one <|im_end|>
     * per message, the rest ordinary */
    size_t len;
    char *prompt = render(MN_CHAT_CHATML, CONV, N_CONV, &len);
    mn_tokens c = {0};
    cr_assert_eq(mn_tok_encode_special(t, prompt, len, false, &c), MN_OK);
    size_t starts = 0, ends = 0, other_ctrl = 0;
    for (size_t i = 0; i < c.n; i++) {
        starts += c.ids[i] == im_start;
        ends += c.ids[i] == im_end;
        other_ctrl += mn_tok_is_control(t, c.ids[i]) && c.ids[i] != im_start && c.ids[i] != im_end;
    }
    cr_assert_eq(starts, N_CONV + 1);
    cr_assert_eq(ends, N_CONV);
    cr_assert_eq(other_ctrl, 0);
    cr_assert_eq(c.ids[c.n - 1], 198, "the prompt ends with the newline after 'assistant'"); /* 'Ċ' */
    mn_tokens_free(&c);
    mn_free(prompt);

    /* random texts made of markers, near misses and text, against the reference */
    const gguf_kv *toks, *types;
    cr_assert_eq(gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_STRING, &toks, NULL), MN_OK);
    cr_assert_eq(gguf_get_array(f, "tokenizer.ggml.token_type", GGUF_I32, &types, NULL), MN_OK);
    gguf_str *strs = malloc(toks->arr_n * sizeof *strs), ctrl[64];
    int32_t ctrl_id[64];
    size_t n_ctrl = 0;
    gguf_array_strings(toks, strs);
    for (uint32_t i = 0; i < toks->arr_n; i++) {
        int32_t ty;
        memcpy(&ty, types->arr_data + 4 * i, 4);
        if (ty == 3 && n_ctrl < 64)
            ctrl[n_ctrl] = strs[i], ctrl_id[n_ctrl++] = (int32_t)i;
    }
    cr_assert_eq(n_ctrl, 17, "SmolLM2 has 17 control tokens");
    free(strs);
    static const char *const bits[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<reponame>",
                                       "<", "|", "<|", "im_", "start|>", " ", "\n", "Hi", "12", "é", "<|im_end",
                                       "<file_sep>", "<filename>", ">"};
    uint64_t x = 2463534242ull;
    char buf[512];
    for (int iter = 0; iter < 500; iter++) {
        size_t n = 0;
        for (int k = 0; k < 1 + iter % 24; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const char *p = bits[x % (sizeof bits / sizeof bits[0])];
            memcpy(buf + n, p, strlen(p));
            n += strlen(p);
        }
        mn_tokens got = {0}, want = {0};
        cr_assert_eq(mn_tok_encode_special(t, buf, n, false, &got), MN_OK);
        reference_special(t, ctrl, ctrl_id, n_ctrl, buf, n, &want);
        cr_assert_eq(got.n, want.n, "'%.*s'", (int)n, buf);
        cr_assert_arr_eq(got.ids, want.ids, got.n * sizeof *got.ids, "'%.*s'", (int)n, buf);
        mn_tokens_free(&got), mn_tokens_free(&want);
    }
    mn_tok_free(t);
    gguf_close(f);
}

/* 100 KB prompts: full of markers, full of marker look-alikes, full of their first byte. */
Test(chat_special, a_100kb_prompt_of_markers_and_lookalikes, .timeout = 60)
{
    const char *path = smollm2_gguf();
    if (!path)
        cr_skip_test("SmolLM2 was not fetched (MINIONS_MODELS_DIR): skipped");
    gguf_file *f = open_gguf(path);
    mn_tokenizer *t = load_tok(f);
    static const char *const unit[] = {"<|im_start|>user\nHi<|im_end|>\n", "<|im_start|<|im_end", "<"};
    static const size_t want_ctrl[] = {2, 0, 0};
    enum { LEN = 100 * 1024 };
    char *text = malloc(LEN);
    for (size_t u = 0; u < sizeof unit / sizeof unit[0]; u++) {
        size_t ul = strlen(unit[u]), reps = LEN / ul, len = reps * ul;
        for (size_t r = 0; r < reps; r++)
            memcpy(text + r * ul, unit[u], ul);
        mn_tokens out = {0};
        cr_assert_eq(mn_tok_encode_special(t, text, len, false, &out), MN_OK);
        size_t n_ctrl = 0;
        for (size_t i = 0; i < out.n; i++)
            n_ctrl += mn_tok_is_control(t, out.ids[i]);
        cr_assert_eq(n_ctrl, want_ctrl[u] * reps, "unit %zu", u);
        mn_tokens_free(&out);
    }
    free(text);
    mn_tok_free(t);
    gguf_close(f);
}

Test(chat_special, bundled_target_only_endoftext)
{
    gguf_file *f = open_gguf(source_file("models/target.gguf"));
    mn_tokenizer *t = load_tok(f);
    cr_assert(mn_tok_is_control(t, 0));
    for (int32_t i = 1; i < (int32_t)mn_tok_n_vocab(t); i++)
        cr_assert(!mn_tok_is_control(t, i), "only <|endoftext|> is a control token (id %d is too)", i);
    /* a rendered plain prompt has no markers: the same tokens either way */
    size_t len;
    char *prompt = render(MN_CHAT_PLAIN, CONV, N_CONV, &len);
    mn_tokens a = {0}, b = {0};
    cr_assert_eq(mn_tok_encode_special(t, prompt, len, true, &a), MN_OK);
    cr_assert_eq(mn_tok_encode(t, prompt, len, true, &b), MN_OK);
    cr_assert_eq(a.n, b.n);
    cr_assert_arr_eq(a.ids, b.ids, a.n * sizeof *a.ids);
    mn_tokens_free(&a), mn_tokens_free(&b);
    mn_free(prompt);
    /* its one control text is parsed only when asked */
    const char *eot = "end.<|endoftext|>";
    mn_tokens sp = {0}, pl = {0}, head = {0};
    cr_assert_eq(mn_tok_encode_special(t, eot, strlen(eot), false, &sp), MN_OK);
    cr_assert_eq(mn_tok_encode(t, eot, strlen(eot), false, &pl), MN_OK);
    cr_assert_eq(mn_tok_encode(t, "end.", 4, false, &head), MN_OK);
    cr_assert_eq(sp.n, head.n + 1);
    cr_assert_arr_eq(sp.ids, head.ids, head.n * sizeof *head.ids);
    cr_assert_eq(sp.ids[head.n], 0);
    for (size_t i = 0; i < pl.n; i++)
        cr_assert_neq(pl.ids[i], 0);
    mn_tokens_free(&sp), mn_tokens_free(&pl), mn_tokens_free(&head);
    mn_tok_free(t);
    gguf_close(f);
}
