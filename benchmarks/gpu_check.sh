#!/usr/bin/env bash
# The GPU check: prepared runs of at most ten minutes each on a lent NVIDIA machine (an H200) with no network.
#
#     benchmarks/gpu_check.sh --prepare [--from SDIST_DIR]   # here, with PyPI: make the kit to carry
#     benchmarks/gpu_check.sh --dry-run                      # the plan, and every file and flag it uses
#     benchmarks/gpu_check.sh --stub-mmq GGML_CUDA_DIR       # what --prepare does to the MMQ instances
#     benchmarks/gpu_check.sh                                # on the GPU machine (log in $OUT/gpu_check.log)
#
# The kit (benchmarks/.peer/gpu, ignored by git; under 40 MB) holds a trimmed copy of the llama-cpp-python
# sdist (benchmarks/trim_llama_source.sh) and the wheels of swarm-panel's headless dependencies for
# CPython 3.12 on manylinux x86-64, less numpy (the machine's python3 has numpy, cmake and ninja).
#
# On the GPU machine it builds llama.cpp from the kit once, with CUDA for sm_90 only, as shared
# libraries: the Python package llama_cpp is the kit's sources with those libraries in llama_cpp/lib (what
# `pip wheel` would pack), and llama-server comes from the same build tree, so both run the same
# kernels. Once llama_cpp loads, it writes the 9B-shaped model (`swarm-panel demo-model --arch qwen35
# --shape 9b`, quantized to Q4_K_M by llama.cpp) while llama-server builds, then measures, each phase
# under a time limit taken from one budget:
#   (a) the decode step line t(B) at B = 1, 2, 4, 8, 16 (`swarm-panel bench --fit`);
#   (d) the limit: our engine in-process, decode only, against llama-batched-bench (built from the same
#       tree) at B = 8, 16, 32, with each step's time accounted for (`swarm-panel bench --limit`), sampling
#       on the backend, then (e) the same with sampling on the host;
#   (b) naive, shrinking and continuous batching on the seed's workload (8 agents, the article's lengths);
#   (c) swarm-panel serve against llama-server over HTTP (benchmarks/peer_servers.py): fixed lengths,
#       then (f) the swarm workloads of docs/benchmarks.md (hybrid-agents, past-lanes, harness-prefix),
#       then real multi-turn agents.
# A phase that fails is reported and the next one runs. On the H200 (2026-12-04) the CUDA build took 151 s
# with FlashAttention off and 5 of 22 MMQ kernels compiled, and the model 263 s: the build and the model
# writer run in sessions of their own, so when the budget runs out it exits 5 and the same command, given
# again at once on the still-warm machine, picks up where it stopped. Without nvidia-smi or nvcc it stops at once with exit status 3,
# before building anything.
#
# Settings (environment): GPU_CHECK_BUDGET (seconds for this call, default 570), GPU_CHECK_FA (off: ggml's
# FlashAttention kernels are not compiled; on: they are, about 6,000 core-seconds more), GPU_CHECK_KIT,
# GPU_CHECK_WORK (default /tmp/gpu-check), GPU_CHECK_PYTHON (default python3), GPU_CHECK_REQUESTS
# (requests per agent in (b)'s naive and shrinking, default 4) and GPU_CHECK_SEED_REQUESTS (continuous's,
# default the seed's 8), GPU_CHECK_SHAPE (default 9b),
# GPU_CHECK_CUDA_ARCH (default 90-real), GPU_CHECK_NVIDIA_SMI, GPU_CHECK_NVCC, and GPU_CHECK_REHEARSAL=1:
# every phase on a CPU build, on a machine without a GPU (it tests the script, not a GPU).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
KIT=${GPU_CHECK_KIT:-$repo/benchmarks/.peer/gpu}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
BUDGET=${GPU_CHECK_BUDGET:-570}
PY=${GPU_CHECK_PYTHON:-python3}
REQUESTS=${GPU_CHECK_REQUESTS:-4}
# Continuous runs the seed's own 8 requests per agent: with 4, the article's lengths add up differently per
# agent and the longest one's turns leave lanes empty that no schedule can fill (docs/gpu.md).
SEED_REQUESTS=${GPU_CHECK_SEED_REQUESTS:-8}
SHAPE=${GPU_CHECK_SHAPE:-9b}
CUDA_ARCH=${GPU_CHECK_CUDA_ARCH:-90-real}
# ggml's FlashAttention kernels are about half of ggml-cuda's compile (estimated here: ~6,000 of ~12,500
# core-seconds for sm_90); off, both servers run llama.cpp's plain attention, and the build fits the lease better.
FA=${GPU_CHECK_FA:-off}
# 1: a rehearsal on a machine without a GPU: the same phases on a CPU build (checks the script, not a GPU).
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
# The quantized types whose MMQ kernels the kit compiles: the 9B-shaped Q4_K_M's (q4_k, q6_k) and the common
# small ones. The other 17 instance files become stubs that abort if called: each real one is ~225 core-seconds
# of nvcc, about half of what is left of ggml-cuda's compile with FlashAttention off. "all" keeps every one.
MMQ_KEEP=${GPU_CHECK_MMQ_TYPES:-q4_0 q4_1 q8_0 q4_k q6_k}
KIT_LIMIT_MB=40
# The kit's wheels: swarm-panel's headless dependencies (serve, bench, demo-model, peer_servers.py) and
# llama-cpp-python's, resolved for the GPU machine's Python; numpy is left out (the machine has it).
KIT_PYTHON=3.12
KIT_REQUIREMENTS=(fastapi uvicorn pydantic pydantic-settings platformdirs gguf diskcache jinja2 httpx anyio
                  prometheus-client typing-extensions pytest pytest-timeout)

mode=run
from=""
stub_dir=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) mode=dry-run; shift ;;
        --prepare) mode=prepare; shift ;;
        --stub-mmq) [ $# -ge 2 ] || { usage >&2; exit 2; }; mode=stub-mmq; stub_dir="$2"; shift 2 ;;
        --from) [ $# -ge 2 ] || { usage >&2; exit 2; }; from="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

SRC=$KIT/src
BUILD=$WORK/build
MODEL=$WORK/qwen35-$SHAPE.gguf
SITE=$WORK/site
PYPKG=$WORK/py
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
# Seconds kept back at the end for the summary.
RESERVE=10
SUMMARY=()
FAILED=0
MODEL_NOTE=""
PHASE_END=0
UNFINISHED=0

say() { printf '%s\n' "$*"; }
elapsed() { echo $(($(date +%s) - T0)); }

# ---------------------------------------------------------------------------------------------------------
# The commands, shared by the run and the dry run.

cmake_configure_args() {
    printf '%s\n' -S "$SRC/vendor/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_OPENSSL=OFF
    if [ "$REHEARSAL" != 1 ]; then
        printf '%s\n' -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH" "-DGGML_CUDA_FA=${FA^^}" \
            -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_COMPRESSION_MODE=speed
    fi
    if command -v ninja >/dev/null 2>&1; then printf '%s\n' -G Ninja; fi
}

bench_line_args() {
    # The line alone: a short continuous run beside the sweep, at the seed workload's mean decode context.
    printf '%s\n' bench --engine llama --model "$MODEL" --n-gpu-layers -1 --fit --fit-widths 1,2,4,8,16 \
        --fit-context 320 --policy continuous --requests-per-agent 1
}

bench_limit_args() {  # on|off: sampling on the backend or the host
    printf '%s\n' bench --engine llama --model "$MODEL" --n-gpu-layers -1 --limit \
        --batched-bench "$BUILD/bin/llama-batched-bench" --limit-widths 8,16,32 --limit-prompt 128 \
        --limit-tokens 96 --limit-rounds 1 --backend-sampling "$1"
}

bench_policy_args() {  # POLICY [REQUESTS]
    printf '%s\n' bench --engine llama --model "$MODEL" --n-gpu-layers -1 --fit --fit-widths 1,2,4,8,16 \
        --policy "$1" --agents 8 --requests-per-agent "${2:-$REQUESTS}"
}

peer_common_args() {
    printf '%s\n' "$repo/benchmarks/peer_servers.py" --llama-server "$BUILD/bin/llama-server" --model "$MODEL" \
        --only swarm-panel --only llama-server --agents 8 --logs "$WORK/peer-logs" \
        --ours-arg=--n-gpu-layers=-1 --peer-arg=-ngl --peer-arg=999
}

peer_fixed_args() { peer_common_args; printf '%s\n' --requests 8 --rounds 2; }
peer_agents_args() { peer_common_args; printf '%s\n' --real-agents --turns 3 --reply-tokens 128 --rounds 1; }
peer_workload_args() {  # WORKLOAD: docs/benchmarks.md's swarm workloads, one round each, on the 9B shape
    printf '%s\n' "$repo/benchmarks/peer_servers.py" --llama-server "$BUILD/bin/llama-server" --model "$MODEL" \
        --only swarm-panel --only llama-server --logs "$WORK/peer-logs" --workload "$1" --rounds 1 \
        --round-limit 100 --ours-arg=--n-gpu-layers=-1 --peer-arg=-ngl --peer-arg=999
    # The shared head is 20k tokens: llama-server caps a slot at the trained context, which the rehearsal's
    # tiny qwen35 holds at 4,096 (the 9B shape's is 262,144), so the check names one that holds it.
    [ "$1" = harness-prefix ] && printf '%s\n' --peer-arg=--override-kv --peer-arg=qwen35.context_length=int:32768
    return 0
}

# shellcheck disable=SC2034  # `into` names the caller's array
lines() { local -n into=$1; shift; mapfile -t into < <("$@"); }

# ---------------------------------------------------------------------------------------------------------
# Phases: a header, a time limit from what is left of the budget, the elapsed seconds, and on to the next.

phase() {  # NAME CAP_SECONDS COMMAND... (a function, or `bounded` and a program)
    local name=$1 cap=$2; shift 2
    local left=$((DEADLINE - $(date +%s) - RESERVE))
    local limit=$((cap < left ? cap : left))
    say ""
    say "=== phase: $name  (limit ${limit} s, ${left} s of the budget left, at $(elapsed) s)"
    if [ "$limit" -lt 5 ]; then
        UNFINISHED=1
        say "=== $name: SKIPPED, the budget is spent"
        SUMMARY+=("$(printf '%-28s skipped (budget spent)' "$name")")
        FAILED=1
        return 124
    fi
    [ "$1" = bounded ] && say "+ ${*:2}"
    local start rc
    start=$(date +%s)
    PHASE_END=$((start + limit))
    "$@"
    rc=$?
    local took=$(($(date +%s) - start))
    local verdict=ok
    [ "$rc" -eq 0 ] || verdict="FAILED rc=$rc"
    [ "$rc" -eq 124 ] && verdict="TIMED OUT after ${limit} s"
    [ "$rc" -eq 124 ] && [ "$limit" -lt "$cap" ] && UNFINISHED=1
    say "=== $name: $verdict (${took} s; $(elapsed) s since the start)"
    SUMMARY+=("$(printf '%-28s %-30s %5d s' "$name" "$verdict" "$took")")
    [ "$rc" -eq 0 ] || FAILED=1
    return "$rc"
}

bounded() {  # COMMAND...: runs it until the current phase's end
    local left=$((PHASE_END - $(date +%s)))
    [ "$left" -gt 0 ] || return 124
    # SIGINT first: Python runs its finally blocks, so peer_servers.py stops the servers it started.
    timeout -s INT -k 20 "$left" "$@"
}

skip() {  # NAME REASON
    say ""
    say "=== phase: $1: SKIPPED ($2)"
    SUMMARY+=("$(printf '%-28s skipped (%s)' "$1" "$2")")
    FAILED=1
}

# ---------------------------------------------------------------------------------------------------------
# CUDA: the compiler, cuBLAS and the driver library, wherever this image keeps them. A toolkit assembled
# from pip packages has nvcc and the runtime in /usr/local/cuda but cuBLAS in Python's nvidia/cu13 (with
# only versioned names), and the driver's libcuda.so.1 sits in a mount of its own.

NVIDIA_SMI=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}
find_nvcc() {
    if [ -n "${GPU_CHECK_NVCC:-}" ]; then command -v "$GPU_CHECK_NVCC"; return; fi
    local c
    for c in "${CUDA_HOME:-}/bin/nvcc" "${CUDA_PATH:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc)"; do
        [ -n "$c" ] && [ -x "$c" ] && [ -f "$c" ] && { echo "$c"; return 0; }
    done
    return 1
}

CUDA_ROOT="" CUDA_EXTRA=() CUDA_LIBDIRS=() CUDA_NOTES=()
find_cuda_parts() {  # sets CUDA_ROOT, CUDA_EXTRA (cmake -D flags), CUDA_LIBDIRS (for LD_LIBRARY_PATH)
    local nvcc=$1 deep=${2:-1}
    CUDA_ROOT="" CUDA_EXTRA=() CUDA_LIBDIRS=() CUDA_NOTES=()
    local c
    for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(dirname "$(dirname "$(readlink -f "$nvcc")")")" /usr/local/cuda; do
        if [ -n "$c" ] && [ -f "$c/include/cuda_runtime.h" ] && [ -x "$c/bin/nvcc" ]; then CUDA_ROOT=$c; break; fi
    done
    [ -n "$CUDA_ROOT" ] || { CUDA_NOTES+=("no toolkit root (include/cuda_runtime.h beside bin/nvcc) found"); return 1; }
    CUDA_EXTRA+=("-DCMAKE_CUDA_COMPILER=$CUDA_ROOT/bin/nvcc" "-DCUDAToolkit_ROOT=$CUDA_ROOT")

    # cuBLAS: in the toolkit, else in a Python package (nvidia/cu13 or nvidia/cublas), else anywhere.
    local header="" lib=""
    if [ -f "$CUDA_ROOT/include/cublas_v2.h" ]; then
        header=$CUDA_ROOT/include/cublas_v2.h
    else
        header=$("$PY" - <<'EOF' 2>/dev/null
import glob, os, sys
for entry in sys.path:
    for pattern in ("nvidia/*/include/cublas_v2.h", "nvidia/cublas/include/cublas_v2.h"):
        for hit in sorted(glob.glob(os.path.join(entry or ".", pattern))):
            print(hit)
            sys.exit(0)
EOF
)
        if [ -z "$header" ] && [ "$deep" = 1 ]; then
            header=$(timeout 30 find /usr /opt -name cublas_v2.h -not -path '*/proc/*' 2>/dev/null | head -1)
        fi
    fi
    [ -n "$header" ] || { CUDA_NOTES+=("cublas_v2.h not found (toolkit, Python's nvidia packages, /usr, /opt)"); return 1; }
    local incdir libdir
    incdir=$(dirname "$header")
    CUDA_NOTES+=("cuBLAS headers: $incdir")
    if [ "$incdir" != "$CUDA_ROOT/include" ]; then
        # Only cuBLAS's headers: that folder may also hold another CUDA runtime's, which must not win.
        if [ "$mode" = run ]; then
            mkdir -p "$WORK/cublas-include" && ln -sf "$incdir"/cublas*.h "$WORK/cublas-include/"
        fi
        CUDA_EXTRA+=("-DCMAKE_CUDA_FLAGS=-I$WORK/cublas-include")
    fi
    for libdir in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$incdir/../lib" "$incdir/../lib64"; do
        lib=$(ls "$libdir"/libcublas.so "$libdir"/libcublas.so.[0-9]* 2>/dev/null | head -1)
        [ -n "$lib" ] && break
    done
    [ -n "$lib" ] || { CUDA_NOTES+=("libcublas.so not found beside $incdir"); return 1; }
    libdir=$(cd "$(dirname "$lib")" && pwd)
    lib=$libdir/$(basename "$lib")
    CUDA_NOTES+=("cuBLAS library: $lib")
    if [ ! -e "$libdir/libcublas.so" ]; then
        # FindCUDAToolkit looks for the unversioned names only; name the files instead.
        local lt
        lt=$(ls "$libdir"/libcublasLt.so.[0-9]* 2>/dev/null | head -1)
        CUDA_EXTRA+=("-DCUDA_cublas_LIBRARY=$lib" "-DCUDA_cublasLt_LIBRARY=$lt")
    fi
    CUDA_LIBDIRS+=("$libdir")

    # The driver library, for the virtual-memory pool; without it ggml-cuda builds with GGML_CUDA_NO_VMM.
    local driver=""
    for c in "$CUDA_ROOT/lib64/stubs/libcuda.so" "$CUDA_ROOT/lib64/libcuda.so" /usr/lib/x86_64-linux-gnu/libcuda.so; do
        [ -e "$c" ] && { driver=found; break; }
    done
    if [ -z "$driver" ]; then
        for c in $(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF}') /usr/local/nvidia/lib64/libcuda.so.1 \
                 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1; do
            [ -e "$c" ] && { driver=$c; break; }
        done
        if [ -n "$driver" ]; then
            CUDA_EXTRA+=("-DCUDA_cuda_driver_LIBRARY=$driver")
            CUDA_NOTES+=("driver library: $driver")
        else
            CUDA_EXTRA+=("-DGGML_CUDA_NO_VMM=ON")
            CUDA_NOTES+=("no libcuda.so found: building with GGML_CUDA_NO_VMM=ON (the legacy memory pool)")
        fi
    fi
    return 0
}

# ---------------------------------------------------------------------------------------------------------
# --prepare: here, with PyPI.

stub_mmq_instances() {  # GGML_CUDA_DIR: each MMQ instance not in MMQ_KEEP becomes a stub that aborts
    local dir=$1 file type kept=0 stubbed=0
    [ "$MMQ_KEEP" = all ] && return 0
    # The stub declares mul_mat_q_case itself (including mmq.cuh would instantiate nothing, but costs its
    # parse): it must match mmq.cuh's template exactly, or the library would miss the symbols at load time.
    if ! grep -q '^template <ggml_type type, ggml_prec prec_src1 = GGML_PREC_Q8>$' "$dir/mmq.cuh"; then
        say "gpu_check: mmq.cuh's mul_mat_q_case is not the one the stubs declare; every MMQ kernel is compiled"
        return 0
    fi
    for file in "$dir"/template-instances/mmq-instance-*.cu; do
        type=$(basename "$file" .cu)
        type=${type#mmq-instance-}
        if [[ " $MMQ_KEEP " == *" $type "* ]]; then kept=$((kept + 1)); continue; fi
        {
            echo "// A stub written by swarm-panel's benchmarks/gpu_check.sh --prepare: the model it times has no $type"
            echo "// tensor, and the real instance is ~225 core-seconds of nvcc. Called anyway, it aborts."
            echo '#include "../common.cuh"'
            echo ''
            echo 'struct mmq_args;'
            echo 'template <ggml_type type, ggml_prec prec_src1 = GGML_PREC_Q8>'
            echo 'void mul_mat_q_case(ggml_backend_cuda_context & ctx, const mmq_args & args, cudaStream_t stream);'
            sed -n -E -e 's/^DECL_MMQ_CASE\((GGML_TYPE_[A-Z0-9_]+)\);$/\1/p' \
                -e 's/^DECL_MMQ_CASE_W4A4\((GGML_TYPE_[A-Z0-9_]+)\);$/\1, GGML_PREC_Q4/p' "$file" | while read -r decl; do
                echo ''
                echo "template <> void mul_mat_q_case<$decl>(ggml_backend_cuda_context &, const mmq_args &, cudaStream_t) {"
                echo "    GGML_ABORT(\"no MMQ kernel for $type in this build (benchmarks/gpu_check.sh)\");"
                echo '}'
            done
        } >"$file.stub" && mv "$file.stub" "$file"
        stubbed=$((stubbed + 1))
    done
    say "MMQ kernels: $kept compiled ($MMQ_KEEP), $stubbed stubbed"
}

prepare() {
    local py
    py=$(command -v python)
    [ -n "$py" ] || py=$(command -v python3)
    mkdir -p "$KIT"
    rm -rf "$SRC" "$KIT/wheels"
    local trim=(bash "$here/trim_llama_source.sh" "$SRC")
    [ -n "$from" ] && trim+=(--from "$from")
    "${trim[@]}" || return 1
    stub_mmq_instances "$SRC/vendor/llama.cpp/ggml/src/ggml-cuda" || return 1
    local constraints
    constraints=$(mktemp)
    # The versions this checkout is tested with; pip resolves what they need for the GPU machine's Python.
    "$py" -m pip freeze --exclude-editable 2>/dev/null | grep -v -i -E '^(llama.cpp.python|swarm.panel)==|@' >"$constraints"
    "$py" -m pip download -q --only-binary=:all: --python-version "$KIT_PYTHON" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -c "$constraints" -d "$KIT/wheels" \
        "${KIT_REQUIREMENTS[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    local rc=$?
    rm -f "$constraints" "$KIT"/wheels/numpy-*.whl
    [ "$rc" -eq 0 ] || { say "gpu_check: pip download failed"; return 1; }
    {
        echo "python $KIT_PYTHON"
        echo "llama-cpp-python $(sed -n 's/^Version: //p' "$SRC/PKG-INFO" | head -1)"
        (cd "$KIT/wheels" && ls)
    } >"$KIT/MANIFEST"
    local bytes
    bytes=$(find "$KIT" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    say "kit: $KIT, $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}') MiB" \
        "(source $(du -sm "$SRC" | cut -f1) MiB on disk, $(ls "$KIT/wheels" | wc -l) wheels)"
    if [ "$bytes" -gt $((KIT_LIMIT_MB * 1048576)) ]; then
        say "gpu_check: the kit is over ${KIT_LIMIT_MB} MiB"
        return 1
    fi
    say "carry it: benchmarks/.peer/gpu (run: bash benchmarks/gpu_check.sh, timeout_s 600)"
}

# ---------------------------------------------------------------------------------------------------------
# --dry-run: the plan, and a check of every file, CLI flag and choice the run uses. Builds nothing.

DRY_PROBLEMS=0
need() {  # TEXT FLAG WHAT
    if grep -q -- "$2" <<<"$1"; then say "  ok: $3 has $2"; else say "  MISSING: $3 has no $2"; DRY_PROBLEMS=1; fi
}

dry_run() {
    local a
    say "gpu_check --dry-run: the plan (budget ${BUDGET} s, kit $KIT, work $WORK, python $PY)"
    say ""
    say "phase preflight          nvidia-smi and nvcc, or stop with exit 3; the kit's wheels into $SITE"
    lines a cmake_configure_args
    say "phase build: libllama    (in a session of its own, resumed by the next call if this one runs out)"
    say "                         cmake ${a[*]} <the CUDA paths found there>"
    say "                         cmake --build $BUILD -j\$(nproc) --target llama   (ggml, ggml-cuda)"
    say "phase llama_cpp package  $SRC/llama_cpp with $BUILD/bin/lib*.so in llama_cpp/lib, at $PYPKG"
    say "phase gpu suite          $PY -m pytest -m gpu tests/gpu   (correctness with every layer offloaded, first)"
    say "phase model (background) swarm-panel demo-model $MODEL --arch qwen35 --shape $SHAPE   (Q4_K_M)"
    say "phase build: llama-server cmake --build $BUILD -j\$(nproc) --target llama-server llama-batched-bench"
    lines a bench_line_args
    say "phase (a) step line      swarm-panel ${a[*]}"
    lines a bench_limit_args on
    say "phase (d) limit          swarm-panel ${a[*]}"
    lines a bench_policy_args continuous "$SEED_REQUESTS"
    say "phase (b) continuous     swarm-panel ${a[*]}"
    lines a peer_fixed_args
    say "phase (c) fixed lengths  $PY ${a[*]}"
    lines a bench_limit_args off
    say "phase (e) host sampling  swarm-panel ${a[*]}"
    local w
    for w in hybrid-agents past-lanes harness-prefix; do
        lines a peer_workload_args "$w"
        say "phase (f) $w  $PY ${a[*]}"
    done
    lines a bench_policy_args naive
    say "phase (b) naive          swarm-panel ${a[*]}"
    lines a bench_policy_args shrinking
    say "phase (b) shrinking      swarm-panel ${a[*]}"
    lines a peer_agents_args
    say "phase (c) real agents    $PY ${a[*]}"
    say "phase summary            each phase's verdict and seconds; exit 0 when every phase passed"
    say ""
    say "checks:"
    local f
    for f in "$here/peer_servers.py" "$here/trim_llama_source.sh" "$repo/swarm_panel/app/cli/main.py"; do
        if [ -f "$f" ]; then say "  ok: $f"; else say "  MISSING: $f"; DRY_PROBLEMS=1; fi
    done
    for f in timeout tee awk; do
        command -v "$f" >/dev/null || { say "  MISSING: $f"; DRY_PROBLEMS=1; }
    done
    # Here the checkout's own environment answers the help texts (on the GPU machine the kit's wheels do).
    local python=$PY helps text
    helps=$(cd "$repo" && "$python" - <<'EOF' 2>&1
from swarm_panel.app.cli.main import build_parser

parser = build_parser()
for name in ("bench", "serve", "demo-model"):
    print(f"=== {name}", flush=True)
    try:
        parser.parse_args([name, "--help"])
    except SystemExit:
        pass
EOF
)
    text=$(awk '/^=== bench$/{on=1; next} /^=== /{on=0} on' <<<"$helps")
    for f in --engine --model --n-gpu-layers --fit --fit-widths --fit-context --policy --requests-per-agent \
             --agents naive shrinking continuous --limit --batched-bench --limit-widths --limit-prompt \
             --limit-tokens --limit-rounds --backend-sampling; do
        need "$text" "$f" "swarm-panel bench"
    done
    text=$(awk '/^=== serve$/{on=1; next} /^=== /{on=0} on' <<<"$helps")
    need "$text" --n-gpu-layers "swarm-panel serve"
    text=$(awk '/^=== demo-model$/{on=1; next} /^=== /{on=0} on' <<<"$helps")
    need "$text" --arch "swarm-panel demo-model"
    need "$text" qwen35 "swarm-panel demo-model"
    need "$text" --shape "swarm-panel demo-model"
    need "$text" "$SHAPE" "swarm-panel demo-model"
    text=$(cd "$repo" && "$python" "$here/peer_servers.py" --help 2>&1)
    for f in --llama-server --model --only --agents --requests --rounds --ours-arg --peer-arg --real-agents --turns \
             --reply-tokens --logs --workload hybrid-agents past-lanes harness-prefix --round-limit; do
        need "$text" "$f" "peer_servers.py"
    done
    if [ -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ] && [ -d "$KIT/wheels" ]; then
        say "  ok: the kit is prepared ($(cat "$KIT/MANIFEST" 2>/dev/null | head -2 | tr '\n' ' '))"
    else
        say "  NOT YET: no kit at $KIT: run benchmarks/gpu_check.sh --prepare before carrying it"
    fi
    local nvcc
    if nvcc=$(find_nvcc); then
        find_cuda_parts "$nvcc" 0
        say "  here: nvcc $nvcc; ${CUDA_NOTES[*]:-CUDA parts found}"
    else
        say "  here: no nvcc (the run needs one)"
    fi
    command -v "$NVIDIA_SMI" >/dev/null || say "  here: no $NVIDIA_SMI (the run stops with exit 3 without one)"
    say ""
    if [ "$DRY_PROBLEMS" -eq 0 ]; then say "dry run: ok"; else say "dry run: problems above"; fi
    return "$DRY_PROBLEMS"
}

# ---------------------------------------------------------------------------------------------------------
# The run. It picks up where an earlier call on the same machine stopped: the build and the model writer
# run in sessions of their own (the device tool ends a call's other processes when it returns) and leave
# their exit status in $WORK; a measurement that passed is shown again, not rerun.

detached() {  # NAME COMMAND...: COMMAND in a session of its own; output in $WORK/NAME.log, status in NAME.rc
    local name=$1; shift
    rm -f "$WORK/$name.rc"
    printf '%q ' "$@" >"$WORK/$name.cmd"
    local session="setsid"
    # Without setsid the job still runs, but ends with this call.
    command -v setsid >/dev/null || session="nohup"
    "$session" bash -c 'eval "$(cat "$1")"; echo $? >"$2"' _ "$WORK/$name.cmd" "$WORK/$name.rc" \
        >>"$WORK/$name.log" 2>&1 </dev/null &
    echo $! >"$WORK/$name.pid"
}

running() { [ -f "$WORK/$1.pid" ] && [ ! -f "$WORK/$1.rc" ] && kill -0 "$(cat "$WORK/$1.pid")" 2>/dev/null; }

await() {  # NAME UNTIL_FILE...: waits for the job (or one of the files) within the phase; 124 when out of time
    local name=$1 last=0 now
    shift
    while running "$name"; do
        local file
        for file in "$@"; do [ -e "$file" ] && return 0; done
        now=$(date +%s)
        [ "$now" -lt "$PHASE_END" ] || return 124
        if [ $((now - last)) -ge 30 ]; then
            say "  ... $name running at $(elapsed) s $(grep -a -o '^\[[0-9]*/[0-9]*\]' "$WORK/$name.log" | tail -1)"
            last=$now
        fi
        sleep 2
    done
    local file
    for file in "$@"; do [ -e "$file" ] && return 0; done
    [ -f "$WORK/$name.rc" ] || return 1
    return "$(cat "$WORK/$name.rc")"
}

build_job() {  # the whole build, one job: configure, the libraries (then a marker), llama-server
    local a script
    lines a cmake_configure_args
    say "+ cmake ${a[*]} ${CUDA_EXTRA[*]}"
    say "+ cmake --build $BUILD -j$(nproc) --target llama; then --target llama-server llama-batched-bench"
    printf -v script '%q ' cmake "${a[@]}" "${CUDA_EXTRA[@]}"
    script+=" && cmake --build $(printf %q "$BUILD") -j$(nproc) --target llama && touch $(printf %q "$WORK/libs.ready")"
    script+=" && cmake --build $(printf %q "$BUILD") -j$(nproc) --target llama-server llama-batched-bench"
    detached build bash -c "$script"
}

build_libs() {  # starts the build unless an earlier call's is running or done, and waits for the libraries
    if [ -f "$WORK/build.rc" ] && [ "$(cat "$WORK/build.rc")" = 0 ]; then
        say "the build is done (an earlier call)"; return 0
    fi
    if running build; then
        say "an earlier call's build is still running: waiting for it"
    elif [ -f "$WORK/libs.ready" ]; then
        say "the libraries are built (an earlier call); llama-server is left to build"
        detached build cmake --build "$BUILD" -j"$(nproc)" --target llama-server llama-batched-bench
    else
        [ -f "$WORK/build.rc" ] && say "an earlier call's build failed (rc $(cat "$WORK/build.rc")): once more"
        rm -f "$WORK/build.log"
        build_job
    fi
    await build "$WORK/libs.ready"
    local rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$rc" -ne 124 ]; then
        grep -a -E "error|Error" "$WORK/build.log" | head -20; tail -20 "$WORK/build.log"
        say "build: failed (the whole log: build.log)"
    fi
    return "$rc"
}

build_server() {
    await build
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
        grep -a -E "error|Error" "$WORK/build.log" | head -20; tail -20 "$WORK/build.log"
        say "build: llama-server failed (the whole log: build.log)"
    fi
    [ "$rc" -eq 0 ] && ls -la "$BUILD/bin/llama-server" "$BUILD/bin/llama-batched-bench"
    return "$rc"
}

stage_python() {  # llama_cpp from the kit's sources with the libraries, as its wheel would hold them
    rm -rf "$PYPKG" && mkdir -p "$PYPKG" || return 1
    cp -a "$SRC/llama_cpp" "$PYPKG/" && mkdir -p "$PYPKG/llama_cpp/lib" &&
        cp -a "$BUILD"/bin/lib*.so* "$PYPKG/llama_cpp/lib/" || return 1
    GPU_CHECK_REHEARSAL=$REHEARSAL bounded "$PY" -c 'import os
import llama_cpp
ok = llama_cpp.llama_supports_gpu_offload()
print("llama_cpp", llama_cpp.__version__, "from", llama_cpp.__file__, "GPU offload:", ok)
raise SystemExit(0 if ok or os.environ["GPU_CHECK_REHEARSAL"] == "1" else 1)'
}

start_model() {  # the writer, in a session of its own, beside llama-server's build
    if [ -s "$MODEL" ]; then say "model: $MODEL is there (an earlier call)"; return 0; fi
    if running model; then say "model: an earlier call's writer is still running"; return 0; fi
    say "+ swarm-panel demo-model $MODEL --arch qwen35 --shape $SHAPE"
    rm -f "$WORK/model.log"
    detached model "$PY" -m swarm_panel.app.cli.main demo-model "$MODEL" --arch qwen35 --shape "$SHAPE"
}

finish_model() {
    if [ -s "$MODEL" ] && ! running model; then
        [ -f "$WORK/model.log" ] && tail -3 "$WORK/model.log"
        return 0
    fi
    await model
    local rc=$?
    tail -5 "$WORK/model.log"
    [ "$rc" -eq 124 ] && return 124
    [ "$rc" -eq 0 ] && [ -s "$MODEL" ] && return 0
    if grep -q -E "unrecognized arguments: --shape|invalid choice" "$WORK/model.log"; then
        say "model: FAILED: this checkout's swarm-panel demo-model does not take --arch qwen35 --shape $SHAPE."
    else
        say "model: FAILED (rc=$rc): swarm-panel demo-model --arch qwen35 --shape $SHAPE wrote no model."
    fi
    say "model: falling back to the demo shape: NOTHING MEASURED BELOW IS ${SHAPE}-SHAPED."
    bounded "$PY" -m swarm_panel.app.cli.main demo-model "$MODEL" --arch qwen35 --size demo && return 10
    return 1
}

measure() {  # NAME CAP COMMAND...: a measurement phase, shown again (not rerun) when an earlier call passed it
    local name=$1 slug
    slug=$(tr -c 'a-z0-9' '-' <<<"$SHAPE $name")
    if [ -f "$WORK/m$slug.rc" ] && [ "$(cat "$WORK/m$slug.rc")" = 0 ]; then
        say ""
        say "=== phase: $name: passed in an earlier call; its output:"
        cat "$WORK/m$slug.out"
        SUMMARY+=("$(printf '%-28s %-30s' "$name" "ok (an earlier call)")")
        return 0
    fi
    phase "$@" > >(tee "$WORK/m$slug.out")
    local rc=$?
    wait "$!"  # tee, not the build or the model writer
    echo "$rc" >"$WORK/m$slug.rc"
    return "$rc"
}

reap_servers() {  # servers a killed peer run left behind, by id (they run in sessions of their own)
    local proc pid
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        [ "$pid" = "$$" ] && continue
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--model $MODEL\|-m $MODEL"; then
            say "stopping a leftover server, pid $pid"
            kill "$pid" 2>/dev/null
        fi
    done
}

run() {
    say "gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), budget ${BUDGET} s, $(nproc) cores"
    say "repo $repo, kit $KIT, work $WORK"
    local have_kit=1
    [ -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ] && [ -d "$KIT/wheels" ] || have_kit=0

    # The GPU comes first: without one nothing below can run, so stop before building anything.
    local nvcc="" why=()
    if [ "$REHEARSAL" = 1 ]; then
        say "gpu_check: REHEARSAL (GPU_CHECK_REHEARSAL=1): no GPU asked for, a CPU build; nothing here is a GPU figure"
    else
        command -v "$NVIDIA_SMI" >/dev/null 2>&1 || why+=("$NVIDIA_SMI not found")
        if [ ${#why[@]} -eq 0 ] && ! "$NVIDIA_SMI" >/dev/null 2>&1; then why+=("$NVIDIA_SMI finds no GPU"); fi
        nvcc=$(find_nvcc) || why+=("no CUDA toolkit (nvcc) found")
    fi
    if [ ${#why[@]} -gt 0 ]; then
        say "gpu_check: no GPU: ${why[*]}. Nothing was built or measured; run this on the lent NVIDIA machine" \
            "(benchmarks/gpu_check.sh --dry-run shows the plan here)."
        [ "$have_kit" = 1 ] || say "gpu_check: the kit is not prepared either: benchmarks/gpu_check.sh --prepare"
        return 3
    fi
    if [ "$have_kit" = 0 ]; then
        say "gpu_check: no kit at $KIT: run benchmarks/gpu_check.sh --prepare where PyPI is reachable and carry" \
            "benchmarks/.peer/gpu"
        return 4
    fi
    mkdir -p "$WORK"
    [ -f "$WORK/started" ] && say "an earlier call started at $(cat "$WORK/started"): picking up where it stopped"
    [ -f "$WORK/started" ] || date -u '+%H:%M:%S UTC' >"$WORK/started"

    say ""
    say "=== phase: preflight (at $(elapsed) s)"
    if [ "$REHEARSAL" != 1 ]; then
        "$NVIDIA_SMI" --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1
        "$nvcc" --version | tail -2
    fi
    say "python: $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)')" \
        "(kit wheels for $(head -1 "$KIT/MANIFEST" 2>/dev/null))"
    say "cmake: $(cmake --version | head -1); ninja: $(ninja --version 2>/dev/null || echo none)"
    if [ ! -f "$SITE/.installed" ]; then
        rm -rf "$SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
            "$KIT"/wheels/*.whl 2>&1 | grep -v -i "warning: target directory" | tail -5
        [ "${PIPESTATUS[0]}" -eq 0 ] && touch "$SITE/.installed"
    fi
    export PYTHONPATH="$PYPKG:$SITE:$repo${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
    if [ "$REHEARSAL" != 1 ]; then
        find_cuda_parts "$nvcc" 1
        printf '%s\n' "${CUDA_NOTES[@]}"
    fi
    if [ ${#CUDA_LIBDIRS[@]} -gt 0 ]; then
        LD_LIBRARY_PATH="$(IFS=:; echo "${CUDA_LIBDIRS[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export LD_LIBRARY_PATH
    fi
    # nvcc links ggml-cuda with a static libstdc++ whose symbols it exports. llama_cpp loads the libraries
    # globally, so libllama's iostream calls bound to that copy, whose locale nothing set up, and
    # llama_model::print_info segfaulted on the H200 (2026-12-04). Loaded first, the shared libstdc++ wins.
    local stdcxx
    stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
    [ -n "$stdcxx" ] && export LD_PRELOAD="$stdcxx${LD_PRELOAD:+:$LD_PRELOAD}"
    cd "$repo" || return 1

    # The libraries first (ggml-cuda is the long pole); once llama_cpp loads, the model is written (llama.cpp's
    # quantizer makes it Q4_K_M) while llama-server builds.
    local built=0 server=0 modeled=0 rc
    if phase "build: libllama, ggml-cuda" "$BUDGET" build_libs; then
        phase "llama_cpp package" 60 stage_python && built=1
    fi
    # Correctness on the card before any figure: the gpu suite on its tiny models (tests/gpu, docs/gpu.md).
    if [ "$built" = 1 ]; then
        measure "gpu suite" 180 bounded "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider
    fi
    if [ "$built" = 1 ]; then
        say ""
        say "=== phase: model, in the background from here (at $(elapsed) s)"
        start_model
        phase "build: llama-server" "$BUDGET" build_server && server=1
        phase "model ($SHAPE)" "$BUDGET" finish_model
        rc=$?
        if [ "$rc" -eq 0 ]; then
            modeled=1
        elif [ "$rc" -eq 10 ]; then
            modeled=1
            MODEL_NOTE=" [FALLBACK: the demo shape, not $SHAPE]"
        fi
        [ -s "$MODEL" ] && say "model file: $MODEL, $(du -h "$MODEL" | cut -f1)${MODEL_NOTE}"
    fi
    [ -n "${OUT:-}" ] && [ -f "$WORK/build.log" ] && cp "$WORK/build.log" "$OUT/build.log"

    local a tag=${MODEL_NOTE:+ [demo]}
    if [ "$built" = 1 ] && [ "$modeled" = 1 ]; then
        # In the order of what each tells, so that a short budget loses the least.
        lines a bench_line_args
        measure "(a) step line$tag" 120 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        lines a bench_limit_args on
        if [ "$server" = 1 ]; then measure "(d) limit$tag" 120 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        else skip "(d) limit" "no llama-batched-bench"; fi
        lines a bench_policy_args continuous "$SEED_REQUESTS"
        measure "(b) continuous$tag" 150 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        lines a peer_fixed_args
        if [ "$server" = 1 ]; then measure "(c) fixed lengths$tag" 150 bounded "$PY" "${a[@]}"; reap_servers
        else skip "(c) fixed lengths" "no llama-server"; fi
        lines a bench_limit_args off
        if [ "$server" = 1 ]; then measure "(e) host sampling$tag" 90 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        else skip "(e) host sampling" "no llama-batched-bench"; fi
        local w
        for w in hybrid-agents past-lanes harness-prefix; do
            lines a peer_workload_args "$w"
            if [ "$server" = 1 ]; then measure "(f) $w$tag" 130 bounded "$PY" "${a[@]}"; reap_servers
            else skip "(f) $w" "no llama-server"; fi
        done
        lines a bench_policy_args naive
        measure "(b) naive$tag" 150 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        lines a bench_policy_args shrinking
        measure "(b) shrinking$tag" 150 bounded "$PY" -m swarm_panel.app.cli.main "${a[@]}"
        lines a peer_agents_args
        if [ "$server" = 1 ]; then measure "(c) real agents$tag" 120 bounded "$PY" "${a[@]}"; reap_servers
        else skip "(c) real agents" "no llama-server"; fi
        if [ -n "${OUT:-}" ] && [ -d "$WORK/peer-logs" ]; then
            for a in "$WORK"/peer-logs/*.log; do echo "== $a"; tail -40 "$a"; done >"$OUT/peer_server_logs.txt" 2>&1
        fi
    else
        local reason="no build"
        [ "$built" = 1 ] && reason="no model"
        for a in "(a) step line" "(d) limit" "(b) continuous" "(c) fixed lengths" "(e) host sampling" \
                 "(f) hybrid-agents" "(f) past-lanes" "(f) harness-prefix" "(b) naive" "(b) shrinking" \
                 "(c) real agents"; do
            skip "$a" "$reason"
        done
    fi

    say ""
    say "=== summary ($(elapsed) s in this call; model $MODEL${MODEL_NOTE})"
    printf '%s\n' "${SUMMARY[@]}"
    if running build || running model || [ "$UNFINISHED" = 1 ]; then
        say ""
        say "gpu_check: UNFINISHED: the budget ran out$(running build && echo "; the build runs on")$(running model &&
            echo "; the model writer runs on"). Run the same command again at once (the machine goes back after" \
            "30 s idle): it picks up where this call stopped, and shows again what passed."
        return 5
    fi
    return "$FAILED"
}

case $mode in
    prepare) prepare; exit $? ;;
    stub-mmq) stub_mmq_instances "$stub_dir"; exit $? ;;
    dry-run) dry_run; exit $? ;;
esac
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    run 2>&1 | tee -a "$OUT/gpu_check.log"
    exit "${PIPESTATUS[0]}"
fi
run
