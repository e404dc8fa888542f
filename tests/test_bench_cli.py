import json

from app.cli import main


def test_bench_json_contract(capsys):
    code = main(["bench", "--engine", "modeled", "--policy", "all", "--agents", "8",
                 "--lengths", "40,90,150,220,300,480,650,900", "--requests-per-agent", "8", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["naive", "shrinking", "continuous"]
    for r in out["results"]:
        assert isinstance(r["useful_tokens"], int) and isinstance(r["steps"], int)
        for key in ("utilization", "tok_s", "seconds"):
            assert isinstance(r[key], float)
    tok_s = [r["tok_s"] for r in out["results"]]
    assert tok_s[0] < tok_s[1] < tok_s[2]


def test_bench_scales_to_64_agents_and_lanes(capsys):
    assert main(["bench", "--agents", "64", "--max-batch", "64", "--requests-per-agent", "2", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results[2]["tok_s"] > results[0]["tok_s"]


def test_bench_table_and_overhead_print_figures(capsys):
    assert main(["bench", "--policy", "continuous", "--requests-per-agent", "1"]) == 0
    assert "continuous" in capsys.readouterr().out
    assert main(["overhead", "--lanes", "64", "--steps", "200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["running"] == 64 and report["median_ms"] > 0


def test_bad_arguments_give_a_readable_error(capsys):
    assert main(["bench", "--agents", "0"]) == 2
    assert "agents" in capsys.readouterr().err


def test_a_missing_or_corrupt_model_is_a_clear_cli_error(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"\x00GGUFnot really" * 10)
    for path in (tmp_path / "absent.gguf", corrupt):
        assert main(["serve", "--engine", "llama", "--model", str(path), "--port", "0"]) != 0
        err = capsys.readouterr().err
        assert "cannot load model" in err and str(path) in err
    assert main(["bench", "--engine", "llama", "--model", str(tmp_path / "absent.gguf"),
                 "--requests-per-agent", "1"]) != 0
    assert "cannot load model" in capsys.readouterr().err
