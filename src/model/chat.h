/* chat.h - chat templates recognised by what their text contains, as llama.cpp does, and rendered
 * by hand (no template engine).
 *
 * A GGUF model carries its chat template as Jinja text (tokenizer.chat_template); the common ones
 * are told apart by the markers they write. Each format renders the messages, then opens the
 * assistant's turn (add_generation_prompt). The markers are control tokens: a rendered prompt is
 * encoded with mn_tok_encode_special (model/tokenizer.h). Like llama.cpp, ChatML gets no default
 * system message, whatever the template would have added.
 *
 *   chatml  "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n"
 *           (SmolLM2, Qwen; detected by "<|im_start|>")
 *   llama3  "<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>" per message, then
 *           "<|start_header_id|>assistant<|end_header_id|>\n\n" (by "<|start_header_id|>")
 *   gemma   "<start_of_turn>user\nCONTENT<end_of_turn>\n", the assistant's role written "model",
 *           a system message put before the first user message's content with "\n\n"; then
 *           "<start_of_turn>model\n" (by "<start_of_turn>")
 *   zephyr  "<|ROLE|>\nCONTENT<|endoftext|>\n" per message, then "<|assistant|>\n" (by "<|user|>")
 *   plain   no template (the bundled models): a system message as is followed by "\n\n", then
 *           "User: CONTENT\n" and "Assistant: CONTENT\n" lines, then "Assistant:"
 *
 * Roles: system, user, assistant. Thread: any; nothing is shared.
 */
#ifndef MN_CHAT_H
#define MN_CHAT_H

#include <stddef.h>

#include "model/gguf.h"
#include "util/status.h"

typedef enum mn_chat_format {
    MN_CHAT_PLAIN,
    MN_CHAT_CHATML,
    MN_CHAT_LLAMA3,
    MN_CHAT_GEMMA,
    MN_CHAT_ZEPHYR,
} mn_chat_format;

/* The format of a template's text; NULL or one not recognised: plain. */
mn_chat_format mn_chat_detect(const char *tmpl, size_t len);
/* The format of f's tokenizer.chat_template (plain without one). */
mn_chat_format mn_chat_format_of(const gguf_file *f);
const char *mn_chat_format_name(mn_chat_format f);

typedef struct mn_chat_msg {
    const char *role;
    const char *content;         /* content_len bytes (may hold NUL bytes) */
    size_t content_len;
} mn_chat_msg;

/* Render msgs[0..n) (n >= 1) and open the assistant's turn. *out is newly allocated (mn_free),
 * NUL-terminated, *out_len its length. MN_INVALID naming the message when a role is not one of
 * system, user, assistant; MN_NOMEM. */
mn_status mn_chat_render(mn_chat_format f, const mn_chat_msg *msgs, size_t n, char **out, size_t *out_len,
                         mn_err *err);

#endif
