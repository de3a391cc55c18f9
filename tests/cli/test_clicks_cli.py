"""``ctxrank clicks propensity`` / ``clicks offline`` end to end on tiny simulated logs, ``train --debias``
of LambdaMART and ``--propensity FILE`` (a propensities file as ``train.propensity``), and their
refusals: one line each, before any work."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ctxrank.cli import main
from ctxrank.clicks.propensity import Propensities
from ctxrank.config import RunConfig, TrainConfig
from ctxrank.training.checkpoint import read_meta

LOG = ["--query-col", "session", "--label-col", "click", "--group-col", "query", "--docid-col", "item"]
LOG = [*LOG, "--position-col", "position"]
SYNTH = [
    "synth",
    "clicks",
    "--sessions",
    "1500",
    "--top-k",
    "4",
    "--logging-fraction",
    "0.25",
    "--no-progress",
]
TREES = ["--set", "model_params.n_estimators=5", "--set", "model_params.min_data_in_leaf=5"]


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """``{"shuffled": a log whose shown lists were shuffled whole, "two": the sessions of two logging
    rankers with a ranker column}`` simulated by ``synth clicks`` from 12 labelled queries (pbm, eta 1)."""
    root = tmp_path_factory.mktemp("logs")
    rng = np.random.default_rng(0)
    lines = [
        f"{rng.integers(0, 3)} qid:{q} 1:{rng.random():.3f} 2:{rng.random():.3f} #docid = d{q}-{i}"
        for q in range(12)
        for i in range(6)
    ]
    (root / "labelled.txt").write_text("\n".join(lines) + "\n")
    for name, extra in (
        ("shuffled", ["--randomize", "shuffle_top", "--shuffle-n", "4"]),
        ("a", ["--seed", "1"]),
        ("b", ["--seed", "2", "--logging-fraction", "0.5"]),
    ):
        assert main([*SYNTH, str(root / "labelled.txt"), *extra, "--out", str(root / f"{name}.csv")]) == 0
    a, b = pd.read_csv(root / "a.csv"), pd.read_csv(root / "b.csv")
    b["session"] += a["session"].max() + 1
    two = pd.concat([a.assign(ranker="A"), b.assign(ranker="B")])
    two.to_csv(root / "two.csv", index=False)
    return {"shuffled": root / "shuffled.csv", "two": root / "two.csv"}


def test_propensity_from_randomized_sessions_writes_the_curve(capsys, logs, tmp_path):
    out = tmp_path / "p.json"
    argv = ["clicks", "propensity", logs["shuffled"], *LOG, "--method", "randomized", "--resamples", "200"]
    rc, text, err = run(capsys, *argv, "--out", out)
    assert rc == 0, err
    assert (
        "position  propensity  95% interval" in text and f"train with --debias ips --propensity {out}" in text
    )
    made = Propensities.from_json(out.read_text())
    assert made.method == "randomized" and made.sessions == 1500 and made.n_positions == 4
    # the simulator's examination is (1/r)^1: each interval covers it
    truth = 1.0 / np.arange(1, 5)
    assert np.all(np.array(made.lower) <= truth + 1e-9) and np.all(truth <= np.array(made.upper) + 1e-9)
    # --json prints the same estimate
    rc, text, _ = run(capsys, *argv, "--out", tmp_path / "q.json", "--json")
    assert rc == 0 and json.loads(text)["values"] == list(made.values)


def test_propensity_from_randomized_sessions_compares_the_original_top_items(capsys, logs, tmp_path):
    """--original-position-col: only the rows the logging ranker put first are compared (a swap
    experiment); here one such row a session, shown at a position that varies with the session."""
    frame = pd.read_csv(logs["shuffled"])
    frame["original"] = (frame["position"] + frame["session"]) % 4 + 1
    frame.to_csv(tmp_path / "swapped.csv", index=False)
    argv = ["clicks", "propensity", tmp_path / "swapped.csv", *LOG, "--method", "randomized"]
    rc, _, err = run(capsys, *argv, "--original-position-col", "original", "--out", tmp_path / "p.json")
    assert rc == 0, err
    made = Propensities.from_json((tmp_path / "p.json").read_text())
    assert made.sessions == 1500 and made.n_positions == 4
    rc, _, err = run(capsys, *argv, "--original-position-col", "original", "--min-sessions", "1000",
                     "--out", tmp_path / "q.json")  # fmt: skip
    assert rc == 2 and "too few randomised sessions showing a compared item (position 1: " in err


def test_propensity_by_harvesting_reads_the_ranker_of_each_session(capsys, logs, tmp_path):
    out = tmp_path / "h.json"
    argv = ["clicks", "propensity", logs["two"], *LOG, "--method", "harvesting", "--ranker-col", "ranker"]
    rc, _, err = run(capsys, *argv, "--resamples", "50", "--out", out)
    assert rc == 0, err
    made = Propensities.from_json(out.read_text())
    assert made.method == "harvesting" and made.n_positions == 4
    assert made.values[0] == 1.0 and made.values[1] > made.values[3]


def test_propensity_by_regression_em(capsys, logs, tmp_path):
    frame = pd.read_csv(logs["shuffled"])
    frame[frame["session"] < 300].to_csv(tmp_path / "log.csv", index=False)
    argv = [
        "clicks",
        "propensity",
        tmp_path / "log.csv",
        *LOG,
        "--method",
        "regression-em",
        "--resamples",
        "3",
    ]
    rc, _, err = run(capsys, *argv, "--out", tmp_path / "em.json")
    assert rc == 0, err
    assert Propensities.from_json((tmp_path / "em.json").read_text()).method == "regression_em"


def test_propensity_refusals_come_before_any_work(capsys, logs, tmp_path):
    taken = tmp_path / "taken.json"
    taken.write_text("not ours")
    base = ["clicks", "propensity", logs["two"], *LOG]
    cases = [
        (
            ["--method", "harvesting", "--out", tmp_path / "x.json"],
            "--method harvesting needs --ranker-col COL",
        ),
        (
            ["--method", "randomized", "--ranker-col", "ranker", "--out", tmp_path / "x.json"],
            "--ranker-col is read by --method harvesting only (not randomized)",
        ),
        (
            [
                "--method",
                "harvesting",
                "--min-sessions",
                "5",
                "--ranker-col",
                "ranker",
                "--out",
                tmp_path / "x",
            ],
            "--min-sessions is read by --method randomized only",
        ),
        (
            ["--method", "harvesting", "--ranker-col", "nope", "--out", tmp_path / "x.json"],
            "no column 'nope'; its columns: session, query",
        ),
        (["--method", "randomized", "--out", taken], f"--out {taken} exists; give --overwrite"),
        (["--method", "randomized", "--confidence", "1.5", "--out", tmp_path / "x.json"], "--confidence"),
    ]
    for extra, message in cases:
        rc, _, err = run(capsys, *base, *extra)
        assert rc == 2 and message in err and err.count("\n") == 1, (extra, err)
    assert taken.read_text() == "not ours" and not (tmp_path / "x.json").exists()
    no_positions = [a for a in LOG if a not in ("--position-col", "position")]
    argv = ["clicks", "propensity", logs["shuffled"], *no_positions, "--method", "randomized"]
    rc, _, err = run(capsys, *argv, "--out", tmp_path / "x.json")
    assert rc == 2 and "is not an interaction log: give --position-col COL" in err


def test_a_session_with_two_rankers_is_named(capsys, logs, tmp_path):
    frame = pd.read_csv(logs["two"])
    frame.loc[1, "ranker"] = "B" if frame.loc[0, "ranker"] == "A" else "A"
    frame.to_csv(tmp_path / "mixed.csv", index=False)
    argv = ["clicks", "propensity", tmp_path / "mixed.csv", *LOG, "--method", "harvesting", "--ranker-col"]
    rc, _, err = run(capsys, *argv, "ranker", "--out", tmp_path / "h.json")
    assert rc == 2 and f"session '{frame.loc[0, 'session']}' has more than one ranker" in err


@pytest.fixture(scope="module")
def propensity_file(logs, tmp_path_factory):
    out = tmp_path_factory.mktemp("p") / "p.json"
    argv = ["clicks", "propensity", logs["shuffled"], *LOG, "--method", "randomized", "--resamples", "50"]
    assert main([*map(str, argv), "--out", str(out)]) == 0
    return out


def test_offline_estimate_of_the_logged_ranking_is_its_click_rate(capsys, logs, propensity_file, tmp_path):
    """The ranking that was shown, re-ranked by its own positions: IPS of the expected clicks in the top
    k (every weight 1/p_r times lambda(r) = p_r) is exactly the log's clicks per session."""
    frame = pd.read_csv(logs["shuffled"])
    scores = tmp_path / "scores.txt"
    scores.write_text("\n".join(str(-p) for p in frame["position"]) + "\n")
    argv = ["clicks", "offline", logs["shuffled"], *LOG, "--scores", scores, "--propensity", propensity_file]
    rc, text, err = run(capsys, *argv, "--resamples", "100", "--json")
    assert rc == 0, err
    ips = json.loads(text)["estimates"]["ips"]
    assert ips["value"] == pytest.approx(frame["click"].sum() / frame["session"].nunique(), rel=1e-12)
    assert ips["low"] <= ips["value"] <= ips["high"] and ips["sessions"] == 1500
    rc, text, _ = run(capsys, *argv, "--resamples", "100", "--metric", "dcg", "--k", "3", "--clip", "10")
    assert (
        rc == 0
        and "estimator   value  95% interval" in text
        and "dcg@3, inverse-propensity weights clipped" in text
    )


def test_train_lambdamart_with_debias_then_evaluate_it_offline(capsys, logs, propensity_file, tmp_path):
    for debias, extra in (("ips", ["--propensity", propensity_file]), ("pal", [])):
        out = tmp_path / debias
        rc, _, err = run(capsys, "train", "--model", "lambdamart", "--data", logs["shuffled"], *LOG,
                         "--debias", debias, *extra, *TREES, "--out", out)  # fmt: skip
        assert rc == 0, err
        meta = read_meta(out)
        assert meta["run_config"]["train"]["debias"] == debias
        assert meta["params"]["debias"] == {"ips": "ips", "pal": "lightgbm"}[debias]
        assert "debias" not in meta["run_config"]["model_params"]
    # the propensities file's values, not its path, are what the saved run records
    expected = list(Propensities.from_json(propensity_file.read_text()).values)
    assert read_meta(tmp_path / "ips")["run_config"]["train"]["propensity"] == expected
    argv = ["clicks", "offline", logs["shuffled"], *LOG, "--model", tmp_path / "ips"]
    rc, text, err = run(capsys, *argv, "--propensity", propensity_file, "--resamples", "50")
    assert rc == 0, err
    assert f"ranker      model {tmp_path / 'ips'}" in text and text.count("[") == 3
    # DR's reward model: the trained model's score, calibrated on the log
    rc, text, err = run(capsys, *argv, "--propensity", propensity_file, "--resamples", "50", "--clip", "2",
                        "--reward-model", tmp_path / "ips")  # fmt: skip
    assert rc == 0, err
    assert f"DR's reward model the score of {tmp_path / 'ips'}, calibrated on the log" in text
    assert "\ndr " in text and "(corrects the clipping)" in text
    rc, _, err = run(capsys, "train", "--model", "lambdamart", "--data", logs["shuffled"], *LOG,
                     "--debias", "dla", *TREES, "--out", tmp_path / "dla")  # fmt: skip
    assert rc == 2 and "train.debias = 'dla': lambdamart learns from a click log with" in err
    assert not (tmp_path / "dla").exists()


def test_offline_prints_dr_beside_ips_and_snips(capsys, logs, propensity_file, tmp_path):
    """DR with the default reward model (fitted on the log's features): IPS exactly without clipping,
    its own estimate with clipped weights."""
    frame = pd.read_csv(logs["shuffled"])
    scores = tmp_path / "scores.txt"
    scores.write_text("\n".join(str(p) for p in frame["position"]) + "\n")  # the shown order reversed
    argv = ["clicks", "offline", logs["shuffled"], *LOG, "--scores", scores, "--propensity", propensity_file]
    rc, text, err = run(capsys, *argv, "--resamples", "50", "--json")
    assert rc == 0, err
    est = json.loads(text)["estimates"]
    assert list(est) == ["ips", "snips", "dr"] and est["dr"]["value"] == pytest.approx(est["ips"]["value"])
    rc, text, err = run(capsys, *argv, "--resamples", "50", "--clip", "1.5", "--json")
    clipped = json.loads(text)["estimates"]
    assert clipped["dr"]["value"] != pytest.approx(clipped["ips"]["value"])
    assert clipped["dr"]["low"] <= clipped["dr"]["value"] <= clipped["dr"]["high"]
    rc, text, err = run(capsys, *argv, "--resamples", "50")
    assert rc == 0 and "DR's reward model fitted on the log's 2 features" in text and text.count("[") == 3
    assert "dr: the reward model's metric plus the weighted residual (equal to ips" in text


def test_offline_refusals(capsys, logs, propensity_file, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"values": [1.0]}')
    base = ["clicks", "offline", logs["shuffled"], *LOG]
    scores = tmp_path / "s.txt"
    scores.write_text("1\n")
    cases = [
        (["--propensity", propensity_file], "give exactly one of --model DIR or --scores FILE"),
        (["--propensity", propensity_file, "--scores", scores, "--model", tmp_path], "give exactly one of"),
        (
            ["--propensity", bad, "--scores", scores],
            f"propensities file '{bad}': propensities JSON: unknown keys",
        ),
        (["--propensity", tmp_path / "none.json", "--scores", scores], "cannot read it (No such file"),
        (["--propensity", propensity_file, "--scores", scores, "--clip", "0.5"], "--clip: expected a finite"),
        (["--propensity", propensity_file, "--scores", scores], "scores"),  # one score for 6000 rows
        (
            ["--propensity", propensity_file, "--scores", scores, "--reward-model", tmp_path / "none"],
            f"--reward-model {tmp_path / 'none'}: no such model directory or .onnx file",
        ),
    ]
    for extra, message in cases:
        rc, _, err = run(capsys, *base, *extra)
        assert rc == 2 and message in err and err.count("\n") == 1, (extra, err)


def test_train_propensity_reads_a_propensities_file(tmp_path):
    good = tmp_path / "p.json"
    good.write_text(Propensities.given([1.0, 0.5, 0.25]).to_json())
    assert TrainConfig(debias="ips", propensity=str(good)).propensity == (1.0, 0.5, 0.25)
    config = RunConfig.from_dict({"model": "listnet", "train": {"debias": "ips", "propensity": str(good)}})
    assert config.to_dict()["train"]["propensity"] == [1.0, 0.5, 0.25]  # saved: the values
    above = tmp_path / "above.json"
    above.write_text(Propensities.given([1.0, 1.2]).to_json())  # a relative estimate above position 1
    with pytest.raises(ValueError, match=r"propensities file '.*above.json': train.propensity: the exami"):
        TrainConfig(debias="ips", propensity=str(above))
    with pytest.raises(ValueError, match=r"propensities file '.*missing.json': cannot read it"):
        TrainConfig(debias="ips", propensity=str(tmp_path / "missing.json"))
    (tmp_path / "text.json").write_text("[1, 0.5]")
    with pytest.raises(ValueError, match=r"'.*text.json': propensities JSON: expected an object"):
        TrainConfig(debias="ips", propensity=str(tmp_path / "text.json"))


def test_offline_dr_needs_features_or_a_reward_model(capsys, logs, propensity_file, tmp_path):
    frame = pd.read_csv(logs["shuffled"])
    frame[["session", "query", "item", "position", "click"]].to_csv(tmp_path / "bare.csv", index=False)
    scores = tmp_path / "s.txt"
    scores.write_text("\n".join("1" for _ in range(len(frame))) + "\n")
    argv = [
        "clicks",
        "offline",
        tmp_path / "bare.csv",
        *LOG,
        "--scores",
        scores,
        "--propensity",
        propensity_file,
    ]
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and err.count("\n") == 1
    assert "no feature column for DR's reward model: give --numeric COLS or --reward-model DIR" in err


@pytest.fixture(scope="module")
def labelled_file(tmp_path_factory):
    """12 labelled queries of 6 items, two features (a LETOR text file)."""
    rng = np.random.default_rng(1)
    lines = [
        f"{rng.integers(0, 3)} qid:{q} 1:{rng.random():.3f} 2:{rng.random():.3f}"
        for q in range(12)
        for _ in range(6)
    ]
    path = tmp_path_factory.mktemp("labelled") / "labelled.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_coverage_writes_the_record_and_prints_its_table(capsys, labelled_file, tmp_path):
    out = tmp_path / "cov"
    argv = ["clicks", "coverage", labelled_file, "--logs", "2", "--sessions", "300", "--top-k", "4"]
    argv += ["--logging-fraction", "0.25", "--k", "3", "--resamples", "30", "--no-progress", "--out", out]
    rc, text, err = run(capsys, *argv)
    assert rc == 0, err
    record = json.loads((out / "coverage.json").read_text())
    assert record["parameters"]["logs"] == 2 and len(record["rows"]) == 2 * 4 * 2 * 7
    assert record["environment"]["versions"]["ctxrank"] and record["counts"]["ips"]["checked"] == 16
    assert "| estimator | labels (of 4) |" in text and f"wrote {out / 'coverage.json'} (112 checks" in text
    rc, _, err = run(capsys, *argv)  # the record exists
    assert rc == 2 and "exists; give --overwrite" in err and err.count("\n") == 1
    rc, text, err = run(capsys, *argv, "--overwrite", "--metrics", "dcg", "--json")
    assert rc == 0, err
    assert json.loads(text)["counts"]["dr"]["checked"] == 8


def test_coverage_refusals_come_before_any_work(capsys, labelled_file, tmp_path):
    base = ["clicks", "coverage", labelled_file, "--out", tmp_path / "cov"]
    cases = [
        (["--clip", "0.5"], "clip: expected a finite maximum weight >= 1, got 0.5"),
        (["--metrics", "clicks,ndcg"], "--metrics: expected distinct names among clicks, dcg"),
        (["--eta", "-1"], "eta must be a finite number >= 0"),
        (["--eps-minus", "2"], "eps_minus must be a probability in [0, 1]"),
        (["--sessions", "1"], "sessions: expected an integer >= 2"),
        (["--confidence", "2"], "confidence: expected a level in (0, 1)"),
        (["--logging-fraction", "0"], "fraction of training queries must be in (0, 1]"),
    ]
    for extra, message in cases:
        rc, _, err = run(capsys, *base, *extra)
        assert rc == 2 and message in err and err.count("\n") == 1, (extra, err)
    assert not (tmp_path / "cov").exists()
