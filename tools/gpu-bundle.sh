#!/bin/sh
# gpu-bundle.sh: pack what a lent GPU machine needs to check the CUDA backend in one short run
# (issue #13). Such a machine gets a copy of the working tree but may lack this project's Debian
# packages and reaches no registry, so the bundle carries the built programs, the shared
# libraries they need beyond libc and CUDA's own, and the test fixtures:
#   gpu-bundle/bin   the programs and the device-facing test suites (test_gpu, the kernel tests, the
#                    server suites), stripped (the device tool carries 64 MiB with the tree)
#   gpu-bundle/lib   their non-system libraries (ldd), found first through LD_LIBRARY_PATH
#   gpu-bundle/data  the fixtures the tests read
#   gpu-bundle/run.sh, what to run there: `sh gpu-bundle/run.sh 2>&1 | tee $OUT/run.log`
# Run after `make -C build all check TESTS=` (every test program built). The device tool then
# carries gpu-bundle (as a tar.xz: 7 MB); move models/smollm2-draft*.gguf (31 MB) out of the tree for
# that call (the tree and what it carries must fit 64 MiB together). With LLAMA_BIN the llama.cpp
# programs do not fit beside them (static, 45 MB as one xz even for all four): carry them in two
# halves over two calls, as docs/gpu-runs/README.md says. tools/ggufw.py writes the SmolLM2-shaped
# models there (their F16 file is 270 MB: too big to carry) with the numpy and regex of that
# machine's python3.
# run.sh, in this order, as far as its time budget allows (MINIONS_GPU_BUDGET seconds, 420 by
# default; every step has its own limit too): the CPU kernel sets on that machine's CPU (such hosts
# usually have AVX-512, which ours lack); test_gpu's device tests (the CUDA backend's logits against
# the CPU's, batch invariance); greedy text on the CPU and on the default backend compared;
# minionsd on CUDA speculating against plain greedy on CUDA; compute-sanitizer over the device
# tests; decode speed of the bundled target on the CPU and on CUDA with and without graphs; this
# build against OLD_BIN's (ab); plain launches, kernels launched as programmatic dependents, that
# with mn_k_proj's rows and inputs staged in shared memory, and with mn_k_proj_wide's too (stage);
# the host CPU's AVX2 and AVX-512 kernel sets on the CPU backend (cpusets); the projections over
# many tokens of quantized weights against the ones for few (wide: decode and verification passes,
# alternating); sampled decoding with the draws on the device against rows drawn on the host
# (draw); each kernel's time in a decode step (ncu); SmolLM2-shaped F16 and
# Q4_1 models at 1/4/16/64 sequences; a verification pass of k tokens
# against a decode step; each kernel's share of a pass (MINIONS_CUDA_PROFILE); the server suites,
# whose minionsd and minions-generate take CUDA there by default; the draft models on CUDA or on the
# CPU beside a CUDA target; speculative against plain decoding on CUDA (tools/bench-spec.py).
# With LLAMA_BIN set when packing (a build/bin of llama.cpp made with CUDA, e.g. here: its 190 nvcc
# compiles take about an hour on two cores and no device time), those programs are carried and run
# beside minions (llamacpp, llamacpp_spec); with LLAMA_SRC instead, llama.cpp is built there (minutes
# of device time). With OLD_BIN (a build/ of an older commit), that build's minions-bench-decode runs
# against this one's, alternating (ab). MINIONS_GPU_STEPS=name,name runs only those steps (kernels
# test_gpu greedy spec sanitizer bench ab stage cpusets wide draw ncu smollm2 verify profile suites drafts
# pipeline llamacpp llamacpp_spec bench_spec).
set -eu
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
suites="test_server test_speculate test_http test_openai test_spec test_sockpath"
for b in minions-generate minions-bench-decode minions-bench minionsd minions-cli tests/test_gpu tests/test_kernels \
  tests/test_forward $(for t in $suites; do echo tests/$t; done); do
  [ -x "build/$b" ] || { echo "gpu-bundle: build/$b not built (make -C build all check TESTS=)" >&2; exit 2; }
  cp "build/$b" "$out/bin/"
done
if [ -n "${OLD_BIN:-}" ]; then
  cp "$OLD_BIN/minions-bench-decode" "$out/bin/minions-bench-decode.old"
fi
# Stripped: the device tool carries at most 64 MiB with the working tree.
strip --strip-unneeded "$out"/bin/*
if [ -n "${LLAMA_BIN:-}" ]; then
  mkdir -p "$out/llama-bin"
  for b in llama-bench llama-batched-bench llama-speculative llama-completion; do
    [ -x "$LLAMA_BIN/$b" ] && cp "$LLAMA_BIN/$b" "$out/llama-bin/"
  done
  strip --strip-unneeded "$out"/llama-bin/*
fi
for f in gqa_f32.gguf untied_f32.gguf f16.gguf q8_0.gguf q4_0.gguf q4_1.gguf tokens.txt; do
  cp "build/tests/data/$f" "$out/data/"
done
# llama.cpp's source, trimmed to what llama-bench and llama-batched-bench need with CUDA (about 5 MB),
# when LLAMA_SRC names a llama.cpp tree (e.g. vendor/llama.cpp of PyPI's llama-cpp-python sdist)
if [ -n "${LLAMA_SRC:-}" ]; then
  tools="batched-bench gguf-split imatrix llama-bench completion perplexity quantize tokenize tts mtmd \
    cvector-generator export-lora fit-params results"
  (cd "$LLAMA_SRC" && tar -czf - $(for d in vulkan sycl metal opencl cann hexagon webgpu openvino zdnn zendnn et \
    virtgpu; do echo "--exclude=ggml/src/ggml-$d"; done) CMakeLists.txt LICENSE cmake ggml src include common \
    vendor tools/CMakeLists.txt $(for t in $tools; do [ -d "tools/$t" ] && echo "tools/$t"; done)) \
    >"$out/llama-src.tar.gz"
fi
ldd "$out"/bin/* $( [ -d "$out/llama-bin" ] && echo "$out"/llama-bin/*) | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
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
budget=${MINIONS_GPU_BUDGET:-420}
# step NAME TITLE: a step begins (false when MINIONS_GPU_STEPS, a comma-separated list of names,
# leaves it out; NAME - always runs); the results so far are archived first
step() {
  [ -n "${OUT:-}" ] && tar -czf "$OUT/results.tar.gz" -C "$here" results
  case "$1,${MINIONS_GPU_STEPS:-}" in
    -,*|*,) ;;
    *) case ",$MINIONS_GPU_STEPS," in *",$1,"*) ;; *) return 1 ;; esac ;;
  esac
  shift
  echo "== [$(( $(date +%s) - t0 )) s] $*"
}
# lim N: the seconds a step may take: N, or what is left of the budget (0: skip it)
lim() {
  l=$(( budget - ($(date +%s) - t0) - 5 ))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -gt 0 ] && echo "$l" || echo 0
}
# run N CMD...: CMD under a limit of lim N seconds, or a line saying it was skipped
run() {
  l=$(lim "$1"); shift
  if [ "$l" -gt 0 ]; then timeout "$l" "$@"; else echo "skipped (budget): $*"; return 124; fi
}
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MINIONS_TEST_DATA="$here/data" MINIONS_SRCDIR="$root" MINIONS_BIN_DIR="$here/bin" CRITERION_JOBS=1
bin=$here/bin target=$root/models/target.gguf
prompts="And God said|The devil is|In the beginning|A dictionary defines"

step - device; nvidia-smi -L 2>&1 | tee "$res/device.txt"
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1
sed -n 's/^PRETTY_NAME=//p' /etc/os-release; ldd --version 2>&1 | head -n 1; nproc
ldd "$bin/test_gpu" | grep 'not found' # a library this bundle lacks there

# smol TYPE: a SmolLM2-shaped model in TYPE (576 wide, 30 layers, 9/3 heads, ff 1536, vocab 49152,
# random weights) written by tools/ggufw.py once; its path, or nothing when python3 lacks numpy
smol() {
  m=$here/smol-$1.gguf
  [ -f "$m" ] || run 60 python3 "$root/tools/ggufw.py" --out "$m" --dim 576 --layers 30 \
    --heads 9 --kv-heads 3 --ff 1536 --vocab 49152 --type "$1" --pre smollm --ctx 2048 --seed 5 >"$res/ggufw.txt" 2>&1 ||
    { rm -f "$m"; echo "ggufw.py failed on $1 (numpy and regex for python3?):" >&2; tail -n 3 "$res/ggufw.txt" >&2; }
  [ -f "$m" ] && echo "$m"
}

if step kernels "CPU kernel sets (src/cpu/kernels.h) on this host's CPU, against the generic C set"; then
grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | tee "$res/cpu.txt"; echo
run 120 "$bin/test_kernels" --verbose 2>&1 | tee "$res/test_kernels.txt" | grep -E 'not run|Synthesis|FAIL|differs'
run 120 "$bin/test_forward" --verbose --filter 'forward/kernel_sets*' 2>&1 | tee "$res/test_forward.txt" |
  grep -E 'not run|Synthesis|FAIL|differs'

fi

if step test_gpu "test_gpu (device tests: CUDA logits against the CPU's, batch invariance)"; then
export MINIONS_TEST_SMOL="$(smol q4_1):$(smol f16)" # the SmolLM2-shaped device test's files
run 240 "$bin/test_gpu" --verbose 2>&1 | tee "$res/test_gpu.txt" | grep -E 'gpu_device|device draw|Synthesis|FAIL|differs|failed'
echo "-- the device tests again with mn_k_proj_wide's copies (MINIONS_CUDA_STAGE=all, not the default)"
run 120 env MINIONS_CUDA_STAGE=all "$bin/test_gpu" --filter 'gpu_device/*' 2>&1 | tee "$res/test_gpu-stage-all.txt" |
  grep -E 'Synthesis|FAIL|differs|failed'

fi

if step greedy "greedy text, cpu against the default backend (48 tokens, 4 prompts)"; then
echo "$prompts" | tr '|' '\n' | while read -r p; do
  a=$(run 30 "$bin/minions-generate" --model "$target" --prompt "$p" -n 48 --backend cpu 2>/dev/null)
  b=$(run 30 "$bin/minions-generate" --model "$target" --prompt "$p" -n 48 --log-level info 2>"$res/cuda.err")
  grep -h 'backend\|pass graphs' "$res/cuda.err"
  if [ "$a" = "$b" ]; then :; else printf 'differs: %s\ncpu:  %s\ncuda: %s\n' "$p" "$a" "$b"; cat "$res/cuda.err"; fi
done >"$res/greedy.txt" 2>&1
cat "$res/greedy.txt"; echo "greedy: $(( 4 - $(grep -c '^differs:' "$res/greedy.txt") )) of 4 identical"

fi

if step spec "speculative greedy on cuda (minionsd, ngram + draft-kjv) against plain greedy on cuda"; then
"$bin/minionsd" --model "$target" --backend cuda --draft ngram --draft "$root/models/draft-kjv.gguf" --port 0 \
  --admin none >"$res/minionsd.out" 2>"$res/minionsd.err" &
pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/^minionsd: listening tcp \([0-9.]*:[0-9]*\).*/\1/p' "$res/minionsd.out")
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -n "$addr" ]; then
  echo "$prompts" | tr '|' '\n' | while read -r p; do
    a=$(run 30 "$bin/minions-generate" --model "$target" --prompt "$p" -n 48 --backend cuda 2>/dev/null)
    b=$(run 60 "$bin/minions-cli" -a "$addr" -n 48 --no-stream "$p" 2>>"$res/cli.err")
    if [ "$a" = "$b" ]; then echo "same: $p"; else printf 'differs: %s\nplain: %s\nspec:  %s\n' "$p" "$a" "$b"; fi
  done | tee "$res/spec.txt"
  kill -TERM "$pid"; wait "$pid"; echo "minionsd exit $?"
else
  echo "minionsd did not start:"; cat "$res/minionsd.err"; kill "$pid" 2>/dev/null
fi

fi

if step sanitizer "compute-sanitizer over the device tests"; then
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
  if [ -x "$sanitizer" ]; then
    run 120 "$sanitizer" --error-exitcode 9 "$bin/test_gpu" --filter 'gpu_device/*' -j1 >"$res/sanitizer.txt" 2>&1
    echo "compute-sanitizer exit $?"; tail -n 5 "$res/sanitizer.txt"
    echo "-- racecheck of the draw kernel's shared memory (its gathering and verdicts)"
    run 120 "$sanitizer" --tool racecheck --error-exitcode 9 "$bin/test_gpu" \
      --filter 'gpu_device/draws_on_vocabulary_rows' -j1 >"$res/racecheck.txt" 2>&1
    echo "racecheck exit $?"; tail -n 5 "$res/racecheck.txt"
  else echo "no compute-sanitizer here"; fi

fi

if step bench "decode speed of the bundled target: cpu, cuda with graphs, cuda with plain launches, same machine"; then
for k in cpu cuda cuda-plain; do
  run 60 env MINIONS_CUDA_GRAPHS=$([ "$k" = cuda-plain ] && echo 0 || echo 1) "$bin/minions-bench-decode" \
    --model "$target" --backend "${k%-plain}" --batches 1,4,16,64 --prompt-tokens 64 --gen-tokens 32 2>&1 |
    tee "$res/bench-$k.txt" | grep -E 'prefill|decode'
done

fi

# MINIONS_AB_BATCHES: the batch sizes (1,16 by default)
if step ab "this build's decode against OLD_BIN's, alternating, on cuda (bundled target, SmolLM2-shaped Q4_1 and F16)"; then
  if [ -x "$bin/minions-bench-decode.old" ]; then
    for m in "$target" "$(smol q4_1)" "$(smol f16)"; do
      [ -f "$m" ] || continue
      for r in 1 2 3; do
        for v in old new; do
          b=$bin/minions-bench-decode; [ "$v" = old ] && b=$b.old
          printf '%s %s round %s: ' "$(basename "$m" .gguf)" "$v" "$r"
          run 40 "$b" --model "$m" --backend cuda --batches "${MINIONS_AB_BATCHES:-1,16}" --prompt-tokens 64 \
            --gen-tokens 32 2>&1 |
            tee -a "$res/ab-$v.txt" |
            awk '/^prefill/ {printf "pp %s  ", $4} /^decode/ {printf "b%s %s (fwd %s)  ", $3, $7, $NF} END {print ""}'
        done
      done
    done
  else echo "no OLD_BIN build in this bundle"; fi
fi

# MINIONS_STAGE_MODELS: which models (target,q4_1,f16 by default). stage_env V: the environment of
# variant V of the stage step.
stage_env() {
  case $1 in
    none) echo "MINIONS_CUDA_PDL=0 MINIONS_CUDA_STAGE=0" ;; pdl) echo "MINIONS_CUDA_STAGE=0" ;;
    stage) echo "MINIONS_CUDA_PDL=1" ;; wide) echo "MINIONS_CUDA_STAGE=all" ;;
  esac
}
if step stage "a decode step's launches four ways, alternating: none (MINIONS_CUDA_PDL=0 MINIONS_CUDA_STAGE=0), pdl (programmatic dependent launches: MINIONS_CUDA_STAGE=0), stage (and mn_k_proj's rows and inputs copied into shared memory first: the default), wide (and mn_k_proj_wide's: MINIONS_CUDA_STAGE=all)"; then
  for m in $(echo "${MINIONS_STAGE_MODELS:-target,q4_1,f16}" | tr ',' ' '); do
    case $m in target) m=$target ;; *) m=$(smol "$m") ;; esac
    [ -f "$m" ] || continue
    for r in 1 2 3; do
      for v in none pdl stage wide; do
        e=$(stage_env "$v")
        printf '%s %s round %s: ' "$(basename "$m" .gguf)" "$v" "$r"
        run 60 env $e "$bin/minions-bench-decode" --model "$m" --backend cuda --batches 1,4,16,64 \
          --prompt-tokens 64 --gen-tokens 32 2>&1 | tee -a "$res/stage-$v.txt" |
          awk '/^prefill/ {printf "pp %s  ", $4} /^decode/ {printf "b%s %s (fwd %s)  ", $3, $7, $NF} END {print ""}'
      done
    done
  done
  for m in "$target" "$(smol q4_1)"; do
    [ -f "$m" ] || continue
    for v in none stage wide; do
      e=$(stage_env "$v")
      echo "-- verification passes, $(basename "$m" .gguf), $v"
      run 60 env $e "$bin/minions-bench-decode" --model "$m" --backend cuda --verify-curve \
        --batches 1,16 --rounds 3 2>&1 | tee "$res/verify-$v-$(basename "$m" .gguf).txt" | grep -E '^plain|^verify'
    done
  done
fi

if step cpusets "this host's CPU kernel sets on the CPU backend: MINIONS_CPU=avx2 against avx512, alternating (decode; verification passes of k tokens)"; then
  for r in 1 2; do
    for v in avx2 avx512; do
      for m in "$target" "$(smol q4_1)"; do
        [ -f "$m" ] || continue
        echo "-- round $r $v $(basename "$m")"
        run 60 env MINIONS_CPU=$v "$bin/minions-bench-decode" --model "$m" --backend cpu --batches 1,16 --prompt-tokens 64 \
          --gen-tokens 32 2>&1 | tee -a "$res/cpusets-$v.txt" | grep -E 'kernels|prefill|decode'
      done
    done
  done
  for r in 1 2; do
    for v in avx2 avx512; do
      echo "-- verification passes, round $r, $v, $(basename "$target")"
      run 60 env MINIONS_CPU=$v "$bin/minions-bench-decode" --model "$target" --backend cpu --verify-curve --batches 1,4 \
        --rounds 5 2>&1 | tee -a "$res/cpusets-verify-$v.txt" | grep -E '^plain|^verify'
    done
  done
fi

if step wide "projections over many tokens: mn_k_proj_wide for quantized weights (default) against mn_k_proj alone (MINIONS_CUDA_WIDE=0), alternating"; then
  for m in "$(smol q4_1)" "$(smol f16)" "$target"; do
    [ -f "$m" ] || continue
    for r in 1 2 3; do
      for v in 0 1; do
        printf '%s wide=%s round %s: ' "$(basename "$m" .gguf)" "$v" "$r"
        run 60 env MINIONS_CUDA_WIDE=$v "$bin/minions-bench-decode" --model "$m" --backend cuda --batches 1,4,16,64 \
          --prompt-tokens 64 --gen-tokens 32 2>&1 | tee -a "$res/wide-$v.txt" |
          awk '/^prefill/ {printf "pp %s  ", $4} /^decode/ {printf "b%s %s (fwd %s)  ", $3, $7, $NF} END {print ""}'
      done
    done
  done
  for v in 0 1; do
    echo "-- verification passes, smol-q4_1, wide=$v"
    run 60 env MINIONS_CUDA_WIDE=$v "$bin/minions-bench-decode" --model "$(smol q4_1)" --backend cuda --verify-curve \
      --batches 1,16 --rounds 3 2>&1 | tee "$res/verify-wide-$v.txt" | grep -E '^plain|^verify'
  done
fi

if step draw "sampled decoding on cuda: tokens drawn on the device against rows brought down and drawn on the host (--host-draw), alternating"; then
  for m in "$target" "$(smol q4_1)" "$(smol f16)"; do
    [ -f "$m" ] || continue
    for p in 0.9 1; do
      [ "$p" = 1 ] && [ "$m" != "$here/smol-q4_1.gguf" ] && continue
      for r in 1 2; do
        for v in device host; do
          h=; [ "$v" = host ] && h=--host-draw
          printf '%s top_p %s %s round %s: ' "$(basename "$m" .gguf)" "$p" "$v" "$r"
          run 60 "$bin/minions-bench-decode" --model "$m" --backend cuda --batches 1,4,16,64 --prompt-tokens 64 \
            --gen-tokens 32 --temperature 0.8 --top-p "$p" $h 2>&1 | tee -a "$res/draw-$v.txt" |
            awk '/^decode/ {printf "b%s %s (step %s fwd %s)  ", $3, $7, $(NF-3), $NF} END {print ""}'
        done
      done
    done
  done
  echo "-- each launch's time, smol-q4_1 at top_p 0.9 and 1 (MINIONS_CUDA_PROFILE=1)"
  for p in 0.9 1; do
    run 60 env MINIONS_CUDA_PROFILE=1 "$bin/minions-bench-decode" --model "$(smol q4_1)" --backend cuda --batches 1,16 \
      --prompt-tokens 64 --gen-tokens 32 --temperature 0.8 --top-p "$p" 2>&1 | tee "$res/profile-draw-$p.txt" |
      grep -E 'argmax|draw|logits|decode'
  done
fi

if step ncu "each kernel's time in a decode step (ncu, graph nodes profiled one by one; bundled target and SmolLM2-shaped Q4_1, 1 sequence)"; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  if [ -n "$ncu" ]; then
    for m in "$target" "$(smol q4_1)"; do
      [ -f "$m" ] || continue
      n=$(basename "$m" .gguf)
      # past the warm-up, the prompt and a few decode steps: one step's launches in order, then totals
      run 120 "$ncu" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum -k regex:mn_k_ \
        --print-units base --cache-control none --launch-skip 2000 --launch-count 300 --csv "$bin/minions-bench-decode" --model "$m" \
        --backend cuda --batches 1 --prompt-tokens 64 --gen-tokens 64 >"$res/ncu-$n.csv" 2>"$res/ncu-$n.err"
      echo "ncu exit $? ($n)"; grep -v '^==PROF==' "$res/ncu-$n.err" | tail -n 2
      awk -F'","' '$0 ~ /gpu__time_duration/ {k = $5 " " $9; v = $NF; gsub(/[",]/, "", v); t[k] += v; c[k]++; all += v
          if (++i <= 60) printf "%3d %-14s %-14s %8.2f us\n", i, $5, $9, v / 1000}
        END {for (k in t) printf "total %-30s %4d launches %8.2f us each\n", k, c[k], t[k] / c[k] / 1000
             printf "total all: %d launches %.1f us\n", i, all / 1000}' "$res/ncu-$n.csv"
    done
  else echo "no ncu here"; fi
fi

if step smollm2 "SmolLM2-shaped models (576 wide, 30 layers, 9/3 heads, ff 1536, vocab 49152, random weights)"; then
  for t in q4_1 f16; do
    m=$(smol "$t") || continue
    for k in cuda cpu; do
      b=1,4,16,64; [ "$k" = cpu ] && b=1,16
      echo "-- $t, $k"
      run 90 "$bin/minions-bench-decode" --model "$m" --backend "$k" --batches "$b" --prompt-tokens 64 \
        --gen-tokens 32 2>&1 | tee "$res/bench-smol-$t-$k.txt" | grep -E 'prefill|decode'
    done
  done
fi

if step verify "a verification pass of k = 1..8 tokens against a decode step on cuda (bench-decode --verify-curve)"; then
  for m in "$target" "$(smol q4_1)"; do
    [ -f "$m" ] || continue
    echo "-- $(basename "$m")"
    run 60 "$bin/minions-bench-decode" --model "$m" --backend cuda --verify-curve --batches 1,16 --rounds 3 2>&1 |
      tee "$res/verify-$(basename "$m" .gguf).txt" | grep -E '^plain|^verify'
  done
fi

if step profile "where a pass's time goes (MINIONS_CUDA_PROFILE=1: every step timed with events, graphs off; the prefill included)"; then
for m in "$target" "$here/smol-q4_1.gguf" "$here/smol-f16.gguf"; do
  [ -f "$m" ] || continue
  for b in 1 16; do
    echo "-- $(basename "$m"), batch $b"
    run 60 env MINIONS_CUDA_PROFILE=1 "$bin/minions-bench-decode" --model "$m" --backend cuda --batches "$b" \
      --prompt-tokens 64 --gen-tokens 32 2>&1 | tee "$res/profile-$(basename "$m" .gguf)-$b.txt" | grep -E 'profile|decode'
  done
done

fi

if step suites "server suites; minionsd and minions-generate take CUDA here by default"; then
for t in test_server test_speculate test_spec test_http test_openai test_sockpath; do
  run 150 "$bin/$t" -j8 >"$res/$t.txt" 2>&1
  echo "$t exit $?: $(grep Synthesis "$res/$t.txt")"; grep -E 'FAIL|CRASH' "$res/$t.txt" | head -n 5
done

fi

if step drafts "the draft models on cuda or on the cpu beside a cuda target (tools/bench-spec.py)"; then
  for d in cuda cpu; do
    echo "-- drafts on $d"
    run 120 python3 "$root/tools/bench-spec.py" --rounds 2 --tokens 64 --sets kjv --configs plain,draft-kjv,vote-global \
      --clients 1,16 --spec-length 4 --draft-backend "$d" >"$res/drafts-$d.txt" 2>&1
    grep -E '^###|^\| (plain|draft|vote)' "$res/drafts-$d.txt"
  done
fi

if step pipeline "the draft/verify pipeline on cuda: model drafts on their own worker and stream, off and on alternating (tools/bench-spec.py)"; then
  for r in 1 2; do
    for p in off on; do
      a=; [ "$p" = on ] && a=--server-arg=--pipeline
      echo "-- pipeline $p, round $r"
      run 60 python3 "$root/tools/bench-spec.py" --rounds 2 --tokens 64 --sets kjv --configs plain,draft-kjv,vote-global \
        --clients 1,16 --spec-length 4 --draft-backend cuda $a >"$res/pipeline-$p-$r.txt" 2>&1
      grep -E '^###|^\| (plain|draft|vote)' "$res/pipeline-$p-$r.txt"
    done
  done
fi

if step llamacpp "llama.cpp with CUDA beside minions on the same GPU (llama-bench, llama-batched-bench)"; then
  lb=
  if [ -x "$here/llama-bin/llama-batched-bench" ]; then
    lb=$here/llama-bin
  elif [ -f "$here/llama-src.tar.gz" ] && command -v cmake >/dev/null; then
    src=$here/llama
    mkdir -p "$src" && tar -xzf "$here/llama-src.tar.gz" -C "$src"
    gen="Unix Makefiles"; command -v ninja >/dev/null && gen=Ninja
    run 60 cmake -S "$src" -B "$src/build" -G "$gen" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_CCACHE=OFF \
      -DCMAKE_BUILD_TYPE=Release >"$res/llama-cmake.txt" 2>&1 &&
      run 480 cmake --build "$src/build" -j "$(nproc)" --target llama-bench llama-batched-bench \
        >"$res/llama-build.txt" 2>&1
    echo "llama.cpp configure and build exit $?"; tail -n 3 "$res/llama-build.txt" 2>/dev/null
    lb=$src/build/bin
  fi
  if [ -n "$lb" ]; then
    # llama-bench where it was carried too; MINIONS_LLAMA_ROUNDS rounds of the rest, alternating
    for m in "$target" "$(smol q4_1)" "$(smol f16)"; do
      [ -f "$m" ] || continue
      n=$(basename "$m" .gguf)
      echo "-- $n: llama-bench (pp64, tg32), llama-batched-bench (64 + 32 tokens, 1/4/16/64 sequences), minions"
      [ -x "$lb/llama-bench" ] &&
        run 90 "$lb/llama-bench" -m "$m" -ngl 99 -p 64 -n 32 -r 3 -o md 2>&1 | tee "$res/llama-bench-$n.txt" | grep '^|'
      for r in $(seq "${MINIONS_LLAMA_ROUNDS:-1}"); do
        run 120 "$lb/llama-batched-bench" -m "$m" -ngl 99 -c 8192 -npp 64 -ntg 32 -npl 1,4,16,64 2>&1 |
          tee -a "$res/llama-batched-$n.txt" | grep '^|'
        run 90 "$bin/minions-bench-decode" --model "$m" --backend cuda --batches 1,4,16,64 --prompt-tokens 64 \
          --gen-tokens 32 2>&1 | tee -a "$res/minions-$n.txt" | grep -E 'prefill|decode'
      done
    done
  else
    echo "no llama.cpp in this bundle (LLAMA_BIN, LLAMA_SRC) or no cmake here"
  fi
fi

if step llamacpp_spec "llama.cpp's speculative mode with CUDA against minions' on the bundled target (tools/bench-llamacpp-spec.py)"; then
  if [ -x "$here/llama-bin/llama-speculative" ]; then
    run 150 python3 "$root/tools/bench-llamacpp-spec.py" --llama "$here/llama-bin" --rounds 3 --gpu \
      >"$res/llamacpp-spec.txt" 2>&1
    echo "bench-llamacpp-spec exit $?"; grep -E '^\|' "$res/llamacpp-spec.txt"
  else echo "no llama-speculative in this bundle (LLAMA_BIN)"; fi
fi

if step bench_spec "speculative against plain decoding on cuda (tools/bench-spec.py)"; then
run 150 python3 "$root/tools/bench-spec.py" --rounds 3 --tokens 64 --sets kjv,web --configs plain,ngram \
  --clients 1,16 --spec-length 6 >"$res/bench-spec.txt" 2>&1
echo "bench-spec exit $?"; grep -E '^###|^\| (plain|ngram)' "$res/bench-spec.txt"
fi
step - done
EOF
chmod +x "$out/run.sh"
du -sh "$out"
