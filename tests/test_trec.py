"""TREC runs and qrels: ``ctxrank predict --format trec`` writes a run file trec_eval / ir-measures read;
``ctxrank evaluate --run`` scores run files against qrels (a file, or the labels of the data) with
ir-measures, under metric names of trec_eval and of ir-measures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxrank.cli import main


def _letor(path, seed=0, docids=True, shuffle=False):
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(12):
        for i in range(8):
            x = rng.normal(size=3)
            y = int(x[0] > 0.3) + int(x[0] > 1.2)
            doc = f" #docid = D{q}-{i}" if docids else ""
            lines.append(f"{y} qid:{q} 1:{x[0]:.4f} 2:{x[1]:.4f} 3:{x[2]:.4f}{doc}")
    if shuffle:  # the rows of each query in another order
        blocks = [lines[k : k + 8] for k in range(0, len(lines), 8)]
        lines = [row for block in blocks for row in rng.permutation(block).tolist()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(where, name, *sets):
    data = _letor(where / "train.txt")
    out = where / name
    argv = ["train", "--model", name, "--data", str(data), "--out", str(out), "--no-progress"]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 0
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """LambdaMART: scores with ties (items in the same leaves)."""
    return _train(tmp_path_factory.mktemp("trec"), "lambdamart")


@pytest.fixture(scope="module")
def smooth(tmp_path_factory):
    """ListNet: scores without ties, so every tie rule ranks alike."""
    return _train(tmp_path_factory.mktemp("trec"), "listnet", "train.max_epochs=3")


def _run(capsys, *argv):
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_predict_writes_a_trec_run_ranked_by_score(model, tmp_path, capsys):
    data = _letor(tmp_path / "test.txt", seed=1)
    run = tmp_path / "run.txt"
    rc, _, err = _run(capsys, "predict", "--model", str(model), "--data", str(data), "--format", "trec",
                      "--run-name", "lm-1", "-o", str(run))  # fmt: skip
    assert rc == 0, err
    rows = [line.split() for line in run.read_text().splitlines()]
    assert len(rows) == 96 and {r[1] for r in rows} == {"Q0"} and {r[5] for r in rows} == {"lm-1"}
    for q in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == q]
        assert [int(r[3]) for r in mine] == list(range(1, 9))
        scores = [float(r[4]) for r in mine]
        assert scores == sorted(scores, reverse=True) and all(r[2].startswith(f"D{q}-") for r in mine)
    rc, out, _ = _run(capsys, "predict", "--model", str(model), "--data", str(data), "-o", "-")
    assert sorted(float(r[4]) for r in rows) == sorted(float(v) for v in out.split())  # the same scores


def test_the_run_does_not_depend_on_the_row_order(model, tmp_path, capsys):
    a, b = _letor(tmp_path / "a.txt", seed=2), _letor(tmp_path / "b.txt", seed=2, shuffle=True)
    for path in (a, b):
        argv = ["predict", "--model", str(model), "--data", str(path), "--format", "trec"]
        assert main([*argv, "-o", str(path.with_suffix(".run"))]) == 0
    assert a.with_suffix(".run").read_text() == b.with_suffix(".run").read_text()


def test_evaluate_run_agrees_with_ctxranks_own_metrics_and_names(smooth, tmp_path, capsys):
    """ir-measures (trec_eval's linear-gain nDCG) on the run = ctxrank's NDCG with --gain linear on the
    same scores (no ties: tie rules differ); trec_eval's and ir-measures' names give one value."""
    data = _letor(tmp_path / "test.txt", seed=3, docids=False)  # item ids: the rows' numbers
    run, scores = tmp_path / "run.txt", tmp_path / "scores.txt"
    argv = ["predict", "--model", str(smooth), "--data", str(data)]
    assert main([*argv, "--format", "trec", "-o", str(run)]) == 0
    assert main([*argv, "-o", str(scores)]) == 0
    assert len(set(np.loadtxt(scores).tolist())) == 96  # no tie
    capsys.readouterr()
    rc, out, err = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--json",
                        "--metrics", "ndcg_cut_10,nDCG@10,map,AP,recip_rank")  # fmt: skip
    assert rc == 0, err
    values = json.loads(out)["runs"][str(run)]
    assert values["ndcg_cut_10"] == values["nDCG@10"] and values["map"] == values["AP"]  # one measure each
    assert json.loads(out)["measures"]["recip_rank"] == "RR"
    rc, out, err = _run(capsys, "evaluate", "--scores", str(scores), "--data", str(data), "--json",
                        "--gain", "linear", "--metrics", "ndcg@10,map,mrr")  # fmt: skip
    assert rc == 0, err
    own = json.loads(out)["metrics"]
    assert values["nDCG@10"] == pytest.approx(own["ndcg@10"], abs=1e-9)
    assert values["AP"] == pytest.approx(own["map"], abs=1e-9)
    assert values["recip_rank"] == pytest.approx(own["mrr"], abs=1e-9)


def test_a_qrels_file_judges_as_the_labels_do(model, tmp_path, capsys):
    from ctxrank.data.letor import read_letor
    from ctxrank.data.trec import item_ids, judgments, write_lines

    data = _letor(tmp_path / "test.txt", seed=4)
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    argv = ["predict", "--model", str(model), "--data", str(data), "--format", "trec", "-o", str(run)]
    assert main(argv) == 0
    ranking = read_letor(data)
    write_lines([f"{q} 0 {d} {y}" for q, d, y in judgments(ranking, item_ids(ranking))], qrels)
    capsys.readouterr()
    by_file = _run(capsys, "evaluate", "--run", str(run), "--qrels", str(qrels), "--json")
    by_labels = _run(capsys, "evaluate", "--run", str(run), "--data", str(data), "--json")
    assert json.loads(by_file[1])["runs"] == json.loads(by_labels[1])["runs"]
    rc, out, _ = _run(capsys, "evaluate", "--run", str(run), "--run", str(run), "--qrels", str(qrels))
    assert rc == 0 and "nDCG@10" in out and out.count(str(run)) == 2  # one column a run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run", "RUN", "--scores", "x"], "give either --run FILE or --scores, not both"),
        (["--qrels", "QRELS", "--scores", "x", "--data", "DATA"], "--qrels judges TREC run files"),
        (["--run", "RUN"], "needs the judgments: --qrels FILE, or the labelled data"),
        (["--run", "RUN", "--qrels", "QRELS", "--metrics", "bogus"], "unknown measure 'bogus'"),
        (["--run", "DATA", "--qrels", "QRELS"], "not a TREC run file"),
    ],
)
def test_evaluate_run_errors_are_one_line(model, tmp_path, capsys, argv, message):
    data = _letor(tmp_path / "test.txt", seed=5)
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run.write_text("0 Q0 D0-0 1 1.5 r\n")
    qrels.write_text("0 0 D0-0 1\n")
    names = {"RUN": str(run), "QRELS": str(qrels), "DATA": str(data)}
    rc, _, err = _run(capsys, "evaluate", *(names.get(a, a) for a in argv))
    assert rc == 2 and message in err and err.count("\n") == 1, err


def test_a_run_name_must_be_one_word(model, tmp_path, capsys):
    data = _letor(tmp_path / "test.txt", seed=6)
    rc, _, err = _run(capsys, "predict", "--model", str(model), "--data", str(data), "--format", "trec",
                      "--run-name", "two words", "-o", "-")  # fmt: skip
    assert rc == 2 and "the run name must be one word" in err
