#!/bin/sh
# cli.sh - black-box checks of minions-generate, minions-bench-decode and -matmul, minionsd's
# start-up and the clients' (minions-cli, minions-bench, minions-soak) refusals and failures, on a
# fixture model.
# Prints "cli: N passed, N failed"; exits non-zero on any failure.
set -u
bin=${MINIONS_BIN_DIR:-.}
data=${MINIONS_TEST_DATA:-tests/data}
model=$data/gqa_f32.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() { # description, then a command whose success means pass
  desc=$1
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $desc"; fi
}
usage_error() { # what is run, then the command: it must exit 2
  what=$1
  shift
  "$@" >/dev/null 2>&1
  check "$what is a usage error (exit 2)" test $? -eq 2
}

gen() { "$bin/minions-generate" --model "$model" --threads 2 "$@"; }

gen --prompt "This License applies" --max-tokens 24 >"$tmp/a" 2>"$tmp/a.err"
check "greedy generation succeeds" test $? -eq 0
gen --prompt "This License applies" --max-tokens 24 --threads 1 >"$tmp/b" 2>/dev/null
check "greedy output is deterministic across runs and thread counts" cmp -s "$tmp/a" "$tmp/b"
check "greedy output is not empty" test -s "$tmp/a"
check "stats go to stderr" grep -q "generated 24 tokens" "$tmp/a.err"
# issue #9, defect 11: without a GPU nothing is said about CUDA at the default log level (the
# backend that runs is an info line; why not CUDA, a debug one)
check "no CUDA warning at the default log level" sh -c "! grep -qi 'cuda\|gpu' '$tmp/a.err'"
printf 'This License applies' >"$tmp/prompt"
gen --prompt-file "$tmp/prompt" --max-tokens 24 >"$tmp/c" 2>/dev/null
check "--prompt-file gives the same text" cmp -s "$tmp/a" "$tmp/c"
gen --prompt "Hello" --max-tokens 24 --temperature 0.9 --top-p 0.9 --seed 7 >"$tmp/s1" 2>/dev/null
gen --prompt "Hello" --max-tokens 24 --temperature 0.9 --top-p 0.9 --seed 7 >"$tmp/s2" 2>/dev/null
check "sampling with a seed is reproducible" cmp -s "$tmp/s1" "$tmp/s2"
# The kernels are picked at run time (src/cpu/kernels.h). MINIONS_CPU=generic runs the plain-C set
# here, and on an emulated CPU without AVX (qemu-user, -cpu Nehalem) the binary picks it itself:
# both give this machine's text, on float and on 4-bit weights.
check "the stats name the CPU kernels" grep -q "CPU kernels [a-z]" "$tmp/a.err"
MINIONS_CPU=generic gen --prompt "This License applies" --max-tokens 24 >"$tmp/g" 2>"$tmp/g.err"
check "MINIONS_CPU=generic runs the generic kernels" grep -q "CPU kernels generic" "$tmp/g.err"
check "... and gives the same greedy text" cmp -s "$tmp/a" "$tmp/g"
MINIONS_CPU=sparc gen --prompt "This License applies" --max-tokens 4 >/dev/null 2>"$tmp/k.err"
check "an unknown MINIONS_CPU is named in a warning, and the run goes on" \
  sh -c "grep -q 'MINIONS_CPU=sparc' '$tmp/k.err' && grep -q 'generated 4 tokens' '$tmp/k.err'"
if ldd "$bin/minions-generate" 2>/dev/null | grep -q 'libasan\|libtsan'; then
  # ASan's shadow memory is not mapped under qemu-user (the process is killed): the normal build
  # runs these
  echo "cli: sanitizer build: the run without AVX is left to the normal build"
elif [ "$(uname -m)" = x86_64 ] && command -v qemu-x86_64 >/dev/null 2>&1; then
  for m in gqa_f32 q4_1; do
    "$bin/minions-generate" --model "$data/$m.gguf" --threads 2 --prompt "This License applies" --max-tokens 24 \
      >"$tmp/n_$m" 2>/dev/null
    qemu-x86_64 -cpu Nehalem "$bin/minions-generate" --model "$data/$m.gguf" --threads 2 \
      --prompt "This License applies" --max-tokens 24 >"$tmp/q_$m" 2>"$tmp/q_$m.err"
    check "$m on a CPU without AVX: generic kernels" grep -q "CPU kernels generic" "$tmp/q_$m.err"
    check "... the same greedy text as this CPU's" cmp -s "$tmp/n_$m" "$tmp/q_$m"
  done
else
  echo "cli: no qemu-x86_64 (scripts/install-deps.sh installs qemu-user): the run without AVX is skipped"
fi
"$bin/minions-generate" --model /nonexistent.gguf --prompt x >/dev/null 2>"$tmp/e1"
check "a missing model fails with exit 1" test $? -eq 1
check "... and names the file" grep -q "/nonexistent.gguf" "$tmp/e1"
"$bin/minions-generate" --model "$data/broken_missing.gguf" --prompt x >/dev/null 2>"$tmp/e2"
check "a broken model names the missing tensor" grep -q "blk.1.ffn_up.weight" "$tmp/e2"
gen --prompt x --max-tokens 0 >/dev/null 2>&1
check "--max-tokens 0 is a usage error (exit 2)" test $? -eq 2
gen --prompt x --top-p 1.5 >/dev/null 2>&1
check "--top-p out of range is a usage error (exit 2)" test $? -eq 2
gen --prompt x --kv-type f8 >/dev/null 2>&1
check "--kv-type other than f32 or f16 is a usage error (exit 2)" test $? -eq 2
gen --prompt x --max-tokens 1.5 >/dev/null 2>&1
check "a fractional --max-tokens is a usage error (exit 2)" test $? -eq 2
gen --prompt x --seed 18014398509481984 >/dev/null 2>&1
check "a seed past 2^53, as the server's, is a usage error (exit 2)" test $? -eq 2
gen --prompt x words left over >/dev/null 2>&1
check "arguments left over are a usage error (exit 2)" test $? -eq 2
gen --prompt x --prompt-file "$tmp/prompt" >/dev/null 2>&1
check "--prompt and --prompt-file together are a usage error (exit 2)" test $? -eq 2
gen --prompt-file "$tmp" >/dev/null 2>"$tmp/dir.err"
check "a --prompt-file that cannot be read fails with exit 1" test $? -eq 1
check "... and says why" grep -q "Is a directory" "$tmp/dir.err"
gen --prompt "This License applies" --max-tokens 24 --kv-type f16 >"$tmp/h" 2>/dev/null
check "--kv-type f16 generates" test -s "$tmp/h"
"$bin/minions-bench-decode" --model "$model" --threads 2 --prompt-tokens 16 --ctx-tokens 4 --gen-tokens 4 \
  --batches 1,3 >"$tmp/bench" 2>/dev/null
check "the decode benchmark runs" test $? -eq 0
check "... and reports prefill and both batch sizes" sh -c "grep -q prefill '$tmp/bench' && grep -q 'batch  3' '$tmp/bench'"
"$bin/minions-bench-decode" --model "$model" --threads 2 --ctx-tokens 4 --verify-curve --rounds 2 --batches 1 \
  >"$tmp/curve" 2>/dev/null
check "the verify curve runs" test $? -eq 0
check "... with every k and the cores' round trip" sh -c "grep -q 'seqs  1 k 8' '$tmp/curve' && grep -q '^cores: ' '$tmp/curve'"
# malformed numbers and lists are usage errors, found before the model loads (a list strtol cannot
# step through once spun for ever)
for v in x 1:4 1,,4; do
  usage_error "minions-bench-decode --batches $v" timeout 10 "$bin/minions-bench-decode" --model "$model" --batches "$v"
done
usage_error "minions-bench-decode --threads abc" "$bin/minions-bench-decode" --model "$model" --threads abc
# minions-bench-matmul: every weight type's product (the quantized ones through their repacked
# weights and 16-bit activations), and its options checked whole
for ty in f32 f16 q8_0 q4_0 q4_1; do
  "$bin/minions-bench-matmul" --type $ty --rows 40 --cols 64 --tokens 1,3 --repeat 2 >"$tmp/mm" 2>&1
  rc=$?
  check "minions-bench-matmul --type $ty times T = 1 and 3, and exits 0" \
    sh -c "test $rc -eq 0 && test \$(grep -c '^$ty .* GFLOP/s' '$tmp/mm') -eq 2"
done
"$bin/minions-bench-matmul" --probe 2 >"$tmp/probe" 2>&1
rc=$?
check "minions-bench-matmul --probe counts each kernel set's answers, and exits 0" \
  sh -c "test $rc -eq 0 && test \$(grep -c 'preferred in [0-2] of 2 probes\|no probe here' '$tmp/probe') -eq 3"
"$bin/minions-bench-matmul" --help >"$tmp/mmhelp" 2>&1
rc=$?
check "minions-bench-matmul --help prints its usage and exits 0" \
  sh -c "test $rc -eq 0 && grep -q -- '--probe N' '$tmp/mmhelp'"
for a in "--type q5_0" "--tokens 4x" "--tokens 1,,4" "--type q8_0 --cols 48" "--rows 0" "--probe 0"; do
  usage_error "minions-bench-matmul $a" "$bin/minions-bench-matmul" $a
done
usage_error "minions-bench-decode --temperature -1" "$bin/minions-bench-decode" --model "$model" --temperature -1
if [ -w /dev/full ]; then
  gen --prompt "This License applies" --max-tokens 4 >/dev/full 2>"$tmp/full.err"
  check "minions-generate: a stdout that cannot be written fails with exit 1" test $? -eq 1
  check "... and says why" grep -q "cannot write" "$tmp/full.err"
fi

# minionsd's start-up: refusals with a message and exit 2, and a model with a context of 4 tokens
d() { "$bin/minionsd" --port 0 --admin none --threads 2 "$@"; }
head -c 600 /dev/zero | tr '\0' k >"$tmp/longkey"
d --model "$model" --http 127.0.0.1:0 --api-key-file "$tmp/longkey" >/dev/null 2>"$tmp/d1.err"
check "minionsd: an API key longer than 511 bytes is refused (exit 2)" test $? -eq 2
check "... saying so" grep -q "longer than 511 bytes" "$tmp/d1.err"
d --model "$model" --kv-mib 1048576 >/dev/null 2>"$tmp/d2.err"
check "minionsd: a --kv-mib of more than 2^24 blocks is refused" test $? -eq 1
check "... saying so" grep -q "more than 16777216" "$tmp/d2.err"
d --model "$model" --kv-mib 4 --kv-blocks 64 >/dev/null 2>"$tmp/d5.err"
check "minionsd: --kv-mib beside --kv-blocks is refused (exit 2)" test $? -eq 2
check "... saying so" grep -q "give one" "$tmp/d5.err"
d --model "$model" --events ipc://"$tmp/ev" >/dev/null 2>"$tmp/d6.err"
check "minionsd: --events without a drafter is refused (exit 2)" test $? -eq 2
check "... saying so" grep -q "no --draft" "$tmp/d6.err"
# a server no client could reach, and a key that guards nothing, are usage errors
"$bin/minionsd" --port -1 --admin none --threads 2 --model "$model" >/dev/null 2>"$tmp/d7.err"
check "minionsd: --port -1 without --unix or --http is refused (exit 2)" test $? -eq 2
check "... saying so" grep -q "no client could reach" "$tmp/d7.err"
d --model "$model" --api-key k >/dev/null 2>"$tmp/d8.err"
check "minionsd: --api-key without --http is refused (exit 2)" test $? -eq 2
check "... saying so" grep -q "there is no --http" "$tmp/d8.err"
d --model "$model" --threads 0 >/dev/null 2>"$tmp/d9.err"
check "minionsd: a bad value names its option" grep -q "bad value '0' for --threads" "$tmp/d9.err"
d --model "$model" --unix '' >/dev/null 2>"$tmp/d11.err"
check "minionsd: an empty --unix path is a usage error (exit 2), before the model loads" test $? -eq 2
check "... saying so" grep -q "socket path is empty" "$tmp/d11.err"
d --model "$model" --http ::1 >/dev/null 2>"$tmp/d10.err"
check "minionsd: an IPv6 --http host without brackets is a usage error (exit 2)" test $? -eq 2
check "... naming --http" grep -q "for --http" "$tmp/d10.err"
"$bin/minionsd" --port 0 --admin none --threads 2 --model "$data/ctx4.gguf" >"$tmp/d3.out" 2>"$tmp/d3.err" &
dpid=$!
for _ in $(seq 100); do grep -q listening "$tmp/d3.out" 2>/dev/null && break; sleep 0.1; done
check "minionsd serves a model whose context is 4 tokens" grep -q listening "$tmp/d3.out"
kill -TERM $dpid 2>/dev/null
wait $dpid
check "... and drains to exit 0" test $? -eq 0
"$bin/minions-generate" --model "$data/ctx4.gguf" --prompt "ab" --max-tokens 8 >/dev/null 2>"$tmp/g4.err"
check "minions-generate fills a context of 4 tokens and stops" grep -q "finish: length" "$tmp/g4.err"

# the clients: refusals before any connection, then against a server on a Unix socket
soak() { "$bin/minions-soak" --unix "$tmp/none" --admin "ipc://$tmp/none" "$@"; }
usage_error "minions-soak --requests 1e4" soak --requests 1e4
usage_error "minions-soak --clients abc" soak --clients abc
usage_error "minions-soak --stall x" soak --stall x
usage_error "minions-soak --seed -1" soak --seed -1
"$bin/minions-bench" --out "$tmp/missing/dir/out.jsonl" --addr "$tmp/none" >/dev/null 2>"$tmp/b1.err"
check "minions-bench: an --out that cannot be opened is refused before the run (exit 2)" test $? -eq 2
check "... saying why" grep -q "No such file" "$tmp/b1.err"
usage_error "minions-cli: a prompt that is not UTF-8" "$bin/minions-cli" --unix "$tmp/none" "$(printf 'bad \377')"
usage_error "minions-cli: a --stop that is not UTF-8" "$bin/minions-cli" --unix "$tmp/none" --stop "$(printf '\377')" x
"$bin/minionsd" --port -1 --unix "$tmp/sock" --admin "ipc://$tmp/admin" --threads 2 --model "$model" \
  >"$tmp/d4.out" 2>"$tmp/d4.err" &
dpid=$!
for _ in $(seq 100); do grep -q listening "$tmp/d4.out" 2>/dev/null && break; sleep 0.1; done
"$bin/minions-cli" --admin "ipc://$tmp/admin" '{"cmd":"stats"}' >/dev/null 2>&1
check "minions-cli --admin: an ok reply exits 0" test $? -eq 0
"$bin/minions-cli" --admin "ipc://$tmp/admin" '{"cmd":"bogus"}' >"$tmp/a1.out" 2>&1
check "minions-cli --admin: a reply whose ok is false exits 1" test $? -eq 1
check "... and is printed" grep -q '"ok":false' "$tmp/a1.out"
if [ -w /dev/full ]; then
  "$bin/minions-cli" --unix "$tmp/sock" -n 4 "This License applies" >/dev/full 2>/dev/null
  check "minions-cli: a stdout that cannot be written fails with exit 1" test $? -eq 1
fi
"$bin/minions-bench" --addr "$tmp/sock" --prompts "${MINIONS_SRCDIR:-.}/prompts/kjv.jsonl" --requests 3 --clients 2 \
  --max-tokens 4 --out "$tmp/b2.jsonl" >"$tmp/b2.out" 2>/dev/null
check "minions-bench runs against the server (exit 0)" test $? -eq 0
check "... every client to its end, a record each request" \
  sh -c "grep -q '\"clients_ended_early\":0' '$tmp/b2.out' && test \$(wc -l <'$tmp/b2.jsonl') -eq 3"
# a server that goes silent (stopped; its socket still takes the request): a timeout, not a hang
kill -STOP $dpid
timeout 20 "$bin/minions-cli" --unix "$tmp/sock" --timeout 0.5 -n 4 "This License applies" >/dev/null 2>"$tmp/t1.err"
check "minions-cli --timeout: a silent server fails with exit 1" test $? -eq 1
check "... saying it timed out" grep -q "timed out" "$tmp/t1.err"
kill -CONT $dpid
kill -TERM $dpid 2>/dev/null
wait $dpid

echo "cli: $passed passed, $failed failed"
test "$failed" -eq 0
