#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama.cpp tree vendored in the installed llama-cpp-python's
# sdist, so the peer runs the same commit and kernels as our engine, and llama-batched-bench beside it (the
# limit: a C loop of llama_decode at fixed batch sizes). Prints llama-server's path; the other is in its folder.
set -euo pipefail
out="${1:-$(dirname "$0")/.peer}"
version=$(python -c 'import llama_cpp; print(llama_cpp.__version__)')
src="$out/llama_cpp_python-$version"
if [ ! -x "$src/build/bin/llama-server" ] || [ ! -x "$src/build/bin/llama-batched-bench" ]; then
    mkdir -p "$out"
    pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$out" -q
    tar xzf "$out/llama_cpp_python-$version.tar.gz" -C "$out"
    cmake -S "$src/vendor/llama.cpp" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF >&2
    cmake --build "$src/build" --target llama-server llama-batched-bench -j"$(nproc)" >&2
fi
echo "$src/build/bin/llama-server"
