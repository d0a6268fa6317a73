/* chat.h - chat templates recognised by what their text contains, as llama.cpp's
 * llm_chat_detect_template does, and rendered by hand-written C (no template engine).
 *
 * A GGUF model carries its chat template as Jinja text (tokenizer.chat_template); the common ones
 * are told apart by the markers they write, tested in llama.cpp's order (so a Phi-3 template,
 * which also writes "<|user|>", is not taken for Zephyr). Formats llama.cpp knows but minions does
 * not render (command-r, vicuna, deepseek, ...) come out plain. Rendering follows llama.cpp's
 * (src/llama-chat.cpp) byte for byte, including where it trims a message's content (ASCII
 * whitespace at both ends: the "trim" below) and that it injects no default system message,
 * whatever the template would have added.
 *
 * The markers are control tokens: a rendered prompt is meant for mn_tok_encode_special
 * (model/tokenizer.h). That parses a marker anywhere in the text, in a client's content too, as
 * llama.cpp's server does.
 *
 * What mn_chat_render writes, per message (R the role, C its content), then at the end:
 *   plain     system: "C\n\n"; user: "User: C\n"; assistant: "Assistant: C\n"; then "Assistant:"
 *             (a model without a template, like the bundled ones)
 *   chatml    "<|im_start|>R\nC<|im_end|>\n"; then "<|im_start|>assistant\n" (SmolLM2, Qwen)
 *   phi4      "<|im_start|>R<|im_sep|>C<|im_end|>"; then "<|im_start|>assistant<|im_sep|>"
 *   llama3    "<|start_header_id|>R<|end_header_id|>\n\n" trim(C) "<|eot_id|>";
 *             then "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *   gemma     "<start_of_turn>R\n" trim(C) "<end_of_turn>\n" with R "model" for assistant;
 *             a system message is no turn: the trim(C) of those since the last turn that took
 *             them, one after another, + "\n\n" open the next user turn's content;
 *             then "<start_of_turn>model\n"
 *   zephyr    "<|R|>\nC<|endoftext|>\n"; then "<|assistant|>\n"
 *   phi3      "<|R|>\nC<|end|>\n"; then "<|assistant|>\n"
 *   falcon3   "<|R|>\nC\n"; then "<|assistant|>\n"
 *   glmedge   "<|R|>\nC"; then "<|assistant|>"
 *   llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip: "[INST] " first; system: "C\n"
 *             (llama2) or "<<SYS>>\nC\n<</SYS>>\n\n" (the -sys ones); user: "C [/INST]";
 *             assistant: "C</s>", and the next message opens with "[INST] " ("<s>[INST] " for
 *             -sys-bos); -sys-strip trims every C. Nothing at the end: the turn after the last
 *             "[/INST]" is the assistant's.
 *   mistral-v1, -v3, -v3-tekken: "[INST]" opens each exchange, after " " (v1) and followed by " "
 *             (v1, v3); system: "C\n\n"; user: "C [/INST]" (v1) or "C[/INST]"; assistant:
 *             " C</s>" (v1), " " trim(C) "</s>" (v3), "C</s>" (tekken). Nothing at the end.
 *   mistral-v7 system: "[SYSTEM_PROMPT] C[/SYSTEM_PROMPT]"; user: "[INST] C[/INST]";
 *             assistant: " C</s>". Nothing at the end.
 *
 * Thread: any; nothing is shared. Only mn_chat_render allocates (its result).
 */
#ifndef MN_CHAT_H
#define MN_CHAT_H

#include <stddef.h>

#include "model/gguf.h"
#include "util/status.h"

typedef enum mn_chat_format {
    MN_CHAT_PLAIN,             /* no template (or one not recognised): "User: ..." lines */
    MN_CHAT_CHATML,            /* "<|im_start|>" (SmolLM2, Qwen, OpenHermes) */
    MN_CHAT_LLAMA3,            /* "<|start_header_id|>" and "<|end_header_id|>" */
    MN_CHAT_GEMMA,             /* "<start_of_turn>" */
    MN_CHAT_ZEPHYR,            /* "<|user|>" and "<|endoftext|>", no "<|assistant|>" */
    MN_CHAT_PHI3,              /* "<|assistant|>" and "<|end|>" */
    MN_CHAT_PHI4,              /* "<|im_start|>" and "<|im_sep|>" */
    MN_CHAT_FALCON3,           /* "<|assistant|>", "<|user|>" and "</s>" */
    MN_CHAT_GLMEDGE,           /* "<|assistant|>" and "<|user|>", no "</s>" */
    MN_CHAT_LLAMA2,            /* "[INST]" without the markers below */
    MN_CHAT_LLAMA2_SYS,        /* "[INST]" and "<<SYS>>" */
    MN_CHAT_LLAMA2_SYS_BOS,    /* "[INST]" and "bos_token + '[INST]" */
    MN_CHAT_LLAMA2_SYS_STRIP,  /* "[INST]" and "content.strip()" */
    MN_CHAT_MISTRAL_V1,        /* Mistral's official templates ("' [INST] ' + system_message" or
                                  "[AVAILABLE_TOOLS]") with " [INST]" */
    MN_CHAT_MISTRAL_V3,        /* those without " [INST]" or "\"[INST]\"" */
    MN_CHAT_MISTRAL_V3_TEKKEN, /* those with "\"[INST]\"" (Mistral Nemo) */
    MN_CHAT_MISTRAL_V7,        /* "[INST]" and "[SYSTEM_PROMPT]" */
} mn_chat_format;

#define MN_CHAT_N_FORMATS (MN_CHAT_MISTRAL_V7 + 1)

/* The format of a template's text tmpl[0..len) (not NUL-terminated; NUL bytes are data). A text
 * that is exactly a format's name ("chatml", ...) is that format, as in llama.cpp, so a
 * command-line override can go through here too. NULL or not recognised: MN_CHAT_PLAIN. */
mn_chat_format mn_chat_detect(const char *tmpl, size_t len);

/* The format of f's tokenizer.chat_template; MN_CHAT_PLAIN without one (or when it is not a
 * string). */
mn_chat_format mn_chat_format_of(const gguf_file *f);

/* llama.cpp's name of f ("plain", "chatml", "llama3", "mistral-v3-tekken", ...): a static string;
 * "plain" for a value out of range. */
const char *mn_chat_format_name(mn_chat_format f);

typedef struct mn_chat_msg {
    const char *role;            /* NUL-terminated: "system", "user" or "assistant" */
    const char *content;         /* content_len bytes (may hold NUL bytes; NULL when 0) */
    size_t content_len;
} mn_chat_msg;

/* Render msgs[0..n) in format f (see the table above) and open the assistant's turn
 * (add_generation_prompt); a value of f out of range renders as plain. *out is newly allocated,
 * NUL-terminated (the caller frees it with mn_free), *out_len its length without the NUL; the
 * caller keeps msgs. On failure *out and *out_len are untouched: MN_INVALID when n is 0, or a
 * role is NULL or not one of system, user, assistant (the message names the index and the role:
 * "messages[1]: role 'tool' is not ..."); MN_NOMEM. */
mn_status mn_chat_render(mn_chat_format f, const mn_chat_msg *msgs, size_t n, char **out, size_t *out_len,
                         mn_err *err);

/* The text that ends an assistant's turn in format f: "<|im_end|>" (chatml, phi4), "<|eot_id|>"
 * (llama3), "<end_of_turn>" (gemma), "<|endoftext|>" (zephyr), "<|end|>" (phi3), "<|user|>"
 * (glmedge, whose next turn ends it), "</s>" (llama2 and mistral ones). NULL when the format has
 * none of its own (plain, falcon3): then only the model's end-of-text token ends it. A static
 * string; in the models' vocabularies it is a control token (or their EOS). */
const char *mn_chat_end_of_turn(mn_chat_format f);
/* Text that ends the assistant's turn where format f has no token for it: "\nUser:" for plain (the
 * next turn's start, which a model without a template writes on when nothing stops it), else NULL.
 * The text is cut there, as at a stop string. A static string. */
const char *mn_chat_turn_stop(mn_chat_format f);

#endif
