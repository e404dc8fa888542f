#!/usr/bin/env bash
# Makes a trimmed copy of the llama-cpp-python sdist (the llama.cpp tree vendored in it) that still
# configures and builds llama-cpp-python and llama-server, CPU or CUDA, and prints its size.
#
#     benchmarks/trim_llama_source.sh OUT_DIR [--from SDIST_DIR]
#
# OUT_DIR becomes the trimmed sdist root (OUT_DIR/pyproject.toml, OUT_DIR/llama_cpp,
# OUT_DIR/vendor/llama.cpp); it must not exist yet, or be empty. --from takes an unpacked sdist
# (llama_cpp_python-VERSION); without it the sdist of the installed llama-cpp-python is fetched the
# way benchmarks/build_llama_server.sh does (pip download --no-binary).
#
# Removed: tests, docs, media, the vocab files under models/, examples, benches, conversion scripts,
# gguf-py, the other backends' sources (Vulkan, SYCL, Metal, CANN, OpenCL, Hexagon, ...), the web UI's
# sources (a server configured with -DLLAMA_USE_PREBUILT_UI=OFF embeds no UI) and git metadata. Kept:
# ggml-cpu, ggml-cuda (ggml-hip and ggml-musa are small CMake files over ggml-cuda's sources),
# tools/server, tools/batched-bench (the limit beside us), tools/mtmd (the server links it), vendor/ (httplib, json, stb, miniaudio) and the
# Python package. A standalone build from the copy needs -DLLAMA_BUILD_TESTS=OFF
# -DLLAMA_BUILD_EXAMPLES=OFF (their folders are gone); as llama-cpp-python's subproject both are off.
set -euo pipefail

usage() { echo "usage: $0 OUT_DIR [--from SDIST_DIR]" >&2; exit 2; }

out="" src=""
while [ $# -gt 0 ]; do
    case "$1" in
        --from) [ $# -ge 2 ] || usage; src="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        -*) usage ;;
        *) [ -z "$out" ] || usage; out="$1"; shift ;;
    esac
done
[ -n "$out" ] || usage
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
    echo "trim: $out exists and is not empty" >&2
    exit 2
fi

# Paths under the sdist root that go. Anchored: src/models and tools/mtmd/models are sources and stay.
SDIST_DROP=(
    .git .github .gitignore .gitmodules .readthedocs.yaml .dockerignore
    docs examples tests docker scripts Makefile mkdocs.yml CHANGELOG.md CONTRIBUTING.md
    llama_cpp/lib
)
LLAMA_DROP=(
    .git .github .devops .gemini .pi .gitignore .gitmodules .clang-format .clang-tidy .dockerignore .ecrc
    .editorconfig .flake8 .pre-commit-config.yaml
    AGENTS.md CLAUDE.md CODEOWNERS CONTRIBUTING.md SECURITY.md AUTHORS
    benches ci conversion docs examples gguf-py grammars media models pocs requirements skills tests
    convert_hf_to_gguf.py convert_hf_to_gguf_update.py convert_llama_ggml_to_gguf.py convert_lora_to_gguf.py
    build-xcframework.sh flake.nix mypy.ini pyproject.toml pyrightconfig.json requirements.txt ty.toml
    # Backends the CUDA build does not compile (ggml_add_backend only enters a folder whose option is on).
    ggml/src/ggml-cann ggml/src/ggml-et ggml/src/ggml-hexagon ggml/src/ggml-metal ggml/src/ggml-opencl
    ggml/src/ggml-openvino ggml/src/ggml-sycl ggml/src/ggml-virtgpu ggml/src/ggml-vulkan
    ggml/src/ggml-webgpu ggml/src/ggml-zdnn ggml/src/ggml-zendnn
    # The server's and mtmd's tests and load scripts, and mtmd's sample media.
    tools/server/tests tools/server/bench tools/mtmd/tests tools/mtmd/test-1.jpeg tools/mtmd/test-2.mp3
    tools/mtmd/test-3.mp4
)
# Folders of which only some files stay (the rest of each folder goes).
# tools/ui: the templates the build fills in with no assets; scripts/: the CMake scripts the build runs.
KEEP_ONLY_UI=(CMakeLists.txt ui.cpp.in ui.h.in sources.cmake)

tmp=""
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
if [ -z "$src" ]; then
    version=$(python -c 'import llama_cpp; print(llama_cpp.__version__)')
    tmp=$(mktemp -d)
    pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp" -q
    tar xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
    src="$tmp/llama_cpp_python-$version"
fi
if [ ! -f "$src/pyproject.toml" ] || [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    echo "trim: $src is not an unpacked llama-cpp-python sdist (no pyproject.toml or vendor/llama.cpp)" >&2
    exit 2
fi

mkdir -p "$out"
cp -a "$src/." "$out/"
for path in "${SDIST_DROP[@]}"; do rm -rf "${out:?}/$path"; done
llama="$out/vendor/llama.cpp"
for path in "${LLAMA_DROP[@]}"; do rm -rf "${llama:?}/$path"; done
if [ -d "$llama/tools/ui" ]; then
    for entry in "$llama/tools/ui"/* "$llama/tools/ui"/.[!.]*; do
        [ -e "$entry" ] || continue
        case " ${KEEP_ONLY_UI[*]} " in *" ${entry##*/} "*) ;; *) rm -rf "$entry" ;; esac
    done
fi
if [ -d "$llama/scripts" ]; then
    find "$llama/scripts" -mindepth 1 -maxdepth 1 ! -name '*.cmake' -exec rm -rf {} +
fi

bytes=$(find "$out" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
files=$(find "$out" -type f | wc -l)
echo "trimmed copy: $out, $files files, $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}') MiB ($bytes bytes)"
