"""benchmarks/gpu_check.sh and trim_llama_source.sh: the GPU check's plan, how it stops without a GPU, and
what the trimmed llama.cpp copy keeps (the build and the measurements themselves need the lent machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "gpu_check.sh"
TRIM = ROOT / "benchmarks" / "trim_llama_source.sh"

PHASES = ("preflight", "build: libllama", "llama_cpp package", "gpu suite", "model (background)", "build: llama-server",
          "(a) step line", "(b) continuous", "(b) naive", "(b) shrinking", "(c) fixed lengths", "(c) real agents")


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_") and k != "OUT"}
    environ["GPU_CHECK_PYTHON"] = sys.executable
    return subprocess.run(["bash", *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=environ | (env or {}))


@pytest.mark.parametrize("script", [CHECK, TRIM], ids=lambda p: p.name)
def test_the_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(script)], check=False, capture_output=True).returncode == 0


def test_the_dry_run_names_every_phase_and_finds_every_flag(tmp_path):
    done = _run(str(CHECK), "--dry-run", env={"GPU_CHECK_KIT": str(tmp_path / "kit")})
    assert done.returncode == 0, done.stdout + done.stderr
    for phase in PHASES:
        assert f"phase {phase}" in done.stdout
    assert "MISSING" not in done.stdout
    assert "dry run: ok" in done.stdout
    # It builds nothing: no kit appears, and the work folder is not made.
    assert not (tmp_path / "kit").exists()


def test_without_nvidia_smi_the_run_stops_before_building(tmp_path):
    out = tmp_path / "out"
    work = tmp_path / "work"
    done = _run(str(CHECK), env={"GPU_CHECK_NVIDIA_SMI": "no-such-nvidia-smi", "GPU_CHECK_WORK": str(work),
                                 "GPU_CHECK_KIT": str(tmp_path / "kit"), "OUT": str(out)}, timeout=30)
    assert done.returncode == 3
    assert "no GPU: no-such-nvidia-smi not found" in done.stdout
    assert not work.exists()
    assert "no GPU" in (out / "gpu_check.log").read_text()


def test_without_nvcc_the_run_stops_before_building(tmp_path):
    work = tmp_path / "work"
    done = _run(str(CHECK), env={"GPU_CHECK_NVIDIA_SMI": "true", "GPU_CHECK_NVCC": "no-such-nvcc",
                                 "GPU_CHECK_WORK": str(work), "GPU_CHECK_KIT": str(tmp_path / "kit")}, timeout=30)
    assert done.returncode == 3
    assert "no GPU: no CUDA toolkit (nvcc) found" in done.stdout
    assert not work.exists()


def test_with_a_gpu_but_no_kit_the_run_asks_for_one(tmp_path):
    work = tmp_path / "work"
    done = _run(str(CHECK), env={"GPU_CHECK_NVIDIA_SMI": "true", "GPU_CHECK_NVCC": "true",
                                 "GPU_CHECK_WORK": str(work), "GPU_CHECK_KIT": str(tmp_path / "kit")}, timeout=30)
    assert done.returncode == 4
    assert "--prepare" in done.stdout
    assert not work.exists()


# A few files where each rule bites: what goes, and what stays though its name looks like what goes.
GONE = ("docs/index.md", "tests/test_llama.py", "examples/chat.py", "docker/Dockerfile", ".github/ci.yml",
        "vendor/llama.cpp/.git/HEAD", "vendor/llama.cpp/.github/workflows/build.yml",
        "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf", "vendor/llama.cpp/docs/build.md",
        "vendor/llama.cpp/media/llama.png", "vendor/llama.cpp/tests/test-backend-ops.cpp",
        "vendor/llama.cpp/examples/simple/simple.cpp", "vendor/llama.cpp/gguf-py/gguf/gguf.py",
        "vendor/llama.cpp/convert_hf_to_gguf.py", "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "vendor/llama.cpp/ggml/src/ggml-metal/ggml-metal.m", "vendor/llama.cpp/ggml/src/ggml-sycl/ggml-sycl.cpp",
        "vendor/llama.cpp/ggml/src/ggml-opencl/ggml-opencl.cpp", "vendor/llama.cpp/ggml/src/ggml-cann/aclnn_ops.cpp",
        "vendor/llama.cpp/tools/server/tests/unit/test_basic.py", "vendor/llama.cpp/tools/mtmd/test-1.jpeg",
        "vendor/llama.cpp/tools/ui/src/app.svelte", "vendor/llama.cpp/tools/ui/package.json",
        "vendor/llama.cpp/scripts/sync-ggml.sh")
KEPT = ("pyproject.toml", "CMakeLists.txt", "README.md", "llama_cpp/__init__.py", "llama_cpp/llama_cpp.py",
        "vendor/llama.cpp/CMakeLists.txt", "vendor/llama.cpp/src/llama.cpp", "vendor/llama.cpp/src/models/qwen35.cpp",
        "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu", "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml-cuda/template-instances/mmq-instance-q4_k.cu",
        "vendor/llama.cpp/ggml/src/ggml-hip/CMakeLists.txt", "vendor/llama.cpp/ggml/src/ggml-musa/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c", "vendor/llama.cpp/tools/server/server.cpp",
        "vendor/llama.cpp/tools/server/CMakeLists.txt", "vendor/llama.cpp/tools/mtmd/models/qwen2vl.cpp",
        "vendor/llama.cpp/tools/ui/CMakeLists.txt", "vendor/llama.cpp/tools/ui/ui.cpp.in",
        "vendor/llama.cpp/tools/ui/ui.h.in", "vendor/llama.cpp/scripts/ui-assets.cmake",
        "vendor/llama.cpp/vendor/cpp-httplib/httplib.h", "vendor/llama.cpp/common/common.cpp")


def _fake_sdist(root: Path) -> Path:
    for name in (*GONE, *KEPT):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return root


def test_the_trim_drops_what_no_cuda_build_needs_and_keeps_cuda_and_the_server(tmp_path):
    sdist = _fake_sdist(tmp_path / "llama_cpp_python-0.0.0")
    out = tmp_path / "trimmed"
    done = _run(str(TRIM), str(out), "--from", str(sdist), timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"trimmed copy: {out}, {len(KEPT)} files" in done.stdout
    assert [name for name in GONE if (out / name).exists()] == []
    assert [name for name in KEPT if not (out / name).is_file()] == []
    # The source is left as it was.
    assert all((sdist / name).exists() for name in GONE)


def test_the_trim_refuses_a_folder_that_is_no_sdist_or_an_output_that_is_not_empty(tmp_path):
    (tmp_path / "empty").mkdir()
    assert _run(str(TRIM), str(tmp_path / "a"), "--from", str(tmp_path / "empty"), timeout=30).returncode == 2
    sdist = _fake_sdist(tmp_path / "sdist")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "file").write_text("x")
    done = _run(str(TRIM), str(busy), "--from", str(sdist), timeout=30)
    assert done.returncode == 2 and "not empty" in done.stderr


def _fake_ggml_cuda(root: Path, template: str) -> Path:
    cuda = root / "ggml-cuda"
    (cuda / "template-instances").mkdir(parents=True)
    (cuda / "mmq.cuh").write_text(f"{template}\nvoid mul_mat_q_case(ggml_backend_cuda_context & ctx);\n")
    head = '#include "../mmq.cuh"\n\n'
    (cuda / "template-instances" / "mmq-instance-q4_k.cu").write_text(head + "DECL_MMQ_CASE(GGML_TYPE_Q4_K);\n")
    (cuda / "template-instances" / "mmq-instance-iq2_s.cu").write_text(head + "DECL_MMQ_CASE(GGML_TYPE_IQ2_S);\n")
    (cuda / "template-instances" / "mmq-instance-mxfp4.cu").write_text(
        head + "DECL_MMQ_CASE(GGML_TYPE_MXFP4);\n\nDECL_MMQ_CASE_W4A4(GGML_TYPE_MXFP4);\n")
    return cuda


def test_the_kit_compiles_only_the_mmq_kernels_the_timed_models_use(tmp_path):
    cuda = _fake_ggml_cuda(tmp_path, "template <ggml_type type, ggml_prec prec_src1 = GGML_PREC_Q8>")
    kept = (cuda / "template-instances" / "mmq-instance-q4_k.cu").read_text()
    done = _run(str(CHECK), "--stub-mmq", str(cuda))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 compiled" in done.stdout and "2 stubbed" in done.stdout
    assert (cuda / "template-instances" / "mmq-instance-q4_k.cu").read_text() == kept
    # A stub defines each symbol its instance did (both precisions for mxfp4), and aborts if it is called.
    mxfp4 = (cuda / "template-instances" / "mmq-instance-mxfp4.cu").read_text()
    assert "template <> void mul_mat_q_case<GGML_TYPE_MXFP4>(" in mxfp4
    assert "template <> void mul_mat_q_case<GGML_TYPE_MXFP4, GGML_PREC_Q4>(" in mxfp4
    assert mxfp4.count("GGML_ABORT(") == 2 and "mmq.cuh" not in mxfp4
    iq2_s = (cuda / "template-instances" / "mmq-instance-iq2_s.cu").read_text()
    assert "template <> void mul_mat_q_case<GGML_TYPE_IQ2_S>(" in iq2_s


def test_the_mmq_stubs_are_not_written_against_a_template_they_do_not_match(tmp_path):
    cuda = _fake_ggml_cuda(tmp_path, "template <ggml_type type, bool fast = false>")
    before = {p.name: p.read_text() for p in (cuda / "template-instances").iterdir()}
    done = _run(str(CHECK), "--stub-mmq", str(cuda))
    assert done.returncode == 0
    assert "every MMQ kernel is compiled" in done.stdout
    assert {p.name: p.read_text() for p in (cuda / "template-instances").iterdir()} == before
