/* fuzz-tokenizer.c - a libFuzzer harness for the tokenizer (src/model/tokenizer.c): any bytes as
 * text, encoded plainly and with control tokens parsed (parse_special), and, where the vocabulary
 * is lossless (byte-level BPE), the pieces of the plain encoding must give back the text byte for
 * byte (a mismatch aborts, and libFuzzer keeps the input). ASan and UBSan watch every run. The
 * model is MINIONS_FUZZ_MODEL, else models/target.gguf (SmolLM2's Q4_1 file has another
 * pre-tokenizer and control tokens). Not part of the build:
 *
 *   grep -v MN_HAVE_JEMALLOC build/config.h > /tmp/fuzz-config.h   # ASan wants libc's malloc
 *   S=src; clang -g -O1 -fsanitize=fuzzer,address,undefined -I$S -Ibuild -include /tmp/fuzz-config.h \
 *     tools/fuzz-tokenizer.c $S/model/gguf.c $S/model/model.c $S/model/tokenizer.c $S/model/dtype.c \
 *     $S/model/quant.c $S/util/alloc.c $S/util/status.c $S/util/log.c -lutf8proc -lm -o /tmp/fuzz-tok
 *   mkdir -p /tmp/tok-corpus && head -c 4000 prompts/kjv.jsonl > /tmp/tok-corpus/kjv &&
 *     /tmp/fuzz-tok /tmp/tok-corpus -max_total_time=300 -max_len=4096
 *
 * On 2026-11-29 (3356f90), 5 minutes each: the bundled target's tokenizer 143,913 texts, SmolLM2's
 * 176,838 (from a prompt and a ChatML turn): no failure, every text given back by its pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/tokenizer.h"

static mn_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *path = getenv("MINIONS_FUZZ_MODEL") ? getenv("MINIONS_FUZZ_MODEL") : "models/target.gguf";
    mn_err err = {{0}};
    if (mn_model_load(path, &model, &err) != MN_OK) {
        fprintf(stderr, "fuzz-tokenizer: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const mn_tokenizer *t = model->tok;
    mn_tokens plain = {0}, special = {0};
    if (mn_tok_encode(t, (const char *)data, size, false, &plain) != MN_OK)
        abort(); /* only memory or a text over 4 GiB may fail */
    if (mn_tok_encode_special(t, (const char *)data, size, true, &special) != MN_OK)
        abort();
    if (mn_tok_is_lossless(t)) {
        size_t at = 0;
        for (size_t i = 0; i < plain.n; i++) {
            size_t len;
            const char *piece = mn_tok_piece(t, plain.ids[i], &len);
            if (at + len > size || memcmp(piece, data + at, len) != 0)
                abort(); /* the pieces do not give the text back */
            at += len;
        }
        if (at != size)
            abort();
    }
    mn_tokens_free(&plain);
    mn_tokens_free(&special);
    return 0;
}
