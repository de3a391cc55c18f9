"""``ctxrank synth clicks``: the written log, its truth file, reading it back, the parts' resumption and
the refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctxrank.cli import main
from ctxrank.data.ranking_data import RankingData


@pytest.fixture
def letor(tmp_path):
    """12 queries of 6 items, 2 features, labels 0..2."""
    rng = np.random.default_rng(0)
    lines = [
        f"{rng.integers(0, 3)} qid:{q} 1:{rng.random():.3f} 2:{rng.random():.3f} #docid = d{q}-{i}"
        for q in range(12)
        for i in range(6)
    ]
    path = tmp_path / "labelled.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


BASE = ("synth", "clicks", "--sessions", "300", "--top-k", "4", "--logging-fraction", "0.25", "--no-progress")


def test_writes_a_log_that_reads_back_as_one(capsys, letor, tmp_path):
    out = tmp_path / "log.csv"
    rc, text, err = run(
        capsys, *BASE, letor, "--click-model", "dcm", "--continuation", "0.5,0.3", "--out", out
    )
    assert rc == 0, err
    assert "wrote 300 sessions, " in text and "log.truth.csv" in text and "SYNTHETIC" in text
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["session", "query", "item", "position", "click", "f1", "f2"]
    truth = pd.read_csv(tmp_path / "log.truth.csv")
    columns = ["session", "item", "position", "original_position", "true_label", "click_probability"]
    assert list(truth.columns) == columns
    assert frame["session"].nunique() == 300 and set(frame["position"]) == {1, 2, 3, 4}
    assert frame["item"].str.match(r"d\d+-\d$").all() and set(frame["click"]) <= {0, 1}
    log = RankingData.from_frame(frame, query="session", label="click", numeric=["f1", "f2"])
    back = RankingData.from_arrays(
        frame[["f1", "f2"]], frame["click"], frame["session"], group=None, position=frame["position"]
    )
    np.testing.assert_array_equal(back.labels, log.labels)
    assert back.shown_positions.max() == 4
    # the same options, the same log (seeded)
    again = tmp_path / "again.parquet"
    argv = (*BASE, letor, "--click-model", "dcm", "--continuation", "0.5,0.3", "--out", again)
    assert run(capsys, *argv)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(again).astype(str), pd.read_csv(out, dtype=str))


def test_parts_resume_and_refuse_another_configuration(capsys, letor, tmp_path):
    out = tmp_path / "parts"
    argv = (*BASE, letor, "--randomize", "swap", "--part-sessions", "100", "--out", out)
    rc, text, err = run(capsys, *argv)
    assert rc == 0, err
    assert "3 Parquet part(s)" in text and "(3 written now" in text
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        *[f"part-0000{i}.parquet" for i in range(3)],
        *[f"truth-0000{i}.parquet" for i in range(3)],
    ]
    first = pd.read_parquet(out / "part-00001.parquet")
    (out / "part-00001.parquet").unlink()
    rc, text, err = run(capsys, *argv)
    assert rc == 0 and "(1 written now, the others by an earlier run" in text, err
    pd.testing.assert_frame_equal(pd.read_parquet(out / "part-00001.parquet"), first)
    rc, _, err = run(capsys, *argv[:-2], "--eta", "2", "--out", out)
    assert rc == 2 and "another configuration (differing: click_model)" in err and "Traceback" not in err
    assert "training the logging ranker" not in err  # refused before any work
    assert (out / "part-00001.parquet").exists()  # nothing touched
    rc, text, err = run(capsys, *argv[:-2], "--eta", "2", "--overwrite", "--out", out)
    assert rc == 0, err
    assert not pd.read_parquet(out / "part-00001.parquet").equals(first)  # started over


def test_refusals(capsys, letor, tmp_path):
    taken = tmp_path / "taken.csv"
    taken.write_text("mine\n")
    rc, _, err = run(capsys, *BASE, letor, "--out", taken)
    assert rc == 2 and f"--out {taken} exists; give --overwrite" in err
    assert taken.read_text() == "mine\n"
    rc, _, err = run(
        capsys, *BASE, letor, "--click-model", "cascade", "--eta", "2", "--out", tmp_path / "c.csv"
    )
    assert (
        rc == 2
        and "--eta does not apply to --click-model cascade; its parameters: --eps-minus, --eps-plus" in err
    )
    rc, _, err = run(capsys, *BASE, letor, "--eps-minus", "1.5", "--out", tmp_path / "c.csv")
    assert rc == 2 and "eps_minus must be a probability in [0, 1], got 1.5" in err
    rc, _, err = run(capsys, *BASE, letor, "--randomize", "shuffle_top", "--out", tmp_path / "c.csv")
    assert rc == 2 and "goes with randomize='shuffle_top'" in err
    assert "training the logging ranker" not in err  # refused before any work
    rc, _, err = run(capsys, *BASE, letor, "--logging-fraction", "2", "--out", tmp_path / "c.csv")
    assert rc == 2 and "fraction of training queries must be in (0, 1], got 2.0" in err
    assert "training the logging ranker" not in err
    assert not (tmp_path / "c.csv").exists()
