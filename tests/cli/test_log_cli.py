"""An interaction log on the command line: `data-info` summarises it, `train --position-col` learns
from it (LambdaMART), `predict` scores rows without their position, a bad log is one clear line."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from ctxrank.cli import main
from ctxrank.training.checkpoint import read_meta

LOG = """session,query,item,pos,click,f1
s1,q1,a,2,0,0.1
s1,q1,b,1,1,0.5
s1,q1,c,3,1,0.2
s2,q1,a,1,0,0.5
s2,q1,c,2,1,0.2
s3,q2,d,1,0,0.3
s3,q2,e,2,0,0.9
"""
LOG_COLS = ["--query-col", "session", "--label-col", "click", "--docid-col", "item", "--position-col", "pos"]
GROUP = ["--group-col", "query"]


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def tiny_log(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(LOG)
    return path


@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    """60 sessions of 10 queries, 2..5 shown items each, rows shuffled."""
    rng = np.random.default_rng(2)
    rows = [
        {"session": f"s{s}", "query": f"q{s % 10}", "item": f"d{rng.integers(40)}", "pos": p,
         "click": int(rng.random() < 0.6 / p), "f1": rng.normal(), "f2": rng.normal()}
        for s in range(60)
        for p in range(1, int(rng.integers(2, 6)) + 1)
    ]  # fmt: skip
    path = tmp_path_factory.mktemp("log") / "log.csv"
    pd.DataFrame(rows).sample(frac=1.0, random_state=0).to_csv(path, index=False)
    return path


def test_data_info_summarises_a_log(capsys, tiny_log):
    rc, out, _ = run(capsys, "data-info", tiny_log, *LOG_COLS, *GROUP)
    assert rc == 0
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert lines["sessions"].split()[-1] == "3"
    assert lines["distinct queries (--group-col)"].split()[-1] == "2"
    assert "mean 1.000  (sessions by count: 0: 1  1: 1  2: 1)" in lines["interactions per session"]
    assert lines["sessions without interaction"].endswith("1 (33.3%)")
    assert lines["CTR at position 1"].endswith("0.3333 (1 / 3)")
    assert lines["CTR at position 3"].endswith("1.0000 (1 / 1)")
    assert "features                                    1" in out  # f1 only: not the position
    rc, out, _ = run(capsys, "data-info", tiny_log, *LOG_COLS, "--numeric", "f1", "--json")
    log = json.loads(out)["log"]
    assert log["queries"] is None and log["sessions_without_interaction"] == 1
    assert [c["ctr"] for c in log["ctr_by_position"]] == [1 / 3, 1 / 3, 1.0]


@pytest.mark.parametrize(
    "row, message",
    [
        ("s2,q1,c,3,1,0.2", "data row 5: session 's2': position 3 but no row at position 2"),
        ("s2,q1,c,1,1,0.2", r"data row 5: session 's2': position 1 is repeated \(also at data row 4\)"),
        ("s2,q1,c,,1,0.2", "data row 5: session 's2': missing position in column 'pos'"),
    ],
    ids=["gap", "repeated", "missing"],
)
def test_a_bad_log_is_one_line_naming_file_session_and_row(capsys, tmp_path, row, message):
    path = tmp_path / "bad.csv"
    path.write_text(LOG.replace("s2,q1,c,2,1,0.2", row))
    train = ["train", "--model", "lambdamart", "--data", path, "--out", tmp_path / "m"]
    for command in (["data-info", path], train):
        rc, _, err = run(capsys, *command, *LOG_COLS, *GROUP)
        assert rc != 0 and "Traceback" not in err and not (tmp_path / "m").exists()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and re.search(rf"error: {re.escape(str(path))}: {message}", lines[0])


def test_train_and_predict_lambdamart_on_a_log(capsys, tmp_path, big_log):
    out = tmp_path / "m"
    argv = ["train", "--model", "lambdamart", "--data", big_log, *LOG_COLS, *GROUP]
    rc, _, err = run(capsys, *argv, "--set", "model_params.n_estimators=5", "--out", out, "--no-progress")
    assert rc == 0, err
    table = read_meta(out)["table"]
    assert table["numeric"] == ["f1", "f2"] and table["position"] == "pos" and table["group"] == "query"
    scores = tmp_path / "s.txt"
    rc, _, err = run(capsys, "predict", "--model", out, "--data", big_log, "--output", scores)
    assert rc == 0, err
    without = tmp_path / "no_position.csv"
    pd.read_csv(big_log).drop(columns="pos").to_csv(without, index=False)
    rc, _, err = run(capsys, "predict", "--model", out, "--data", without, "--output", tmp_path / "s2.txt")
    assert rc == 0, err
    assert scores.read_text() == (tmp_path / "s2.txt").read_text()


def test_the_summary_line_reads_the_summarys_validation_metric_not_its_text():
    from ctxrank.cli.train import _baseline_summary
    from ctxrank.fit_summary import FitSummary

    summary = FitSummary(
        best_iteration=3,
        metric="ndcg@10",
        best_valid_metric=1.25,
        validation="estimated (details), more",
        validation_metric="IPS estimate of DCG@10",
    )
    assert _baseline_summary(summary) == "best iteration 3 (valid IPS estimate of DCG@10 1.2500)"


@pytest.mark.parametrize("model", ["lambdamart", "mlp"])
def test_the_summary_line_names_the_ips_estimate_it_validated_by(capsys, tmp_path, big_log, model):
    """An IPS estimate of DCG@10 (above 1 here) is never printed as the run's ndcg@10."""
    size = "model_params.n_estimators=5" if model == "lambdamart" else "train.max_epochs=1"
    argv = ["train", "--model", model, "--data", big_log, *LOG_COLS, *GROUP, "--debias", "ips", "--set", size]
    rc, out, err = run(capsys, *argv, "--propensity-eta", "1", "--out", tmp_path / "m", "--no-progress")
    assert rc == 0, err
    assert "(valid IPS estimate of DCG@10 " in out + err and "(valid ndcg@10 " not in out + err
