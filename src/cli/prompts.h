/* prompts.h - a prompt set as the benchmark and soak tools read it: the JSON-lines files of
 * prompts/, one object per line with "prompt" (a string), optionally "tokens" (its token count, as
 * the server counts it) and "chat": true (the prompt is a user's message, sent as "messages").
 * Ownership: the caller frees the set with mn_prompts_free. Thread: any. */
#ifndef MN_PROMPTS_H
#define MN_PROMPTS_H

#include <jansson.h>
#include <stddef.h>

typedef struct mn_prompt {
    char *text;
    long tokens; /* the line's "tokens", 0 when absent */
    int chat;    /* 1: send text as the one user message of a chat request */
} mn_prompt;

/* The request's prompt field for p: "prompt": text, or "messages": [{"role": "user", "content": text}]
 * for a chat prompt. Sets it in the jansson object o (0), -1 when memory runs out. */
int mn_prompt_set(const mn_prompt *p, json_t *o);

/* Read the prompts of path whose length in bytes is in [min_bytes, max_bytes]; lines without a
 * string "prompt" are skipped. *out and *n get the set. -1 when the file cannot be read or holds
 * no such prompt (nothing to free then); memory running out ends the set early. */
int mn_prompts_load(const char *path, size_t min_bytes, size_t max_bytes, mn_prompt **out, int *n);
void mn_prompts_free(mn_prompt *p, int n);

#endif
