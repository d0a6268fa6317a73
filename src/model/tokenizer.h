/* tokenizer.h - byte-level BPE (GGUF tokenizer.ggml.model = "gpt2") from a GGUF vocabulary.
 *
 * Encoding: the text is split by the pre-tokenizer that tokenizer.ggml.pre names, then each piece's
 * bytes are merged by rank like the reference BPE (lowest rank first, leftmost first on ties).
 * Pre-tokenizers:
 *   "gpt-2" (llama.cpp's name, what our files say), and "default", "gpt2" (older files): GPT-2's
 *       pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *       llama.cpp's "gpt-2" splits valid UTF-8 the same way (it turns each invalid byte into
 *       U+FFFD); its "default" is another split (punctuation runs, digit triples), never written.
 *   "smollm": every \p{N} is its own piece, then GPT-2's pattern on what lies between.
 * Bytes that are not valid UTF-8 are pieces of the "other" class, so with a vocabulary that has a
 * token for each of the 256 bytes (mn_tok_is_lossless) any byte string encodes and
 * decode(encode(x)) == x for every x. A vocabulary without some bytes (SmolLM2 lacks 21, control
 * bytes and bytes invalid in UTF-8) drops them, as the reference tokenizers do. Control tokens
 * never come out of encode (plain text is never parsed for special tokens; mn_tok_encode_special
 * is the one that does) and decode to nothing.
 *
 * Ownership: the tokenizer copies what it needs from the GGUF file. Immutable after load; encode and
 * decode may run on any thread concurrently.
 */
#ifndef MN_TOKENIZER_H
#define MN_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/status.h"

typedef struct mn_tokenizer mn_tokenizer;

/* A growable token array owned by the caller; zero-initialize, release with mn_tokens_free. */
typedef struct mn_tokens {
    int32_t *ids;
    size_t n;
    size_t cap;
} mn_tokens;

mn_status mn_tokens_push(mn_tokens *t, int32_t id);
void mn_tokens_free(mn_tokens *t);

/* Build a tokenizer from f's tokenizer.ggml.* keys; n_vocab must match the token list. */
mn_status mn_tok_load(const gguf_file *f, uint32_t n_vocab, mn_tokenizer **out, mn_err *err);
void mn_tok_free(mn_tokenizer *t);

/* Append the tokens of text[0..len) to out (BOS first when add_bos and the model asks for it). */
mn_status mn_tok_encode(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, mn_tokens *out);

/* Like mn_tok_encode, but the text of every control token (SmolLM2's "<|im_start|>", ...) found in
 * text is that token, the longest one where several start at one place; each stretch of text
 * between them is encoded on its own as mn_tok_encode does (no BOS there: only the first token may
 * be BOS, under the same rule). What llama.cpp calls parse_special: for prompts the server
 * rendered from chat messages (model/chat.h), never for a client's raw text. Without control
 * tokens in text (or in the vocabulary) it gives what mn_tok_encode gives. Time: linear in len
 * times the control tokens that share a first byte (collected at load). Fails as mn_tok_encode
 * does (MN_NOMEM, MN_INVALID for a text over 4 GiB); out may then hold a part of the tokens. */
mn_status mn_tok_encode_special(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, mn_tokens *out);

/* The control token whose text is exactly text[0..len), -1 when there is none (SmolLM2's
 * "<|im_end|>" is 2; "<|im_end" or a normal token's text is -1). */
int32_t mn_tok_control(const mn_tokenizer *t, const char *text, size_t len);

/* The bytes token id decodes to (empty for control tokens and ids out of range). */
const char *mn_tok_piece(const mn_tokenizer *t, int32_t id, size_t *len);
/* The vocabulary's text of token id: a control token's too ("<|im_end|>"), a byte-level token's
 * decoded bytes; empty for ids out of range. */
const char *mn_tok_text(const mn_tokenizer *t, int32_t id, size_t *len);

/* A lower bound on the tokens mn_tok_encode (special: mn_tok_encode_special) gives for text[0, len),
 * without encoding it: every token covers at most the longest piece's bytes (or control token's
 * text), and, in a vocabulary that is not lossless, the bytes without a token of their own are
 * left out of the count (encoding may drop them; a scan of the text, no more). Lets a caller
 * refuse a prompt that cannot fit a context before paying for it. */
size_t mn_tok_min_tokens(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, bool special);
int32_t mn_tok_bos(const mn_tokenizer *t);   /* -1 when the model has none */
int32_t mn_tok_eos(const mn_tokenizer *t);   /* -1 when the model has none */
#define MN_TOK_MAX_EOG 16
/* Whether id ends a generation: eos, the file's tokenizer.ggml.eot_token_id / eom_token_id, and the
 * control tokens "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
 * "<end_of_turn>", "<|end_of_text|>", "<EOT>" and "<end_of_utterance>" (llama.cpp's end-of-generation
 * set; at most MN_TOK_MAX_EOG tokens, eos first). SmolLM2's are <|im_end|> (eos) and <|endoftext|>. */
bool mn_tok_is_eog(const mn_tokenizer *t, int32_t id);
uint32_t mn_tok_n_vocab(const mn_tokenizer *t);
bool mn_tok_is_control(const mn_tokenizer *t, int32_t id);
bool mn_tok_is_lossless(const mn_tokenizer *t);

#endif
