#!/bin/sh
# gpu-bundle.sh: pack what a lent GPU machine needs to check the CUDA backend in one short run
# (issue #13). Such a machine gets a copy of the working tree but may lack this project's Debian
# packages and reaches no registry, so the bundle carries the built programs, the shared
# libraries they need beyond libc and CUDA's own, and the test fixtures:
#   gpu-bundle/bin   tests/test_gpu, tests/test_kernels, tests/test_forward, minions-generate,
#                    minions-bench-decode, minionsd, minions-cli
#   gpu-bundle/lib   their non-system libraries (ldd), found first through LD_LIBRARY_PATH
#   gpu-bundle/data  the fixtures test_gpu reads
#   gpu-bundle/run.sh, what to run there: `sh gpu-bundle/run.sh` (results also under $OUT)
# Run after `make -C build all tests/test_gpu tests/test_kernels tests/test_forward`; the device tool
# then carries gpu-bundle.
# run.sh, in this order, as far as the time allows: the CPU kernel sets on that machine's CPU
# (seconds; such hosts usually have AVX-512, which ours lack); the device tests of test_gpu (the CUDA
# backend's logits against the CPU's on every weight type and the bundled target); greedy text
# of minions-generate on the CPU and on CUDA, compared; minionsd on CUDA speculating (the n-gram
# drafter and draft-kjv voting) against minions-generate's greedy text on CUDA; compute-sanitizer
# over the device tests; decode speed on the CPU and on CUDA with and without graphs, one run.
set -eu
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
for b in build/tests/test_gpu build/tests/test_kernels build/tests/test_forward build/minions-generate \
  build/minions-bench-decode build/minionsd build/minions-cli; do
  [ -x "$b" ] || { echo "gpu-bundle: $b not built (make -C build all tests/test_gpu tests/test_kernels" \
    "tests/test_forward)" >&2; exit 2; }
  cp "$b" "$out/bin/"
done
# Stripped: the device tool carries at most 64 MiB with the working tree.
strip --strip-unneeded "$out"/bin/*
for f in gqa_f32.gguf untied_f32.gguf f16.gguf q8_0.gguf q4_0.gguf q4_1.gguf tokens.txt; do
  cp "build/tests/data/$f" "$out/data/"
done
ldd "$out"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda/*|*/libc.so.*|*/libm.so.*|*/libpthread.so.*|*/libdl.so.*|*/librt.so.*|*/ld-linux*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cat >"$out/run.sh" <<'EOF'
#!/bin/sh
# run.sh (made by tools/gpu-bundle.sh): the CUDA backend's checks on a GPU machine.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
# Every step's files go to results/; the device tool brings back at most 8 files, so $OUT gets
# run.log (this script's output, through the caller's tee) and results.tar.gz, refreshed after
# each step so that a run cut short still returns what it did.
res=$here/results
mkdir -p "$res"
t0=$(date +%s)
step() {
  [ -n "${OUT:-}" ] && tar -czf "$OUT/results.tar.gz" -C "$here" results
  echo "== [$(( $(date +%s) - t0 )) s] $*"
}
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MINIONS_TEST_DATA="$here/data" MINIONS_SRCDIR="$root" CRITERION_JOBS=1
step device; nvidia-smi -L 2>&1 | tee "$res/device.txt"
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1
sed -n 's/^PRETTY_NAME=//p' /etc/os-release; ldd --version 2>&1 | head -n 1
ldd "$here/bin/test_gpu" | grep 'not found' # a library this bundle lacks there
step "CPU kernel sets (src/cpu/kernels.h) on this host's CPU, against the generic C set"
grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | tee "$res/cpu.txt"; echo
timeout 120 "$here/bin/test_kernels" --verbose 2>&1 | tee "$res/test_kernels.txt" | grep -E 'not run|Synthesis|FAIL|differs'
timeout 120 "$here/bin/test_forward" --verbose --filter 'forward/kernel_sets*' 2>&1 | tee "$res/test_forward.txt" |
  grep -E 'not run|Synthesis|FAIL|differs'
step "test_gpu (device tests: CUDA logits against the CPU's)"
timeout 150 "$here/bin/test_gpu" --verbose 2>&1 | tee "$res/test_gpu.txt" | grep -E 'gpu_device|Synthesis|FAIL|differs|failed'
step "greedy text, cpu against cuda (48 tokens, 4 prompts)"
for p in "And God said" "The devil is" "In the beginning" "A dictionary defines"; do
  a=$(timeout 30 "$here/bin/minions-generate" --model "$root/models/target.gguf" --prompt "$p" -n 48 --backend cpu 2>/dev/null)
  b=$(timeout 30 "$here/bin/minions-generate" --model "$root/models/target.gguf" --prompt "$p" -n 48 --backend cuda \
    --log-level info 2>"$res/cuda.err")
  grep -h 'pass graphs' "$res/cuda.err"
  if [ "$a" = "$b" ]; then :; else printf 'differs: %s\ncpu:  %s\ncuda: %s\n' "$p" "$a" "$b"; cat "$res/cuda.err"; fi
done >"$res/greedy.txt" 2>&1
cat "$res/greedy.txt"; echo "greedy: $(( 4 - $(grep -c '^differs:' "$res/greedy.txt") )) of 4 identical"
step "speculative greedy on cuda (minionsd, ngram + draft-kjv) against plain greedy on cuda"
"$here/bin/minionsd" --model "$root/models/target.gguf" --backend cuda --draft ngram \
  --draft "$root/models/draft-kjv.gguf" --port 0 --admin none >"$res/minionsd.out" 2>"$res/minionsd.err" &
pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/^minionsd: listening tcp \([0-9.]*:[0-9]*\).*/\1/p' "$res/minionsd.out")
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -n "$addr" ]; then
  for p in "And God said" "The devil is" "In the beginning" "A dictionary defines"; do
    a=$(timeout 30 "$here/bin/minions-generate" --model "$root/models/target.gguf" --prompt "$p" -n 48 --backend cuda 2>/dev/null)
    b=$(timeout 60 "$here/bin/minions-cli" -a "$addr" -n 48 --no-stream "$p" 2>>"$res/cli.err")
    if [ "$a" = "$b" ]; then echo "same: $p"; else printf 'differs: %s\nplain: %s\nspec:  %s\n' "$p" "$a" "$b"; fi
  done | tee "$res/spec.txt"
  kill -TERM "$pid"; wait "$pid"; echo "minionsd exit $?"
else
  echo "minionsd did not start:"; cat "$res/minionsd.err"; kill "$pid" 2>/dev/null
fi
sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$sanitizer" ]; then
  step "compute-sanitizer over the device tests"
  timeout 120 "$sanitizer" --error-exitcode 9 "$here/bin/test_gpu" --filter 'gpu_device/*' -j1 >"$res/sanitizer.txt" 2>&1
  echo "compute-sanitizer exit $?"; tail -n 5 "$res/sanitizer.txt"
fi
step "decode speed: cpu, cuda with graphs, cuda with plain launches, same machine"
for k in cpu cuda cuda-plain; do
  MINIONS_CUDA_GRAPHS=$([ "$k" = cuda-plain ] && echo 0 || echo 1) timeout 60 "$here/bin/minions-bench-decode" \
    --model "$root/models/target.gguf" --backend "${k%-plain}" --batches 1,4,16 --prompt-tokens 64 \
    --gen-tokens 32 2>&1 | tee "$res/bench-$k.txt" | tail -n 5
done
step done
EOF
chmod +x "$out/run.sh"
du -sh "$out"
