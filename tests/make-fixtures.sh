#!/bin/sh
# make-fixtures.sh SRCDIR OUTDIR PYTHON: build the test models and the reference outputs.
#
# Models are small llama GGUF files written by tools/ggufw.py; reference logits come from
# tools/ref_forward.py and reference encodings from tools/ref_tokenize.py, both independent of the
# engine. When the real SmolLM2 model has been fetched (tools/fetch-smollm2.sh), its reference
# top-2 over 2,048 teacher-forced tokens is taken from tests/fixtures (computed by
# tools/ref_forward.py; MINIONS_RECOMPUTE_REFERENCE=1 computes it again), and its F16 and F32
# conversions are written (tools/gguf-dequant.py).
set -eu
src=$1
out=$2
py=$3
mkdir -p "$out"
w="$py $src/tools/ggufw.py"

# gqa_f32 keeps the old spelling pre = "default" (the other GPT-2 models say "gpt-2"): files written
# before issue #9 must still load, and test_gguf patches that string
$w --out "$out/gqa_f32.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 100 --vocab 512 --pre default --seed 1
$w --out "$out/untied_f32.gguf" --dim 48 --layers 3 --heads 3 --kv-heads 3 --ff 96 --vocab 400 \
   --untied --pre smollm --rope-base 500 --seed 2
for t in f16 q8_0 q4_0 q4_1; do
  $w --out "$out/$t.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 384 --untied \
     --type "$t" --seed 3
done
# one matrix of Q, K, V and one of gate, up quantized, the others float (the CPU pass quantized a
# group's input only when its first matrix was: a SIGSEGV)
$w --out "$out/mixed.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 384 --untied --seed 4 \
   --tensor-type blk.0.attn_k.weight=q8_0 --tensor-type blk.1.attn_v.weight=q4_1 --tensor-type blk.0.ffn_up.weight=q4_0
# heads of 128 dimensions (Llama's and Qwen's; the others here have 16 to 64): the attention
# kernels' lanes and loops past 64 dimensions, on the CPU and in the CUDA backend's host twin
$w --out "$out/hd128_f32.gguf" --dim 256 --layers 2 --heads 2 --kv-heads 1 --ff 128 --vocab 384 --seed 5
$w --out "$out/broken_missing.gguf" --vocab 300 --drop blk.1.ffn_up.weight
$w --out "$out/broken_shape.gguf" --vocab 300 --ff 96 --bad-shape blk.0.ffn_gate.weight
$w --out "$out/ctx4.gguf" --vocab 300 --ctx 4 # a context shorter than minionsd's warm-up pass

# one teacher-forced sequence of 40 tokens for the logits references
$py -c "print(' '.join(str((i * 7919 + 11) % 384) for i in range(40)))" > "$out/tokens.txt"
for m in gqa_f32 untied_f32 f16 hd128_f32; do
  $py "$src/tools/ref_forward.py" "$out/$m.gguf" "$out/tokens.txt" "$out/$m.logits"
done
# quantized weights multiply 16-bit activations in the engine: the reference rounds them alike, and
# also gives the exact-activation logits the engine must stay near
for m in q8_0 q4_0 q4_1 mixed; do
  $py "$src/tools/ref_forward.py" "$out/$m.gguf" "$out/tokens.txt" "$out/$m.logits" --q16-activations
  $py "$src/tools/ref_forward.py" "$out/$m.gguf" "$out/tokens.txt" "$out/$m.f32act.logits"
done

# tokenizer references
$py "$src/tests/tokenizer_texts.py" > "$out/texts.jsonl"
for m in gqa_f32 untied_f32; do
  $py "$src/tools/ref_tokenize.py" "$out/$m.gguf" "$out/texts.jsonl" "$out/$m.tokens.jsonl"
done

# the bundled family: held-out text of every corpus, encoded by the training tool's encoder
if [ -f "$src/models/target.gguf" ]; then
  $py "$src/tools/train/corpora.py" "$out/corpora" >/dev/null
  $py -c "
import json, sys
for c in ('kjv', 'web', 'devil'):
    for u in json.load(open('$out/corpora/' + c + '.units.json')):
        print(json.dumps(u))
" > "$out/family.texts.jsonl"
  $py "$src/tools/ref_tokenize.py" "$src/models/target.gguf" "$out/family.texts.jsonl" "$out/family.tokens.jsonl"
fi

smol="$src/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$smol" ]; then
  $py "$src/tools/ref_tokenize.py" "$smol" "$out/texts.jsonl" "$out/smollm2.tokens.jsonl"
  $py "$src/tests/heldout_tokens.py" "$smol" 2048 > "$out/smollm2.heldout.txt"
  # the float64 reference takes ~10 minutes here: its output is committed (the model is
  # sha256-checked, the tokens are fixed); MINIONS_RECOMPUTE_REFERENCE=1 computes it again
  if [ "${MINIONS_RECOMPUTE_REFERENCE:-0}" = 1 ]; then
    $py "$src/tools/ref_forward.py" "$smol" "$out/smollm2.heldout.txt" - --top2 "$out/smollm2.top2"
  else
    cp "$src/tests/fixtures/smollm2.top2" "$out/smollm2.top2"
  fi
  for t in f16 f32; do
    $py "$src/tools/gguf-dequant.py" "$smol" --type $t --out "$out/smollm2.$t.gguf"
  done
else
  rm -f "$out/smollm2.tokens.jsonl" "$out/smollm2.heldout.txt" "$out/smollm2.top2" "$out/smollm2.f16.gguf" \
    "$out/smollm2.f32.gguf"
fi
