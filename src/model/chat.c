/* chat.c - chat formats (see chat.h).
 *
 * Detection is llama.cpp's chain of substring tests, in its order, with the formats we do not
 * render left out, except the two whose markers would select one we do render earlier than
 * llama.cpp does (SmolVLM's, ChatML's marker beside its own; ChatGLM-4's, GLM-Edge's): they are
 * plain, as every format we do not render is. Rendering appends to one growing buffer that
 * remembers a failed allocation, so the format code reads as the table in chat.h and checks once
 * at the end.
 */
#include "model/chat.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "util/alloc.h"

static const char *const format_names[MN_CHAT_N_FORMATS] = {
    [MN_CHAT_PLAIN] = "plain",
    [MN_CHAT_CHATML] = "chatml",
    [MN_CHAT_LLAMA3] = "llama3",
    [MN_CHAT_GEMMA] = "gemma",
    [MN_CHAT_ZEPHYR] = "zephyr",
    [MN_CHAT_PHI3] = "phi3",
    [MN_CHAT_PHI4] = "phi4",
    [MN_CHAT_FALCON3] = "falcon3",
    [MN_CHAT_GLMEDGE] = "glmedge",
    [MN_CHAT_LLAMA2] = "llama2",
    [MN_CHAT_LLAMA2_SYS] = "llama2-sys",
    [MN_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [MN_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [MN_CHAT_MISTRAL_V1] = "mistral-v1",
    [MN_CHAT_MISTRAL_V3] = "mistral-v3",
    [MN_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [MN_CHAT_MISTRAL_V7] = "mistral-v7",
};

/* ---- detection --------------------------------------------------------------------------------- */

typedef struct tmpl_text {
    const char *s;
    size_t len;
} tmpl_text;

static bool has(tmpl_text t, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= t.len; i++)
        if (t.s[i] == needle[0] && !memcmp(t.s + i, needle, n))
            return true;
    return false;
}

/* The [INST] family (llama.cpp: the text starts with "mistral" or holds "[INST]"). */
static mn_chat_format detect_inst(tmpl_text t)
{
    if (has(t, "[SYSTEM_PROMPT]"))
        return MN_CHAT_MISTRAL_V7;
    if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) { /* Mistral's own */
        if (has(t, " [INST]"))
            return MN_CHAT_MISTRAL_V1;
        return has(t, "\"[INST]\"") ? MN_CHAT_MISTRAL_V3_TEKKEN : MN_CHAT_MISTRAL_V3;
    }
    if (has(t, "content.strip()"))
        return MN_CHAT_LLAMA2_SYS_STRIP;
    if (has(t, "bos_token + '[INST]"))
        return MN_CHAT_LLAMA2_SYS_BOS;
    return has(t, "<<SYS>>") ? MN_CHAT_LLAMA2_SYS : MN_CHAT_LLAMA2;
}

mn_chat_format mn_chat_detect(const char *tmpl, size_t len)
{
    if (!tmpl)
        return MN_CHAT_PLAIN;
    tmpl_text t = {tmpl, len};
    for (int f = 0; f < MN_CHAT_N_FORMATS; f++)
        if (strlen(format_names[f]) == len && !memcmp(format_names[f], tmpl, len))
            return (mn_chat_format)f;
    if (has(t, "<|im_start|>")) /* SmolVLM's writes <|im_start|> too, but is its own format */
        return has(t, "<|im_sep|>") ? MN_CHAT_PHI4 : has(t, "<end_of_utterance>") ? MN_CHAT_PLAIN : MN_CHAT_CHATML;
    if ((len >= 7 && !memcmp(tmpl, "mistral", 7)) || has(t, "[INST]"))
        return detect_inst(t);
    if (has(t, "<|assistant|>") && has(t, "<|end|>"))
        return MN_CHAT_PHI3;
    if (has(t, "[gMASK]<sop>")) /* ChatGLM-4, whose markers are GLM-Edge's */
        return MN_CHAT_PLAIN;
    if (has(t, "<|assistant|>") && has(t, "<|user|>"))
        return has(t, "</s>") ? MN_CHAT_FALCON3 : MN_CHAT_GLMEDGE;
    if (has(t, "<|user|>") && has(t, "<|endoftext|>"))
        return MN_CHAT_ZEPHYR;
    if (has(t, "<start_of_turn>"))
        return MN_CHAT_GEMMA;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
        return MN_CHAT_LLAMA3;
    return MN_CHAT_PLAIN;
}

mn_chat_format mn_chat_format_of(const gguf_file *f)
{
    gguf_str s;
    if (gguf_get_string(f, "tokenizer.chat_template", &s, NULL) != MN_OK)
        return MN_CHAT_PLAIN;
    return mn_chat_detect(s.ptr, s.len);
}

const char *mn_chat_format_name(mn_chat_format f)
{
    return (unsigned)f < MN_CHAT_N_FORMATS ? format_names[f] : "plain";
}

const char *mn_chat_end_of_turn(mn_chat_format f)
{
    switch (f) {
    case MN_CHAT_CHATML:
    case MN_CHAT_PHI4:
        return "<|im_end|>";
    case MN_CHAT_LLAMA3:
        return "<|eot_id|>";
    case MN_CHAT_GEMMA:
        return "<end_of_turn>";
    case MN_CHAT_ZEPHYR:
        return "<|endoftext|>";
    case MN_CHAT_PHI3:
        return "<|end|>";
    case MN_CHAT_GLMEDGE:
        return "<|user|>";
    case MN_CHAT_LLAMA2:
    case MN_CHAT_LLAMA2_SYS:
    case MN_CHAT_LLAMA2_SYS_BOS:
    case MN_CHAT_LLAMA2_SYS_STRIP:
    case MN_CHAT_MISTRAL_V1:
    case MN_CHAT_MISTRAL_V3:
    case MN_CHAT_MISTRAL_V3_TEKKEN:
    case MN_CHAT_MISTRAL_V7:
        return "</s>";
    case MN_CHAT_PLAIN:
    case MN_CHAT_FALCON3:
        break;
    }
    return NULL;
}

const char *mn_chat_turn_stop(mn_chat_format f) { return f == MN_CHAT_PLAIN ? "\nUser:" : NULL; }

/* ---- rendering --------------------------------------------------------------------------------- */

typedef struct buf {
    char *s;
    size_t len, cap;
    bool oom;        /* an append failed: the text is incomplete, render reports MN_NOMEM */
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > SIZE_MAX / 4 - b->len) {
        b->oom = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = mn_realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* A message's content, ASCII whitespace trimmed at both ends when trim (llama.cpp's trim()). */
static void put_content(buf *b, const mn_chat_msg *m, bool trim)
{
    const char *s = m->content;
    size_t n = m->content_len;
    if (trim) {
        static const char ws[] = " \t\n\v\f\r";
        while (n > 0 && memchr(ws, s[0], sizeof ws - 1))
            s++, n--;
        while (n > 0 && memchr(ws, s[n - 1], sizeof ws - 1))
            n--;
    }
    put(b, s, n);
}

static bool role_is(const mn_chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* Formats that wrap each message in markers around its role: pre R mid C post, then gen. */
typedef struct tagged {
    const char *pre, *mid, *post, *gen;
    bool trim;
} tagged;

static const tagged tagged_formats[MN_CHAT_N_FORMATS] = {
    [MN_CHAT_CHATML] = {"<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", false},
    [MN_CHAT_PHI4] = {"<|im_start|>", "<|im_sep|>", "<|im_end|>", "<|im_start|>assistant<|im_sep|>", false},
    [MN_CHAT_LLAMA3] = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                        "<|start_header_id|>assistant<|end_header_id|>\n\n", true},
    [MN_CHAT_ZEPHYR] = {"<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n", false},
    [MN_CHAT_PHI3] = {"<|", "|>\n", "<|end|>\n", "<|assistant|>\n", false},
    [MN_CHAT_FALCON3] = {"<|", "|>\n", "\n", "<|assistant|>\n", false},
    [MN_CHAT_GLMEDGE] = {"<|", "|>\n", "", "<|assistant|>", false},
};

static void render_tagged(buf *b, const tagged *tf, const mn_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        puts_(b, tf->pre), puts_(b, msgs[i].role), puts_(b, tf->mid);
        put_content(b, &msgs[i], tf->trim);
        puts_(b, tf->post);
    }
    puts_(b, tf->gen);
}

static void render_plain(buf *b, const mn_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (role_is(&msgs[i], "system")) {
            put_content(b, &msgs[i], false), puts_(b, "\n\n");
            continue;
        }
        puts_(b, role_is(&msgs[i], "user") ? "User: " : "Assistant: ");
        put_content(b, &msgs[i], false), puts_(b, "\n");
    }
    puts_(b, "Assistant:");
}

/* Gemma has no system turn: the trimmed texts of the system messages since the last turn that took
 * them, one after another, open the next turn that is not the model's. */
static void render_gemma(buf *b, const mn_chat_msg *msgs, size_t n)
{
    size_t sys_from = 0; /* system messages from here on are not out yet */
    for (size_t i = 0; i < n; i++) {
        if (role_is(&msgs[i], "system"))
            continue;
        bool model = role_is(&msgs[i], "assistant");
        puts_(b, "<start_of_turn>"), puts_(b, model ? "model" : msgs[i].role), puts_(b, "\n");
        if (!model) {
            size_t before = b->len;
            for (size_t j = sys_from; j < i; j++)
                if (role_is(&msgs[j], "system"))
                    put_content(b, &msgs[j], true);
            if (b->len != before) /* llama.cpp skips system texts that trim to nothing */
                puts_(b, "\n\n");
            sys_from = i + 1;
        }
        put_content(b, &msgs[i], true), puts_(b, "<end_of_turn>\n");
    }
    puts_(b, "<start_of_turn>model\n");
}

static void render_llama2(buf *b, mn_chat_format f, const mn_chat_msg *msgs, size_t n)
{
    bool sys_tags = f != MN_CHAT_LLAMA2, bos = f == MN_CHAT_LLAMA2_SYS_BOS, strip = f == MN_CHAT_LLAMA2_SYS_STRIP;
    bool in_turn = true;
    puts_(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            puts_(b, bos ? "<s>[INST] " : "[INST] ");
            in_turn = true;
        }
        if (role_is(&msgs[i], "system")) {
            puts_(b, sys_tags ? "<<SYS>>\n" : "");
            put_content(b, &msgs[i], strip);
            puts_(b, sys_tags ? "\n<</SYS>>\n\n" : "\n");
        } else if (role_is(&msgs[i], "user")) {
            put_content(b, &msgs[i], strip), puts_(b, " [/INST]");
        } else {
            put_content(b, &msgs[i], strip), puts_(b, "</s>");
            in_turn = false;
        }
    }
}

static void render_mistral(buf *b, mn_chat_format f, const mn_chat_msg *msgs, size_t n)
{
    const char *lead = f == MN_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = f == MN_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool in_turn = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            puts_(b, lead), puts_(b, "[INST]"), puts_(b, trail);
            in_turn = true;
        }
        if (role_is(&msgs[i], "system")) {
            put_content(b, &msgs[i], false), puts_(b, "\n\n");
        } else if (role_is(&msgs[i], "user")) {
            put_content(b, &msgs[i], false), puts_(b, lead), puts_(b, "[/INST]");
        } else {
            puts_(b, trail), put_content(b, &msgs[i], f == MN_CHAT_MISTRAL_V3), puts_(b, "</s>");
            in_turn = false;
        }
    }
}

static void render_mistral_v7(buf *b, const mn_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (role_is(&msgs[i], "system"))
            puts_(b, "[SYSTEM_PROMPT] "), put_content(b, &msgs[i], false), puts_(b, "[/SYSTEM_PROMPT]");
        else if (role_is(&msgs[i], "user"))
            puts_(b, "[INST] "), put_content(b, &msgs[i], false), puts_(b, "[/INST]");
        else
            puts_(b, " "), put_content(b, &msgs[i], false), puts_(b, "</s>");
    }
}

mn_status mn_chat_render(mn_chat_format f, const mn_chat_msg *msgs, size_t n, char **out, size_t *out_len,
                         mn_err *err)
{
    if (n == 0)
        return mn_fail(err, MN_INVALID, "messages: there are none");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role)
            return mn_fail(err, MN_INVALID, "messages[%zu]: no role", i);
        if (!role_is(&msgs[i], "system") && !role_is(&msgs[i], "user") && !role_is(&msgs[i], "assistant"))
            return mn_fail(err, MN_INVALID, "messages[%zu]: role '%.40s' is not system, user or assistant", i,
                           msgs[i].role);
    }
    buf b = {0};
    switch ((unsigned)f < MN_CHAT_N_FORMATS ? f : MN_CHAT_PLAIN) {
    case MN_CHAT_PLAIN:
        render_plain(&b, msgs, n);
        break;
    case MN_CHAT_GEMMA:
        render_gemma(&b, msgs, n);
        break;
    case MN_CHAT_LLAMA2:
    case MN_CHAT_LLAMA2_SYS:
    case MN_CHAT_LLAMA2_SYS_BOS:
    case MN_CHAT_LLAMA2_SYS_STRIP:
        render_llama2(&b, f, msgs, n);
        break;
    case MN_CHAT_MISTRAL_V1:
    case MN_CHAT_MISTRAL_V3:
    case MN_CHAT_MISTRAL_V3_TEKKEN:
        render_mistral(&b, f, msgs, n);
        break;
    case MN_CHAT_MISTRAL_V7:
        render_mistral_v7(&b, msgs, n);
        break;
    case MN_CHAT_CHATML:
    case MN_CHAT_PHI4:
    case MN_CHAT_LLAMA3:
    case MN_CHAT_ZEPHYR:
    case MN_CHAT_PHI3:
    case MN_CHAT_FALCON3:
    case MN_CHAT_GLMEDGE:
        render_tagged(&b, &tagged_formats[f], msgs, n);
        break;
    }
    if (!b.oom && !b.s && !(b.s = mn_calloc(1, 1))) /* nothing was written: still hand out a string */
        b.oom = true;
    if (b.oom) {
        mn_free(b.s);
        return mn_fail(err, MN_NOMEM, "out of memory for the chat prompt");
    }
    *out = b.s;
    *out_len = b.len;
    return MN_OK;
}
