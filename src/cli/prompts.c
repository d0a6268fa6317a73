/* prompts.c - see prompts.h. */
#include "cli/prompts.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

int mn_prompts_load(const char *path, size_t min_bytes, size_t max_bytes, mn_prompt **out, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    mn_prompt *set = NULL;
    int count = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        json_t *o = json_loadb(line, (size_t)len, 0, NULL);
        const char *p = json_string_value(json_object_get(o, "prompt"));
        size_t bytes = p ? strlen(p) : 0;
        if (p && bytes >= min_bytes && bytes <= max_bytes) {
            mn_prompt *grown = mn_realloc(set, (size_t)(count + 1) * sizeof *grown);
            if (!grown) {
                json_decref(o);
                break;
            }
            set = grown;
            set[count].text = mn_strndup(p, bytes);
            set[count].tokens = (long)json_integer_value(json_object_get(o, "tokens"));
            set[count++].chat = json_is_true(json_object_get(o, "chat"));
        }
        json_decref(o);
    }
    free(line); /* getline allocates with the system allocator */
    fclose(f);
    if (!count) {
        mn_free(set);
        return -1;
    }
    *out = set;
    *n = count;
    return 0;
}

int mn_prompt_set(const mn_prompt *p, json_t *o)
{
    if (!p->chat)
        return json_object_set_new(o, "prompt", json_string(p->text));
    return json_object_set_new(o, "messages", json_pack("[{s:s, s:s}]", "role", "user", "content", p->text));
}

void mn_prompts_free(mn_prompt *p, int n)
{
    for (int i = 0; i < n; i++)
        mn_free(p[i].text);
    mn_free(p);
}
