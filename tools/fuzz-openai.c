/* fuzz-openai.c - a libFuzzer harness for the OpenAI API's request parser and bodies
 * (src/net/openai.c): any bytes as a request body, of either kind, under any chat format; a request
 * it accepts is split into its choices and answered, whole and as a chunk, with its own prompt as
 * the text. ASan and UBSan watch every run; a leak fails it at exit. Not part of the build:
 *
 *   grep -v MN_HAVE_JEMALLOC build/config.h > /tmp/fuzz-config.h   # ASan wants libc's malloc
 *   S=src; clang -g -O1 -fsanitize=fuzzer,address,undefined -I$S -Ibuild -include /tmp/fuzz-config.h \
 *     tools/fuzz-openai.c $S/net/openai.c $S/net/proto.c $S/model/chat.c $S/util/alloc.c \
 *     $S/util/status.c $S/util/log.c -ljansson -o /tmp/fuzz-openai
 *   mkdir -p /tmp/fuzz-corpus && /tmp/fuzz-openai /tmp/fuzz-corpus -max_total_time=300 -max_len=4096
 *
 * The first byte picks the kind (bit 0), the max_tokens limit and the chat format; the rest is the
 * body. On 2026-11-29 (9f4f1ae's parser), started from six valid bodies of both kinds (chat and
 * completions; n, stop, logprobs, stream_options, content parts): 10.7 million runs in 5 minutes,
 * 2,553 new inputs kept, no failure. */
#include <string.h>

#include "model/gguf.h"
#include "net/openai.h"
#include "util/alloc.h"

/* model/chat.c looks a template up in a GGUF file; mn_oai_parse never does */
mn_status gguf_get_string(const gguf_file *f, const char *key, gguf_str *out, mn_err *err)
{
    (void)f, (void)key, (void)out, (void)err;
    return MN_INVALID;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    mn_oai_kind kind = data[0] & 1 ? MN_OAI_CHAT : MN_OAI_COMPLETION;
    mn_oai_config cfg = {.max_tokens_limit = 64 + (data[0] >> 1),
                         .chat = (mn_chat_format)((data[0] >> 4) % (MN_CHAT_MISTRAL_V7 + 1))};
    mn_oai_request q;
    memset(&q, 0, sizeof q);
    mn_oai_error err;
    if (mn_oai_parse(kind, (const char *)data + 1, size - 1, &cfg, &q, &err) == MN_OK) {
        for (uint32_t i = 0; i < mn_oai_choices(&q); i++) {
            mn_req_params p;
            if (mn_oai_choice_params(&q, i, &p) == MN_OK)
                mn_req_params_free(&p);
        }
        mn_oai_result res = {.kind = kind, .id = "x", .model = q.model, .text = q.p.prompt,
                             .text_len = q.p.prompt_len, .usage = true};
        size_t len;
        mn_free(mn_oai_response(&res, 1, &len));
        mn_free(mn_oai_chunk(&res, &len));
    }
    mn_oai_request_free(&q);
    return 0;
}
