/* fuzz-gguf.c - a libFuzzer harness for the GGUF reader and the model loader (src/model/gguf.c,
 * model.c, tokenizer.c): any bytes as a file; a file the reader accepts goes to the loader, which
 * validates every key, shape and type and builds the tokenizer, and a model it accepts encodes a
 * line of text. ASan and UBSan watch every run; a leak fails it at exit. tests/test_gguf.c cuts
 * and bit-flips the fixtures; this goes where coverage leads. Not part of the build:
 *
 *   grep -v MN_HAVE_JEMALLOC build/config.h > /tmp/fuzz-config.h   # ASan wants libc's malloc
 *   S=src; clang -g -O1 -fsanitize=fuzzer,address,undefined -I$S -Ibuild -include /tmp/fuzz-config.h \
 *     tools/fuzz-gguf.c $S/model/gguf.c $S/model/model.c $S/model/tokenizer.c $S/model/dtype.c \
 *     $S/model/quant.c $S/util/alloc.c $S/util/status.c $S/util/log.c -lutf8proc -lm -o /tmp/fuzz-gguf
 *   mkdir -p /tmp/gguf-corpus && cp build/tests/data/q4_*.gguf /tmp/gguf-corpus/ &&
 *     /tmp/fuzz-gguf /tmp/gguf-corpus -max_total_time=300 -max_len=200000
 *
 * On 2026-11-29, from q4_0.gguf and q4_1.gguf: within 5 minutes a llama.block_count of 2^28, on
 * which the loader sized its layer table (4 GB) before finding the first block missing; the loader
 * now refuses a count the file's tensors cannot hold. Then 1.5 million runs in 5 minutes, no
 * failure. */
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so that ASan sees a read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    gguf_file *f = NULL;
    mn_err err = {{0}};
    if (gguf_open_mem(buf, size, &f, &err) == MN_OK) {
        mn_model *m = NULL;
        if (mn_model_from_gguf(f, "fuzzed", &m, &err) == MN_OK) {
            static const char text[] = "In the beginning God created the heaven and the earth.";
            mn_tokens toks = {0};
            if (mn_tok_encode(m->tok, text, sizeof text - 1, true, &toks) == MN_OK)
                for (size_t i = 0; i < toks.n; i++) {
                    size_t len;
                    (void)mn_tok_piece(m->tok, toks.ids[i], &len);
                }
            mn_tokens_free(&toks);
            mn_model_free(m);
        }
    }
    free(buf);
    return 0;
}
