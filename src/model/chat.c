/* chat.c - chat formats (see chat.h). */
#include "model/chat.h"

#include <string.h>

#include "util/alloc.h"

static bool contains(const char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, n))
            return true;
    return false;
}

mn_chat_format mn_chat_detect(const char *tmpl, size_t len)
{
    if (!tmpl)
        return MN_CHAT_PLAIN;
    if (contains(tmpl, len, "<|im_start|>"))
        return MN_CHAT_CHATML;
    if (contains(tmpl, len, "<|start_header_id|>") && contains(tmpl, len, "<|end_header_id|>"))
        return MN_CHAT_LLAMA3;
    if (contains(tmpl, len, "<start_of_turn>"))
        return MN_CHAT_GEMMA;
    if (contains(tmpl, len, "<|user|>"))
        return MN_CHAT_ZEPHYR;
    return MN_CHAT_PLAIN;
}

mn_chat_format mn_chat_format_of(const gguf_file *f)
{
    gguf_str s;
    mn_err err;
    if (gguf_get_string(f, "tokenizer.chat_template", &s, &err) != MN_OK)
        return MN_CHAT_PLAIN;
    return mn_chat_detect(s.ptr, s.len);
}

const char *mn_chat_format_name(mn_chat_format f)
{
    static const char *const names[] = {"plain", "chatml", "llama3", "gemma", "zephyr"};
    return f <= MN_CHAT_ZEPHYR ? names[f] : "plain";
}

typedef struct text {
    char *s;
    size_t len, cap;
    bool oom;
} text;

static void add(text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = mn_realloc(t->s, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static void adds(text *t, const char *s) { add(t, s, strlen(s)); }

/* One message in format f; sys: a system message gemma folds into this (user) one. */
static void message(text *t, mn_chat_format f, const mn_chat_msg *m, const mn_chat_msg *sys)
{
    const char *role = m->role;
    switch (f) {
    case MN_CHAT_CHATML:
        adds(t, "<|im_start|>"), adds(t, role), adds(t, "\n"), add(t, m->content, m->content_len);
        adds(t, "<|im_end|>\n");
        break;
    case MN_CHAT_LLAMA3:
        adds(t, "<|start_header_id|>"), adds(t, role), adds(t, "<|end_header_id|>\n\n");
        add(t, m->content, m->content_len), adds(t, "<|eot_id|>");
        break;
    case MN_CHAT_GEMMA:
        adds(t, "<start_of_turn>"), adds(t, strcmp(role, "assistant") ? "user" : "model"), adds(t, "\n");
        if (sys)
            add(t, sys->content, sys->content_len), adds(t, "\n\n");
        add(t, m->content, m->content_len), adds(t, "<end_of_turn>\n");
        break;
    case MN_CHAT_ZEPHYR:
        adds(t, "<|"), adds(t, role), adds(t, "|>\n"), add(t, m->content, m->content_len), adds(t, "<|endoftext|>\n");
        break;
    case MN_CHAT_PLAIN:
        if (!strcmp(role, "system"))
            add(t, m->content, m->content_len), adds(t, "\n\n");
        else
            adds(t, strcmp(role, "user") ? "Assistant: " : "User: "), add(t, m->content, m->content_len), adds(t, "\n");
        break;
    }
}

mn_status mn_chat_render(mn_chat_format f, const mn_chat_msg *msgs, size_t n, char **out, size_t *out_len,
                         mn_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant"))
            return mn_fail(err, MN_INVALID, "messages[%zu]: role '%.40s' is not system, user or assistant", i,
                           msgs[i].role);
    static const char *const open[] = {"Assistant:", "<|im_start|>assistant\n",
                                       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<start_of_turn>model\n",
                                       "<|assistant|>\n"};
    text t = {0};
    const mn_chat_msg *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        if (f == MN_CHAT_GEMMA && !strcmp(msgs[i].role, "system")) { /* gemma has no system turn */
            sys = &msgs[i];
            continue;
        }
        message(&t, f, &msgs[i], f == MN_CHAT_GEMMA && !strcmp(msgs[i].role, "user") ? sys : NULL);
        if (!strcmp(msgs[i].role, "user"))
            sys = NULL;
    }
    adds(&t, open[f]);
    if (t.oom) {
        mn_free(t.s);
        return mn_fail(err, MN_NOMEM, "out of memory for the chat prompt");
    }
    *out = t.s;
    *out_len = t.len;
    return MN_OK;
}
