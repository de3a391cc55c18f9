"""The ``ctxrank`` command line, in-process (``main([...])``) and as a subprocess."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrank.cli import COMMANDS, build_parser, main
from ctxrank.data.scores import read_scores
from tests.conftest import REPO

# query "1": labels 2, 0, 1; query "2": no relevant item
TINY = (
    "2 qid:1 1:0.1 2:1 #docid = a\n"
    "0 qid:1 1:0.2 2:0 #docid = b\n"
    "1 qid:1 1:0.3 2:1 #docid = c\n"
    "0 qid:2 1:0.1 2:0 #docid = d\n"
    "0 qid:2 1:0.5 2:1 #docid = e\n"
)
SCORES = "0.1\n0.9\n0.5\n1\n2\n"  # query 1 ranked b, c, a
# LETOR "Feature-null": query 1 lacks feature 1 on its 2nd item (its other items: 0.5, 0.3) and feature 2
# on its 1st (others: -1, -2); query 2 lacks feature 1 everywhere
NULLS = (
    "2 qid:1 1:0.5 2:NULL 3:1\n"
    "0 qid:1 1:NULL 2:-1 3:0\n"
    "1 qid:1 1:0.3 2:-2 3:1\n"
    "0 qid:2 1:NULL 2:1 3:0\n"
    "1 qid:2 1:NULL 2:3 3:1\n"
)
# (row, feature) of each NULL cell -> its value under each rule (docs/data.md, "NULL fill rules")
NULL_CELLS = {
    "query_min": {(0, 1): -2.0, (1, 0): 0.3, (3, 0): 0.0, (4, 0): 0.0},
    "letor_min": {(0, 1): -2.0, (1, 0): 0.0, (3, 0): 0.0, (4, 0): 0.0},
    "-1.5": {(0, 1): -1.5, (1, 0): -1.5, (3, 0): -1.5, (4, 0): -1.5},
}
# hand-computed, gain 2^y - 1, discount 1/log2(1 + r): ranking b (gain 0), c (1), a (3)
DCG3 = 0.0 + 1.0 / math.log2(3) + 3.0 / math.log2(4)
IDCG3 = 3.0 + 1.0 / math.log2(3) + 0.0
NDCG3_Q1 = DCG3 / IDCG3  # 0.586883
AP_Q1 = (1 / 2 + 2 / 3) / 2  # relevant (label >= 1) at ranks 2 and 3


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def tiny(tmp_path):
    data = tmp_path / "tiny.txt"
    data.write_text(TINY)
    scores = tmp_path / "scores.txt"
    scores.write_text(SCORES)
    return data, scores


# ------------------------------------------------------------------------------------ data-info
def test_data_info_embedded_mq2008(capsys):
    rc, out, err = run(capsys, "data-info", "--dataset", "mq2008")
    assert rc == 0, err
    assert re.search(r"^queries\s+784$", out, re.M) and re.search(r"^items\s+15,211$", out, re.M)
    assert "0: 12,279" in out and "220 (28.1%)" in out and "NULL cells filled" in out
    assert "min 5" in out and "max 121" in out


def test_data_info_json_fold_split(capsys):
    rc, out, _ = run(capsys, "data-info", "--dataset", "MQ2008", "--fold", "2", "--split", "test", "--json")
    assert rc == 0
    info = json.loads(out)
    assert (info["queries"], info["items"], info["features"]) == (157, 2933, 46)  # Fold2 test = S1
    assert info["label_histogram"] == {"0": 2316, "1": 427, "2": 190}
    assert set(info["list_length"]) == {"min", "median", "mean", "max"}
    assert info["null_filled"] == 0 and info["source"] == "MQ2008 Fold2 test (S1)"


def test_data_info_file(capsys, tiny):
    rc, out, _ = run(capsys, "data-info", str(tiny[0]), "--json")
    assert rc == 0
    info = json.loads(out)
    assert (info["queries"], info["items"], info["queries_without_relevant"]) == (2, 5, 1)
    assert info["list_length"] == {"min": 2, "median": 2.5, "mean": 2.5, "max": 3}


def test_data_info_subprocess():
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run(
        [sys.executable, "-m", "ctxrank", "data-info", "--dataset", "mq2008"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "784" in proc.stdout and "15,211" in proc.stdout


def test_console_script_error_subprocess(tmp_path):
    script = Path(sys.executable).parent / "ctxrank"
    if not script.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    proc = subprocess.run(
        [str(script), "data-info", str(tmp_path / "missing.txt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("ctxrank: error:") and "missing.txt" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------- evaluate
def test_evaluate_matches_hand_computed(capsys, tiny):
    data, scores = tiny
    rc, out, err = run(
        capsys, "evaluate", "--data", str(data), "--scores", str(scores), "--metrics", "ndcg@3,map"
    )
    assert rc == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("ndcg@3", "map"))}
    # query 2 has no relevant item and scores 0 by default: the mean is half of query 1's value
    assert rows["ndcg@3"][1] == f"{NDCG3_Q1 / 2:.4f}" == "0.2934"
    assert rows["map"][1] == f"{AP_Q1 / 2:.4f}"
    assert rows["ndcg@3"][2] == "2"
    assert "convention" in out and "standard" in out and "1/log2(1+r)" in out and "no relevant item" in out


def test_evaluate_json_per_query(capsys, tiny):
    data, scores = tiny
    rc, out, _ = run(
        capsys, "evaluate", "--data", str(data), "--scores", str(scores),
        "--metrics", "ndcg@1,ndcg@3,map", "--no-relevant", "skip", "--json",
    )  # fmt: skip
    assert rc == 0
    res = json.loads(out)
    assert res["query_ids"] == ["1", "2"]
    assert res["per_query"]["ndcg@3"][0] == pytest.approx(NDCG3_Q1, abs=1e-12)
    assert res["per_query"]["ndcg@3"][1] is None  # skipped: NaN -> null
    assert res["per_query"]["ndcg@1"] == [0.0, None]
    assert res["metrics"]["map"] == pytest.approx(AP_Q1)
    assert res["queries_evaluated"] == {"ndcg@1": 1, "ndcg@3": 1, "map": 1}
    conv = res["conventions"]
    assert conv["name"] == "standard" and conv["no_relevant"] == "skip" and conv["gain"] == "exp2"
    assert (res["queries"], res["items"]) == (2, 5)


def test_evaluate_letor4_convention(capsys, tiny):
    data, scores = tiny
    rc, out, _ = run(
        capsys, "evaluate", "--data", str(data), "--scores", str(scores),
        "--metrics", "ndcg@3", "--convention", "letor4", "--json",
    )  # fmt: skip
    assert rc == 0
    res = json.loads(out)
    # LETOR 4.0 discount: ranks 1-2 undiscounted, rank 3 divided by log2(3)
    expected = (0.0 + 1.0 + 3.0 / math.log2(3)) / (3.0 + 1.0 + 0.0)
    assert res["per_query"]["ndcg@3"][0] == pytest.approx(expected)
    assert res["conventions"]["name"] == "letor4"


def test_evaluate_on_registered_split(capsys, tmp_path):
    (tmp_path / "s.txt").write_text("0\n" * 2874)
    rc, out, err = run(
        capsys, "evaluate", "--dataset", "mq2008", "--split", "test", "--scores", str(tmp_path / "s.txt"),
        "--metrics", "ndcg@10", "--json",
    )  # fmt: skip
    assert rc == 0, err
    res = json.loads(out)
    assert res["queries"] == 156 and len(res["per_query"]["ndcg@10"]) == 156


@pytest.mark.parametrize(
    "scores_text, needle",
    [
        ("0.1\n0.2\n", "has 2 scores but"),
        ("0.1\n0.2\n0.3\n0.4\n0.5\n0.6\n", "has 6 scores but"),
        ("0.1\nabc\n0.3\n0.4\n0.5\n", "scores.txt:2: expected one number per line, got 'abc'"),
        ("0.1\n\n0.3\n0.4\n0.5\n", "scores.txt:2: expected one number"),
        ("0.1\nnan\n0.3\n0.4\n0.5\n", "scores.txt:2: scores must be finite"),
    ],
)
def test_evaluate_bad_scores(capsys, tiny, scores_text, needle):
    data, scores = tiny
    scores.write_text(scores_text)
    rc, out, err = run(capsys, "evaluate", "--data", str(data), "--scores", str(scores))
    assert rc == 2 and out == ""
    assert err.startswith("ctxrank: error:") and needle in err and "Traceback" not in err
    if "scores but" in needle:
        assert "5 rows" in err and str(scores) in err and str(data) in err


def test_read_scores_trailing_blank_lines(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("1\n-2.5e-1\n\n\n")
    assert read_scores(p, 2).tolist() == [1.0, -0.25]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["data-info", "{tmp}/missing.txt"], "missing.txt: no such file"),
        (["evaluate", "--data", "{data}", "--scores", "{tmp}/nope.txt"], "nope.txt: no such scores file"),
        (["evaluate", "--data", "{tmp}/nodata.txt", "--scores", "{scores}"], "nodata.txt: no such file"),
        (["evaluate", "--data", "{data}", "--scores", "{scores}", "--metrics", "foo@3"], "unknown metric"),
        (["data-info", "--dataset", "nope"], "unknown dataset 'nope'; known datasets: airline, car"),
        (["data-info", "--dataset", "web30k", "--data-root", "{tmp}"], "MSLR-WEB30K fold 1 not found"),
        (["data-info", "{data}", "--fold", "2"], "--fold applies to --dataset"),
        (["data-info"], "give a data file or --dataset"),
        (
            [
                "evaluate",
                "--data",
                "{data}",
                "--scores",
                "{scores}",
                "--convention",
                "letor4",
                "--no-relevant",
                "skip",
            ],
            "fixes no_relevant=0.0",
        ),
        (["datasets", "download", "yahoo", "--root", "{tmp}"], "no direct download address"),
        (["datasets", "show", "nope"], "unknown dataset"),
    ],
)
def test_error_paths_exit_2(capsys, tiny, tmp_path, argv, needle):
    data, scores = tiny
    argv = [a.format(tmp=tmp_path, data=data, scores=scores) for a in argv]
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert err.startswith("ctxrank: error:") and needle in err and "Traceback" not in err


def test_debug_shows_traceback(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        main(["--debug", "data-info", str(tmp_path / "missing.txt")])
    with pytest.raises(ValueError, match="no such file"):
        main(["data-info", str(tmp_path / "missing.txt"), "--debug"])


def test_usage_errors_and_help(capsys):
    assert main([]) == 2
    assert "required" in capsys.readouterr().err
    assert main(["evaluate", "--data", "x"]) == 2  # --scores is required
    assert main(["evaluate", "--no-relevant", "2", "--scores", "s"]) == 2
    assert "expected 0, 1 or skip" in capsys.readouterr().err
    assert main(["--version"]) == 0
    capsys.readouterr()
    for cmd in (
        ["--help"],
        ["datasets", "--help"],
        ["datasets", "download", "--help"],
        ["data-info", "--help"],
        ["evaluate", "--help"],
        ["demo", "--help"],
    ):
        assert main(cmd) == 0
        out = capsys.readouterr().out
        assert "usage: ctxrank" in out and len(out) > 300, cmd


def test_the_command_table_is_the_commands_of_the_modules():
    """``ctxrank --help`` comes from the static table: the same text as the parser every command's
    module builds (names, order, one-line help)."""
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    assert build_parser(()).format_help() == full.format_help()


def test_a_command_imports_only_its_module():
    modules = sorted({f"ctxrank.cli.{c.module}" for c in COMMANDS.values()})
    code = (
        "import sys\n"
        "from ctxrank.cli import main\n"
        f"modules = {modules!r}\n"
        "for argv in (['--help'], ['--version'], ['trian'], ['data-info', '--help'], ['compare', '-x']):\n"
        "    main(argv)\n"
        "    print('loaded:', ' '.join(m for m in modules if m in sys.modules) or 'none')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    loaded = [line[len("loaded: ") :] for line in proc.stdout.splitlines() if line.startswith("loaded:")]
    assert loaded == ["none", "none", "none", "ctxrank.cli.data", "ctxrank.cli.data ctxrank.cli.evaluate"]


def test_usage_errors_print_the_usage(capsys):
    """Only the named command's parser is built; argparse still reports every usage error."""
    for argv, message in (
        (["trian"], "invalid choice: 'trian'"),
        (["train", "--bogus"], "unrecognized arguments: --bogus"),
        (["--debug", "compare", "a"], "the following arguments are required"),
        (["synth", "letor", "--queries", "0"], "expected a positive integer"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("usage: ctxrank") and message in err, (argv, err)
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ctxrank train") and "--model" in out


def test_every_subcommand_has_a_description():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert p.description and len(p.description) > 60, name


# ------------------------------------------------------------------------------------- datasets
def test_datasets_table(capsys):
    rc, out, _ = run(capsys, "datasets")
    assert rc == 0
    for name in ("mq2007", "mq2008", "ohsumed", "mslr-web10k", "mslr-web30k", "istella-s", "yahoo-set1"):
        assert name in out
    assert "embedded" in out and "CTXRANK_DATA" in out
    rc, out, _ = run(capsys, "datasets", "--json")
    rows = {d["name"]: d for d in json.loads(out)}
    assert rows["mq2008"]["present"] == "embedded"
    assert rows["mslr-web30k"]["sha256"] and rows["yahoo-set1"]["url"] is None
    assert rows["ohsumed"]["fold_table"][0] == {"fold": 1, "train": "P2+P3+P4", "valid": "P5", "test": "P1"}


def test_datasets_show(capsys):
    rc, out, _ = run(capsys, "datasets", "show", "WEB10K")
    assert rc == 0
    assert "MSLR-WEB10K" in out and "pytorchltr" in out and "Fold1/train.txt" in out
    rc, out, _ = run(capsys, "datasets", "show", "mq2008")
    assert "arXiv:1306.2597" in out and "S1+S2+S3" in out


# ----------------------------------------------------------------------------------------- demo
def strict_json(text: str):
    """``json.loads`` that refuses the NaN / Infinity literals (every --json output is strict JSON)."""

    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name} in the output")

    return json.loads(text, parse_constant=refuse)


def test_demo(capsys):
    rc, out, err = run(capsys, "demo", "--quick", "--json")
    assert rc == 0, err
    res = strict_json(out)
    assert res["splits"]["train"]["queries"] == 471 and res["splits"]["test"]["items"] == 2874
    for conv in ("standard", "letor4"):
        metrics = res["test_metrics"][conv]
        assert set(metrics) == {"ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"}
        assert all(0.0 < v < 1.0 for v in metrics.values())
    # a trained ranker beats random on MQ2008 (random NDCG@10 ~ 0.35 under the standard convention)
    assert res["test_metrics"]["standard"]["ndcg@10"] > 0.4
    assert res["model"]["params"]["label_gain"] == [0.0, 1.0, 3.0]
    assert res["model"]["best_iteration"] >= 1
    assert res["conventions"]["letor4"]["name"] == "letor4"
    assert res["seconds"] < 60


# the demo experiment at a tiny size: one run, one epoch each, LambdaMART's top 20
TINY_DEMO = [
    *("--runs", "1", "--set", "protocol.top_k=20", "--no-progress"),
    *(f"--set=models.{m}.train.max_epochs=1" for m in ("qilcm", "dlcm", "listnet")),
]


def test_demo_experiment_end_to_end(capsys, tmp_path):
    """The real `ctxrank demo` path (the `make demo` job), not --quick, in-process at a tiny size."""
    rc, out, err = run(capsys, "demo", "--out", str(tmp_path / "demo"), *TINY_DEMO)
    assert rc == 0, err
    assert out.startswith("ctxrank demo: the `demo` experiment")
    # what it says it runs is the spec as the options make it (it said "top 100, 3 seeds" whatever
    # --runs and protocol.top_k were)
    assert "top 20, 1 seed, paired t-tests over test queries; 1 thread a run" in out.splitlines()[0]
    assert "| model | ndcg@1 | ndcg@3 | ndcg@5 | ndcg@10 | map |" in out
    for model in ("lambdamart", "listnet", "dlcm", "qilcm"):
        assert f"| {model} | 0." in out, model
    assert f"report: {tmp_path / 'demo'}/results.json, table.md, table.csv, metrics.png" in out
    for name in ("results.json", "table.md", "table.csv", "metrics.png"):
        assert (tmp_path / "demo" / name).stat().st_size > 0, name
    results = strict_json((tmp_path / "demo" / "results.json").read_text())
    assert results["spec"]["name"] == "demo"
    assert (tmp_path / "demo" / "table.md").read_text() in out
    # last, the comparison with the stored evidence/demo: this tiny demo is another experiment
    assert out.splitlines()[-1].startswith("not compared with")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["demo", "--fold", "2", "--seed", "1"], "--fold, --seed apply to `ctxrank demo --quick` only"),
        (["demo", "--json"], "--json apply to `ctxrank demo --quick` only"),
        (["demo", "--quick", "--runs", "1"], "--runs apply to the demo experiment, not to --quick"),
        (["demo", "--quick", "--set", "x=1"], "--set apply to the demo experiment"),
        (["demo", "--quick", "--fold", "0"], "got fold 0"),
        (["data-info", "--dataset", "mq2008", "--fold", "0"], "got fold 0"),
        (["data-info", "--dataset", "mq2008", "--fold", "6"], "got fold 6"),
    ],
)
def test_options_that_would_be_ignored_or_fall_back_are_errors(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("ctxrank: error:") and needle in err, err


def test_every_json_output_is_strict(capsys, tiny, tmp_path):
    """No NaN literal anywhere: `compare` of one run has no test over runs (p = null, not NaN)."""
    data, scores = tiny
    for name in ("a", "b"):
        rc, out, err = run(capsys, "evaluate", "--data", str(data), "--scores", str(scores), "--json",
                           "--no-relevant", "skip")  # fmt: skip
        assert rc == 0, err
        assert strict_json(out)["per_query"]["map"][1] is None
        (tmp_path / f"{name}.json").write_text(out)
    rc, out, err = run(capsys, "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert rc == 0, err
    res = strict_json(out)
    assert res["metrics"]["map"]["runs"]["p"] is None and res["metrics"]["map"]["runs"]["n"] == 1
    for argv in (
        ["datasets", "--json"],
        ["datasets", "show", "mq2008", "--json"],
        ["data-info", str(data), "--json"],
        ["synth", "choice", "--sessions", "3", "--out", str(tmp_path / "s.csv"), "--json"],
    ):
        rc, out, err = run(capsys, *argv)
        assert rc == 0, (argv, err)
        strict_json(out)


def test_compare_orders_metrics_naturally(capsys, tmp_path):
    """ndcg@3 before ndcg@10 (text order put ndcg@10 first), in the table and in --json."""
    for name, shift in (("a", 0.0), ("b", 0.1)):
        per_query = {m: [0.5 + shift, 0.25, 0.75] for m in ("ndcg@10", "map", "ndcg@3", "ndcg", "ndcg@1")}
        run_file = {"model": name, "seed": 0, "fold": 1, "query_ids": ["1", "2", "3"], "metrics": per_query}
        (tmp_path / f"{name}.json").write_text(json.dumps(run_file))
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    rc, out, err = run(capsys, "compare", a, b)
    assert rc == 0, err
    rows = [
        line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert rows == ["metric", "map", "ndcg", "ndcg@1", "ndcg@3", "ndcg@10"]
    rc, out, err = run(capsys, "compare", a, b, "--json")
    assert list(json.loads(out)["metrics"]) == rows[1:]


def test_version_and_help_import_no_heavy_library():
    code = (
        "import sys\n"
        "from ctxrank.cli import main\n"
        "assert main(['--version']) == 0 and main(['--help']) == 0\n"
        "heavy = ('numpy', 'torch', 'pandas', 'scipy', 'lightgbm', 'sklearn')\n"
        "print(' '.join(m for m in heavy if m in sys.modules) or 'none')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert proc.stdout.splitlines()[-1] == "none"


def test_null_fill_and_no_relevant_have_one_check_each():
    """``null_fill`` was validated three times (the reader, the command line, specs) and config.py took
    ``no_relevant = true`` (== 1.0) that metrics.py refused later: one check each, in ``_checks``."""
    import ast

    from ctxrank import _checks

    for value in (True, 2, "Skip", float("nan")):
        with pytest.raises(ValueError, match="must be 0, 1 or 'skip'"):
            _checks.check_no_relevant("no_relevant", value)
    assert _checks.check_no_relevant("x", 1) == 1.0 and _checks.check_no_relevant("x", "skip") == "skip"
    for value in (True, float("inf"), 1e39, "max"):
        with pytest.raises(ValueError, match="must be one of query_min, letor_min, keep or a finite number"):
            _checks.check_null_fill("null_fill", value)
    from ctxrank.config import resolve_config

    with pytest.raises(ValueError, match=r"train\.no_relevant must be 0, 1 or 'skip', got True"):
        resolve_config(None, [("train.no_relevant", True)])
    rules = [  # a tuple literal of the null_fill rules anywhere else is a second declaration
        path.name
        for path in (REPO / "src" / "ctxrank").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Tuple)
        and [getattr(e, "value", None) for e in node.elts] == list(_checks.NULL_FILL_RULES)
    ]
    assert rules == ["_checks.py"]


# ------------------------------------------------------------------------------------ --null-fill
def _read_as_the_cli(*argv):
    """The RankingData that `ctxrank data-info ARGV` reads (through the shared dataset options)."""
    from ctxrank._declare import from_namespace
    from ctxrank.data.sources import DataSource

    args = build_parser().parse_args(["data-info", *argv])
    return from_namespace(DataSource, {**vars(args), "data_file": args.file}).load()[0]


@pytest.mark.parametrize("rule", [None, "query_min", "letor_min", "-1.5"])
def test_null_fill_gives_the_documented_values(capsys, tmp_path, rule):
    import numpy as np

    from ctxrank.data.letor import read_letor

    path = tmp_path / "nulls.txt"
    path.write_text(NULLS)
    flag = [] if rule is None else ["--null-fill", rule]
    data = _read_as_the_cli(str(path), *flag)
    cells = NULL_CELLS[rule or "query_min"]
    assert {cell: float(data.features[cell]) for cell in cells} == pytest.approx(cells)
    direct = read_letor(path, null_fill=float(rule) if rule == "-1.5" else rule or "query_min", cache=False)
    assert np.array_equal(data.features, direct.features)
    assert data.features[2].tolist() == [pytest.approx(0.3), -2.0, 1.0]  # cells that were not NULL
    rc, out, err = run(capsys, "data-info", str(path), *flag, "--json")
    assert rc == 0, err
    assert json.loads(out)["null_filled"] == 4


@pytest.mark.parametrize("bad", ["median", "LETOR_MIN", "nan", "inf", "-inf", "1e39", ""])
def test_a_bad_null_fill_is_refused_naming_the_valid_values(capsys, tiny, bad):
    rc, _, err = run(capsys, "data-info", str(tiny[0]), f"--null-fill={bad}")
    assert rc == 2
    assert "argument --null-fill: expected query_min, letor_min, keep or a finite number" in err
    assert f"got {bad!r}" in err


def test_null_fill_fills_a_table_and_is_refused_for_a_choice_dataset(capsys, tmp_path, monkeypatch):
    """One option for every format: a table's empty cell is kept missing by default and filled by the
    rule given; a registered choice dataset has no missing value to fill."""
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "t.csv"
    table.write_text("q,y,x\n1,1,0.5\n1,0,\n")
    cols = ["--query-col", "q", "--label-col", "y"]
    rc, out, _ = run(capsys, "data-info", str(table), *cols, "--json")
    assert rc == 0 and json.loads(out)["missing"] == 1 and json.loads(out)["null_filled"] == 0
    rc, out, _ = run(capsys, "data-info", str(table), *cols, "--null-fill", "query_min", "--json")
    assert rc == 0 and json.loads(out)["null_filled"] == 1 and json.loads(out)["missing"] == 0
    for argv in (
        ["data-info", "--dataset", "electricity", "--null-fill", "query_min"],
        ["train", "--dataset", "swissmetro", "--null-fill", "0", "--out", "m"],
    ):
        rc, _, err = run(capsys, *argv)
        assert rc == 2, argv
        assert "--null-fill: --dataset" in err and "has no missing feature value to fill" in err, err
    assert not (tmp_path / "m").exists()


def test_null_fill_reaches_the_loaders_of_a_registered_dataset(tmp_path, capsys):
    """data-info / evaluate (load_split), train (load_fold) and tune (load_split) on OHSUMED Feature-null."""
    import numpy as np

    from ctxrank.data.registry import load_fold
    from ctxrank.data.sources import DataSource, ReadOptions

    base = tmp_path / "ohsumed" / "Feature-null"
    base.mkdir(parents=True)
    for k in range(1, 6):  # query k: feature 1 NULL on the first item, 2 and 5 on the others
        rows = ((1, "NULL"), (0, "2"), (2, "5"))
        rest = " ".join(f"{j}:0" for j in range(2, 46))
        text = "".join(f"{y} qid:{k} 1:{v} {rest}\n" for y, v in rows)
        (base / f"Fold{k}_test.txt").write_text(text)
    where = ["--dataset", "ohsumed", "--variant", "Feature-null", "--data-root", str(tmp_path)]
    assert _read_as_the_cli(*where).features[:, 0].tolist() == [2, 2, 5] * 5  # query_min
    assert _read_as_the_cli(*where, "--null-fill", "letor_min").features[:, 0].tolist() == [0, 2, 5] * 5
    source = DataSource(
        dataset="ohsumed", variant="Feature-null", data_root=str(tmp_path), read=ReadOptions(null_fill=-1.0)
    )
    td = source.load_training(seed=0)
    fold = load_fold("ohsumed", 1, root=tmp_path, variant="Feature-null", null_fill=-1.0)
    for got, want in ((td.train, fold.train), (td.valid, fold.valid), (td.test, fold.test)):
        assert np.array_equal(got.features, want.features) and got.features[0, 0] == -1
    tuning = source.load_training(seed=0, test=False)  # tune: train and valid only
    assert np.array_equal(tuning.train.features, fold.train.features)
    assert np.array_equal(tuning.valid.features, fold.valid.features) and tuning.test is None
    rc, out, _ = run(capsys, "data-info", *where, "--null-fill", "-1", "--json")
    assert rc == 0 and json.loads(out)["null_filled"] == 5


def test_the_library_never_imports_the_cli():
    """Layering: cli -> library only (not even inside a function)."""
    src = REPO / "src" / "ctxrank"
    offenders = [
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if "cli" not in path.relative_to(src).parts[:1]
        and path.name != "__main__.py"
        and re.search(r"^\s*(from|import)\s+ctxrank\.cli\b", path.read_text(), re.M)
    ]
    assert offenders == []


def test_an_evaluation_that_skips_every_query_is_an_error_not_nan(capsys, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("".join(f"0 qid:{q} 1:{i}\n" for i, q in enumerate("11122")))
    (tmp_path / "s.txt").write_text("1\n2\n3\n4\n5\n")
    rc, out, err = run(
        capsys, "evaluate", "--data", str(data), "--scores", str(tmp_path / "s.txt"), "--no-relevant", "skip"
    )
    assert rc == 2 and "nan" not in out
    assert "every one of its 2 queries was skipped for ndcg@1" in err and "--no-relevant 0 or 1" in err
    rc, out, _ = run(capsys, "evaluate", "--data", str(data), "--scores", str(tmp_path / "s.txt"))
    assert rc == 0 and "0.0000" in out  # no-relevant = 0 (the default): counted, as documented


#: flags of other programs that ctxrank's messages quote (git, sbatch, torchrun, tritonserver, the
#: authors' DLCM code)
OTHER_PROGRAMS_FLAGS = {
    "--array", "--check", "--embed", "--model-repository", "--nnodes", "--nproc-per-node", "--porcelain",
    "--standalone", "--untracked-files",
}  # fmt: skip


def test_every_flag_a_message_suggests_exists():
    """A message suggested `--n-features`, which no command has: every `--flag` in a string of the
    package is an option of some ctxrank command (or a listed flag of another program)."""
    import argparse
    import ast

    options: set[str] = set()

    def walk(parser):
        for action in parser._actions:
            options.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    unknown = {}
    for path in sorted((REPO / "src" / "ctxrank").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", node.value):
                    if flag not in options | OTHER_PROGRAMS_FLAGS:
                        unknown.setdefault(flag, path.name)
    assert not unknown, f"messages suggest flags that no command has: {unknown}"
