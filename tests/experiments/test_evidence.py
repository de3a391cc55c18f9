"""Evidence directories: written from a run store, read back, and the report regenerated equal."""

import gzip
import json
import re

import pytest

from ctxrank._checks import OptionError
from ctxrank.cli import experiment as cli_experiment
from ctxrank.cli import flag_text, main
from ctxrank.cli.experiment import against_stored_evidence
from ctxrank.experiments import RunStore, load_spec
from ctxrank.experiments.evidence import read_evidence, record_digests, resume_from_evidence, spec_from_record
from tests.experiments.test_experiments import _letor_spec


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ev")
    spec = _letor_spec(tmp, runs=3)
    out, ev = tmp / "out", tmp / "evidence"
    argv = ["experiment", str(spec), "--out", str(out), "--evidence", str(ev), "--no-progress"]
    assert main([*argv, "--set", "report.no_relevant=\"skip\""]) == 0
    return out, ev


def test_the_report_regenerated_from_evidence_equals_the_original(evidence, tmp_path, capsys):
    out, ev = evidence
    assert sorted(p.name for p in ev.iterdir()) == ["runs.json.gz", "runs.parquet", "spec.json"]
    capsys.readouterr()
    assert main(["report", str(ev), "--out", str(tmp_path / "again")]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "again" / "table.md").read_text() == (out / "table.md").read_text()
    assert printed.startswith((out / "table.md").read_text())
    assert (tmp_path / "again" / "table.csv").read_text() == (out / "table.csv").read_text()
    old, new = (json.loads((d / "results.json").read_text()) for d in (out, tmp_path / "again"))
    for key in ("table", "comparisons", "test", "runs", "splits", "compute", "run_code", "fingerprint"):
        assert new[key] == old[key], key
    assert main(["report", str(ev), "--out", str(tmp_path / "again")]) == 0  # again into its own output
    assert main(["report", str(ev)]) == 0  # a temporary directory: only printed


def test_evidence_keeps_every_value_and_record_of_the_runs(evidence):
    out, ev = evidence
    spec, runs, _ = read_evidence(ev)
    stored = json.loads((out / "experiment.json").read_text())
    assert len(runs) == 9 and spec.fingerprint() == stored["fingerprint"]
    for run in runs:
        path = out / "runs" / run["model"] / f"seed{run['seed']}-fold{run['fold']}.json"
        original = json.loads(path.read_text())
        assert run["query_ids"] == original["query_ids"] and run["config"] == original["config"]
        assert run["context"] == original["context"] and run["split"] == original["split"]
        for k, values in original["metrics"].items():  # exact float64, NaN (null) included
            assert [None if v != v else v for v in run["metrics"][k]] == values


def test_tampered_or_foreign_evidence_is_refused(evidence, tmp_path):
    out, ev = evidence
    record = json.loads((ev / "spec.json").read_text())
    record["spec"]["models"]["mnl"]["model_params"] = {"l2": [0.5]}
    with pytest.raises(ValueError, match="does not match its fingerprint"):
        spec_from_record(record)
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("spec.json", "runs.parquet"):
        (bad / name).write_bytes((ev / name).read_bytes())
    meta = json.loads(gzip.decompress((ev / "runs.json.gz").read_bytes()))
    meta[0]["evidence_metrics"].append("ndcg@7")
    (bad / "runs.json.gz").write_bytes(gzip.compress(json.dumps(meta).encode()))
    with pytest.raises(ValueError, match=r"runs\.json\.gz: its SHA-256 differs from the one"):
        read_evidence(bad)
    record_digests(bad)  # a forger recomputes the digests: the contents are still checked
    with pytest.raises(ValueError, match=r"no column of the metric\(s\) \['ndcg@7'\]"):
        read_evidence(bad)
    with pytest.raises(ValueError, match="not an evidence directory"):
        read_evidence(out)
    # an edited spec record is checked as a spec (before its fingerprint, which a forger can recompute):
    # names that would make ctxrank write outside the report's directory, and run counts that would
    # exhaust memory, are refused
    def rename(d):
        d["models"]["../../escaped"] = d["models"].pop("mnl")

    for edit, match in (
        (rename, "model name '../../escaped'"),
        (lambda d: d.__setitem__("runs", 10**9), r"\[runs\] count must be at most 100,000"),
    ):
        forged = json.loads((ev / "spec.json").read_text())
        edit(forged["spec"])
        with pytest.raises(ValueError, match=match):
            spec_from_record(forged)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main(["report", str(ev), "--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def _copy(ev, to):
    to.mkdir()
    for file in ev.iterdir():
        (to / file.name).write_bytes(file.read_bytes())
    return to


def test_a_changed_added_or_removed_evidence_file_is_refused_naming_it(evidence, tmp_path, capsys):
    """spec.json records the SHA-256 of every other file as the evidence is written; a hand-edited
    runs.parquet (which would change the report's tables), a file added or one removed is refused by
    `ctxrank report` in one line naming the file. Evidence without digests is read with a warning."""
    import hashlib

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    _, ev = evidence
    record = json.loads((ev / "spec.json").read_text())
    files = ("runs.parquet", "runs.json.gz")
    assert record["digests"] == {name: hashlib.sha256((ev / name).read_bytes()).hexdigest() for name in files}
    edited = _copy(ev, tmp_path / "edited")
    table = pq.read_table(edited / "runs.parquet")
    column = table.column_names.index("ndcg@10")
    table = table.set_column(column, "ndcg@10", pc.add(table.column("ndcg@10"), 0.01))
    pq.write_table(table, edited / "runs.parquet", compression="zstd")
    added = _copy(ev, tmp_path / "added")
    (added / "units.json.gz").write_bytes(gzip.compress(b"[]"))
    for where, message in [
        (edited, "runs.parquet: its SHA-256 differs from the one spec.json records"),
        (added, "units.json.gz: not a file of this evidence"),
    ]:
        capsys.readouterr()
        assert main(["report", str(where)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    (added / "units.json.gz").unlink()
    legacy = json.loads((added / "spec.json").read_text())
    del legacy["digests"]
    (added / "spec.json").write_text(json.dumps(legacy, indent=1) + "\n")
    with pytest.warns(UserWarning, match="records no digests of its files"):
        read_evidence(added)
    capsys.readouterr()
    assert main(["report", str(added)]) == 0
    assert "ctxrank: warning: " in capsys.readouterr().err
    assert record_digests(added) == record["digests"]
    assert json.loads((added / "spec.json").read_text()) == record


def test_every_evidence_directory_of_the_repository_records_its_digests():
    from ctxrank.experiments.evidence import check_digests

    specs = sorted((REPO / "evidence").glob("*/spec.json"))
    assert specs
    for path in specs:
        record = json.loads(path.read_text())
        assert "digests" in record, f"{path}: no digests (record them: evidence.record_digests)"
        check_digests(path.parent, record)


# ------------------------------------------------------------------------------- published tables
from ctxrank.experiments.published import (  # noqa: E402
    COVERAGE_RECORD,
    headline,
    published_blocks,
    regenerate,
    rewrite,
)
from tests.conftest import REPO  # noqa: E402

BLOCKS = published_blocks(REPO)
REPORTS: dict = {}  #: evidence directory -> its regenerated report, once for all the blocks that use it
EVIDENCE_BUDGET = 50 * 2**20  #: evidence/README.md states it


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page.name}:{b.name}" for b in BLOCKS])
def test_every_published_table_is_regenerated_from_its_evidence(block):
    for directory in block.directories:
        records = ("spec.json", COVERAGE_RECORD)  # an experiment's, or a `clicks coverage` record
        assert any((REPO / "evidence" / directory / r).is_file() for r in records), f"no evidence/{directory}"
    assert regenerate(REPO, block.name, REPORTS) == block.text, (
        f"{block.page.name}: the table of evidence/{block.name} is stale: "
        "run `python -m ctxrank.experiments.published`"
    )


def test_the_evidence_folder_stays_within_its_size_budget():
    size = sum(p.stat().st_size for p in (REPO / "evidence").rglob("*") if p.is_file())
    assert size < EVIDENCE_BUDGET and "50 MB" in (REPO / "evidence" / "README.md").read_text()


def test_published_evidence_names_its_spec_without_a_machines_path():
    """A built-in spec is recorded as ``ctxrank/experiments/configs/NAME.toml`` (what `ctxrank
    experiment NAME` loads on any machine), not as the path of the checkout that ran it."""
    specs = sorted((REPO / "evidence").glob("*/spec.json"))
    sources = {p.parent.name: json.loads(p.read_text())["spec"]["source"] for p in specs}
    assert sources
    for name, source in sources.items():
        assert source.startswith("ctxrank/experiments/configs/") and source.endswith(".toml"), (name, source)


def _repo_of(tmp_path, ev, *names):
    """A repository with an empty ``docs/`` whose ``evidence/NAME`` are each the evidence ``ev``."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "evidence").mkdir()
    for name in names:
        (root / "evidence" / name).symlink_to(ev)
    return root


def test_a_block_is_the_headline_of_the_regenerated_report(evidence, tmp_path):
    out, ev = evidence
    root = _repo_of(tmp_path, ev, "tiny")
    table = headline((out / "table.md").read_text())
    assert table.splitlines()[2].startswith("| model |") and "Test:" in table.splitlines()[0]
    page = f"text\n<!-- evidence: tiny -->\n{table}<!-- /evidence -->\nmore\n"
    (root / "docs" / "page.md").write_text(page)
    (block,) = published_blocks(root)
    assert block.name == "tiny" and regenerate(root, "tiny") == block.text == table


def test_a_summary_block_has_one_row_per_evidence_directory_from_its_report(evidence, tmp_path):
    """``<!-- evidence summary: T vs B on M: D1 D2 -->``: each row the means and the corrected and raw
    p of T against B that D's regenerated report gives; a model or comparison a report lacks is an
    error, and a changed number makes the block stale."""
    out, ev = evidence
    root = _repo_of(tmp_path, ev, "tiny", "tiny2")
    res = json.loads((out / "results.json").read_text())
    name = "summary: mnl vs lambdamart on ndcg@10,ndcg@1: tiny tiny2"
    table = regenerate(root, name)
    rows = [line for line in table.splitlines() if line.startswith("| `tiny")]
    assert [r.split(" | ")[0] for r in rows] == ["| `tiny`", "| `tiny2`"] and rows[0][8:] == rows[1][9:]
    cell, metrics = rows[0].split(" | "), ("ndcg@10", "ndcg@1")
    assert cell[3] == " / ".join(f"{res['table']['lambdamart'][m]['mean']:.4f}" for m in metrics)
    assert cell[4] == " / ".join(f"{res['table']['mnl'][m]['mean']:.4f}" for m in metrics)
    c = next(c for c in res["comparisons"] if (c["baseline"], c["metric"]) == ("lambdamart", "ndcg@10"))
    assert cell[6].startswith(f"{c['p_adjusted']:.2g} (raw {c['p']:.2g})")
    assert cell[7] == f"{res['test']['name']}, holm" and cell[8] == f"{res['compute']['cpu_capability'][0]} |"
    page = f"<!-- evidence {name} -->\n{table}<!-- /evidence -->\n"
    (root / "docs" / "page.md").write_text(page)
    (block,) = published_blocks(root)
    assert block.name == name and block.directories == ["tiny", "tiny2"] and block.text == table
    (root / "docs" / "page.md").write_text(page.replace(cell[4], "0.9999 / 0.9999"))
    assert regenerate(root, name) != published_blocks(root)[0].text
    with pytest.raises(ValueError, match="no runs of both 'qilcm' and 'lambdamart'"):
        regenerate(root, "summary: qilcm vs lambdamart on ndcg@10: tiny")
    with pytest.raises(ValueError, match="no comparison of mnl with lambdamart on \\['p@1'\\]"):
        regenerate(root, "summary: mnl vs lambdamart on p@1: tiny")


def test_an_inline_value_in_prose_is_regenerated_from_its_evidence(evidence, tmp_path):
    """``<!-- evidence value: NAME KIND ARGS -->TEXT<!-- /evidence -->`` in a sentence: TEXT is the
    number NAME's regenerated report gives, printed as its table prints it; another report (changed
    evidence) gives another text, and an unknown kind or a missing model is an error."""
    out, ev = evidence
    root = _repo_of(tmp_path, ev, "tiny", "tiny2")
    res = json.loads((out / "results.json").read_text())
    c = next(c for c in res["comparisons"] if (c["baseline"], c["metric"]) == ("lambdamart", "ndcg@10"))
    expected = {
        "value: tiny mean mnl ndcg@10": f"{res['table']['mnl']['ndcg@10']['mean']:.4f}",
        "value: tiny p mnl lambdamart ndcg@10": f"{c['p']:.2g}",
        "value: tiny p-corrected mnl lambdamart ndcg@10": f"{c['p_adjusted']:.2g}",
        "value: tiny improvement mnl lambdamart ndcg@10": f"{c['improvement_pct']:+.2f}%",
        "value: tiny ci mnl lambdamart ndcg@10": f"[{c['ci'][0]:+.4f}, {c['ci'][1]:+.4f}]",
        "value: tiny difference mnl lambdamart ndcg@10": "{:+.4f}".format(
            float(f"{res['table']['mnl']['ndcg@10']['mean']:.4f}")
            - float(f"{res['table']['lambdamart']['ndcg@10']['mean']:.4f}")
        ),
        "value: tiny relative mnl lambdamart ndcg@10": "{:+.2f}%".format(
            100 * (res["table"]["mnl"]["ndcg@10"]["mean"] / res["table"]["lambdamart"]["ndcg@10"]["mean"] - 1)
        ),
        "value: tiny change mnl ndcg@10 tiny2": "+0.0000",
    }
    page = "".join(f"A figure (<!-- evidence {n} -->{v}<!-- /evidence -->).\n" for n, v in expected.items())
    (root / "docs" / "page.md").write_text(page)
    page += page.splitlines(keepends=True)[0]  # one figure stated twice
    stale = page.replace("-->+0.0000<", "-->?<").replace(expected[next(iter(expected))], "0.1")
    (root / "docs" / "page.md").write_text(stale)
    assert len(rewrite(root)) == 3 and (root / "docs" / "page.md").read_text() == page  # rewritten in place
    assert rewrite(root, check=True) == []
    blocks = published_blocks(root)[:-1]
    assert [b.name for b in blocks] == list(expected) and [b.text for b in blocks] == list(expected.values())
    assert blocks[-1].directories == ["tiny", "tiny2"]
    for block in blocks:
        assert regenerate(root, block.name) == block.text
    # the figure follows the evidence: a report with another mean gives another text
    changed = json.loads(json.dumps(res))
    changed["table"]["mnl"]["ndcg@10"]["mean"] += 0.0123
    reports = {"tiny": ("", changed), "tiny2": ("", res)}
    assert regenerate(root, "value: tiny change mnl ndcg@10 tiny2", reports) == "+0.0123"
    mean = "value: tiny mean mnl ndcg@10"
    assert regenerate(root, mean, reports) != expected[mean]
    with pytest.raises(ValueError, match="unknown kind 'median'; valid: mean, p, p-corrected, improvement"):
        regenerate(root, "value: tiny median mnl ndcg@10")
    with pytest.raises(ValueError, match="no mean of qilcm on ndcg@10"):
        regenerate(root, "value: tiny mean qilcm ndcg@10")
    with pytest.raises(ValueError, match="p takes TARGET BASELINE METRIC, got 'mnl ndcg@10'"):
        regenerate(root, "value: tiny p mnl ndcg@10")


def test_report_correction_is_the_same_override_on_the_stored_spec(evidence, tmp_path):
    """``ctxrank report EVIDENCE --correction C`` sets ``report.correction`` as ``ctxrank experiment
    --correction`` does: a typed override of the spec's dict before the spec is built (the restored
    experiment.json records the report's correction)."""
    from ctxrank.experiments.spec import correction_override

    _, ev = evidence
    record = json.loads((ev / "spec.json").read_text())
    spec = spec_from_record(record, overrides=correction_override("bh"))
    assert spec.report.correction == "bh" and spec.fingerprint() == record["fingerprint"]
    assert spec_from_record(record).report.correction == record["spec"]["report"]["correction"] == "holm"
    assert main(["report", str(ev), "--out", str(tmp_path / "none"), "--correction", "none"]) == 0
    res = json.loads((tmp_path / "none" / "results.json").read_text())
    stored = json.loads((tmp_path / "none" / "experiment.json").read_text())
    assert res["test"]["correction"] == stored["spec"]["report"]["correction"] == "none"


# ------------------------------------------------------------------------ resuming from evidence
TUNED = sorted(p.parent.name for p in (REPO / "evidence").glob("*/trials.csv.gz"))


def _contents(path):
    """A file's contents: gzip's decompressed, spec.json's record less its digests (of the bytes, which
    another zlib may compress otherwise: each evidence's own are checked as it is read)."""
    if path.name == "spec.json":
        record = json.loads(path.read_text())
        return {k: v for k, v in record.items() if k != "digests"}, sorted(record["digests"])
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


@pytest.mark.parametrize("name", TUNED)
def test_a_run_store_restored_from_published_evidence_writes_the_same_evidence(name, tmp_path):
    """``--resume-from``: the runs and the studies' trials restored from a published tuned experiment's
    evidence give back every file of that evidence (the same contents), and a second resume restores
    nothing."""
    from ctxrank.experiments.evidence import (
        EVIDENCE_FILES,
        restore_runs,
        resume_from_evidence,
        write_evidence,
    )
    from ctxrank.experiments.store import RunStore

    ev = REPO / "evidence" / name
    spec = spec_from_record(json.loads((ev / "spec.json").read_text()))
    store = RunStore(tmp_path / "out")
    store.claim(spec)
    restored, kept = resume_from_evidence(spec, store, ev)
    assert restored > 0 and kept == 0
    write_evidence(spec, store, tmp_path / "again")
    read_evidence(tmp_path / "again")  # its digests hold
    for file in EVIDENCE_FILES:
        assert (ev / file).exists() == (tmp_path / "again" / file).exists(), file
        if (ev / file).exists():
            assert _contents(tmp_path / "again" / file) == _contents(ev / file), file
    assert resume_from_evidence(spec, store, ev) == (0, restored)
    _, again = restore_runs(ev, tmp_path / "report", studies=True)  # `ctxrank report EVIDENCE --out DIR`
    roots = (store.root, again.root)
    studies = [sorted(p.relative_to(d) for p in d.glob("tune/*/*/trials.csv")) for d in roots]
    assert studies[0] and studies[0] == studies[1]
    assert all((store.root / s).read_bytes() == (again.root / s).read_bytes() for s in studies[0])


def test_shards_in_separate_run_stores_write_one_evidence_without_dropping_each_others_runs(tmp_path):
    """Two shards of one experiment, each in its own run store (two machines, or two sessions that
    resumed from the same evidence), keep one ``--evidence``: each write used to replace the evidence
    with its own store's runs, so the other shard's runs vanished from it. Now a write keeps the earlier
    evidence's runs and trials that its store lacks: after both shards, the evidence is the one a single
    store of every run writes."""
    import shutil

    from ctxrank.experiments.evidence import EVIDENCE_FILES, resume_from_evidence, write_evidence
    from ctxrank.experiments.store import RunStore

    ev = REPO / "evidence" / TUNED[0]
    spec = spec_from_record(json.loads((ev / "spec.json").read_text()))
    whole = RunStore(tmp_path / "whole")
    whole.claim(spec)
    resume_from_evidence(spec, whole, ev)
    keys = spec.run_keys()
    shards = {"a": keys[0::2], "b": keys[1::2] + keys[:1]}  # the first run key in both stores
    stores = {}
    for name, mine in shards.items():
        stores[name] = store = RunStore(tmp_path / name)
        store.claim(spec)
        for m in spec.run_names():
            for seed, fold in mine:
                shutil.copytree(whole.study_path(m, seed, fold), store.study_path(m, seed, fold))
                store.save_run(whole.load_run(m, seed, fold))
    shared = tmp_path / "shared"
    first = write_evidence(spec, stores["a"], shared)
    second = write_evidence(spec, stores["b"], shared)
    assert len(read_evidence(shared)[1]) == len(spec.run_names()) * len(keys)
    for file in EVIDENCE_FILES:
        assert (ev / file).exists() == (shared / file).exists(), file
        if (ev / file).exists():
            assert _contents(shared / file) == _contents(ev / file), file
    again = write_evidence(spec, stores["a"], shared)  # a later write of the first shard: nothing lost
    assert again["runs"] == second["runs"] == len(spec.run_names()) * len(keys)
    assert (first["kept"], first["stored"]) == (0, len(spec.run_names()) * len(shards["a"]))
    assert second["kept"] == len(spec.run_names()) * (len(keys) - len(shards["b"]))
    assert all(_contents(shared / f) == _contents(ev / f) for f in EVIDENCE_FILES if (ev / f).exists())


def test_two_shards_with_their_own_out_keep_one_evidence_from_the_command_line(tmp_path, capsys):
    """`ctxrank experiment --shard K/2 --out DIR_K --evidence EV` on two machines: EV holds both shards'
    runs, the second write says how many it kept, and `ctxrank report EV` covers every run."""
    spec = _letor_spec(tmp_path, runs=4)
    ev = str(tmp_path / "ev")
    for k in (1, 2):
        argv = ["experiment", str(spec), "--shard", f"{k}/2", "--evidence", ev, "--no-progress"]
        assert main([*argv, "--out", str(tmp_path / f"shard{k}")]) == 0
    out = capsys.readouterr().out
    assert "(12 runs, 6 of them kept from its earlier write" in out and f"`ctxrank report {ev}`" in out
    assert sorted({(r["seed"], r["fold"]) for r in read_evidence(ev)[1]}) == [(s, 0) for s in range(4)]
    assert main(["report", ev]) == 0
    assert "4 runs (seed, fold: 0,0, 1,0, 2,0, 3,0)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("evidence", "what"), [("exp", "is"), (".", "holds"), ("exp/runs", "is inside the runs of")]
)
def test_evidence_in_the_run_stores_own_place_is_refused_before_any_run(tmp_path, capsys, evidence, what):
    """`--evidence` the `--out` directory (or one holding it, or its runs/) was accepted, the runs ran,
    and the write of the evidence after them was refused: the store had filled the directory."""
    spec = _letor_spec(tmp_path, runs=3)
    out = tmp_path / "exp"
    argv = ["experiment", str(spec), "--out", str(out), "--evidence", str(tmp_path / evidence)]
    argv.append("--no-progress")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{what} the experiment directory {out} (--out)" in err and "a directory of its own" in err
    assert not (out / "runs").exists()  # nothing ran
    argv[-2] = str(out / "evidence")  # a directory of its own inside the experiment's is fine
    assert main(argv) == 0 and len(read_evidence(out / "evidence")[1]) == 9


def test_an_evidence_directory_given_as_out_is_named_as_evidence(evidence, tmp_path, capsys):
    """`--out EVIDENCE` (for `--resume-from`) or `ctxrank report EV --out EV` was refused as a
    directory of "files that ctxrank did not write": ctxrank wrote them. Now it says what they are."""
    _, ev = evidence
    spec = _letor_spec(tmp_path, runs=3)
    before = {p.name: p.read_bytes() for p in ev.iterdir()}
    assert main(["experiment", str(spec), "--resume-from", str(ev), "--out", str(ev), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {ev} holds an experiment's evidence (spec.json, runs.parquet)" in err
    assert f"--resume-from {ev}" in err and "did not write" not in err
    assert main(["report", str(ev), "--out", str(ev)]) == 2
    assert "give the report a directory of its own" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ev.iterdir()} == before  # nothing written there


def test_resuming_refuses_evidence_whose_study_lies_outside_its_experiment(tmp_path):
    """A run record of the evidence names where its study is; anything but the runner's own place (a
    path out of the experiment directory) is refused before any file is written."""
    from ctxrank.experiments.evidence import resume_from_evidence
    from ctxrank.experiments.store import RunStore

    ev = tmp_path / "ev"
    ev.mkdir()
    for file in (REPO / "evidence" / TUNED[0]).iterdir():
        (ev / file.name).write_bytes(file.read_bytes())
    meta = json.loads(gzip.decompress((ev / "runs.json.gz").read_bytes()))
    meta[-1]["tune"]["dir"] = "../../escaped"
    (ev / "runs.json.gz").write_bytes(gzip.compress(json.dumps(meta).encode()))
    record_digests(ev)  # a forged evidence with its digests recomputed
    spec = spec_from_record(json.loads((ev / "spec.json").read_text()))
    store = RunStore(tmp_path / "out")
    store.claim(spec)
    with pytest.raises(ValueError, match=r"records its study in '\.\./\.\./escaped'"):
        resume_from_evidence(spec, store, ev)
    assert not store.has_results() and not (tmp_path / "escaped").exists()


def test_the_evidence_is_refreshed_while_runs_are_stored(evidence, tmp_path):
    """``--evidence``: a thread rewrites the evidence from the run store as runs are stored (every
    ``REFRESH_SECONDS``; here 10 ms), each write whole (under the directory's lock)."""
    import time

    from ctxrank._io import one_writer_at_a_time
    from ctxrank.experiments.evidence import KeptEvidence
    from ctxrank.experiments.store import RunStore

    _, ev = evidence
    spec, runs, _ = read_evidence(ev)
    store = RunStore(tmp_path / "out")
    store.claim(spec)
    logs, kept = [], tmp_path / "kept"
    with KeptEvidence(spec, store, kept, every=0.01, log=logs.append):
        for n, run in enumerate(runs[:3], start=1):
            store.save_run(run)
            deadline = time.monotonic() + 30
            while not (logs and logs[-1].endswith(f"refreshed ({n} runs)")) and time.monotonic() < deadline:
                time.sleep(0.01)
            with one_writer_at_a_time(kept):
                assert len(read_evidence(kept)[1]) == n, logs
    assert all("refreshed" in line for line in logs) and len(logs) == 3  # only when runs were added


def test_an_experiment_that_fails_part_way_keeps_the_evidence_of_its_stored_runs(
    tmp_path, monkeypatch, capsys
):
    """The runs end in an error: ``--evidence`` still holds every run stored before it, and the
    experiment continues from it in a new directory (``--resume-from``), running only the others."""
    import ctxrank.experiments.runner as runner
    from tests.experiments.test_experiments import _letor_spec

    spec = _letor_spec(tmp_path, runs=2)
    real = runner._run_one
    ran = []

    def failing(spec, model, seed, *args, **kwargs):
        ran.append((model, seed))
        if seed == 1 and model == "listnet":
            raise RuntimeError("the machine went away")
        return real(spec, model, seed, *args, **kwargs)

    monkeypatch.setattr(runner, "_run_one", failing)
    ev = str(tmp_path / "ev")
    argv = ["experiment", str(spec), "--evidence", ev, "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 2
    out, err = capsys.readouterr()
    assert "the machine went away" in err and "runs stored before the error (4 runs)" in out
    assert sorted((r["model"], r["seed"]) for r in read_evidence(ev)[1]) == sorted(ran[:-1])
    monkeypatch.setattr(runner, "_run_one", real)
    assert main([*argv, "--out", str(tmp_path / "b"), "--resume-from", ev]) == 0
    assert "4 run(s) restored" in capsys.readouterr().out
    assert len(read_evidence(ev)[1]) == 6


def test_report_only_writes_the_evidence_of_the_stored_runs_before_a_report_is_possible(
    evidence, tmp_path, capsys
):
    """``--report-only --evidence``: the evidence of the runs stored so far is written even when no
    run is finished by every model (the report, refused, comes after it)."""
    import shutil

    out, ev = evidence
    spec, runs, _ = read_evidence(ev)
    part = tmp_path / "out"
    shutil.copytree(out, part)
    dropped = spec.run_names()[0]
    shutil.rmtree(part / "runs" / dropped)  # no run is finished by every model
    kept = tmp_path / "kept"
    argv = ["experiment", spec.source, "--out", str(part), "--report-only", "--evidence", str(kept)]
    capsys.readouterr()
    assert main(argv) == 2
    said, err = capsys.readouterr()
    left = [r for r in runs if r["model"] != dropped]
    assert f"evidence: {kept} ({len(left)} runs" in said and "regenerate" not in said
    assert "no run is finished by every model yet" in err
    assert sorted((r["model"], r["seed"], r["fold"]) for r in read_evidence(kept)[1]) == sorted(
        (r["model"], r["seed"], r["fold"]) for r in left
    )


def test_tuned_evidence_without_its_trials_still_reports_but_does_not_resume(tmp_path, capsys):
    """``trials.csv.gz`` is data the report does not read: ``ctxrank report`` works without it, but an
    experiment cannot continue from such evidence (its final evidence would lack those trials)."""
    ev = tmp_path / "ev"
    ev.mkdir()
    for file in (REPO / "evidence" / TUNED[0]).iterdir():
        if file.name != "trials.csv.gz":
            (ev / file.name).write_bytes(file.read_bytes())
    assert main(["report", str(ev), "--out", str(tmp_path / "report")]) == 0
    assert not (tmp_path / "report" / "tune").exists()
    spec = json.loads((ev / "spec.json").read_text())["spec"]  # choice-tuned on car
    argv = ["experiment", spec["name"], "--dataset", spec["data"]["dataset"], "--out", str(tmp_path / "out")]
    argv += ["--resume-from", str(ev), "--report-only"]
    capsys.readouterr()
    assert main(argv) == 2
    assert "no trials.csv.gz, but its runs were tuned" in capsys.readouterr().err


def test_a_recomputed_table_is_compared_with_the_stored_evidence_cell_by_cell(evidence, tmp_path):
    """`ctxrank demo` after its table: identical to the stored evidence, or the cells that differ (by how
    much) and what the runs were computed with differently (the CPU instruction set named both ways)."""
    out, ev = evidence
    assert against_stored_evidence(out / "results.json", ev).startswith("identical to the stored evidence")
    fresh = json.loads((out / "results.json").read_text())
    model, metric = next(iter(fresh["table"])), "ndcg@10"
    fresh["table"][model][metric]["mean"] += 0.0012
    fresh["comparisons"][0]["p_adjusted"] = 0.46
    stored_isa = fresh["compute"]["cpu_capability"][0]
    fresh["compute"]["cpu_capability"] = ["AVX2" if stored_isa != "AVX2" else "DEFAULT"]
    (tmp_path / "results.json").write_text(json.dumps(fresh))
    text = against_stored_evidence(tmp_path / "results.json", ev)
    assert text.startswith(f"differs from the stored evidence {ev} in 2 cell(s):")
    assert f"{model} {metric} mean: " in text and "(+0.0012)" in text
    c = fresh["comparisons"][0]
    assert f"{c['target']} vs {c['baseline']} {c['metric']} corrected p: " in text and ", 0.46 now" in text
    isa = fresh["compute"]["cpu_capability"][0]
    assert f"PyTorch's CPU instruction set: {stored_isa} (stored runs), {isa} (these runs)" in text
    assert f"ATEN_CPU_CAPABILITY={stored_isa.lower()}" in text
    fresh["fingerprint"] = "0" * 16  # another spec (e.g. `ctxrank demo --set ...`): not compared
    (tmp_path / "results.json").write_text(json.dumps(fresh))
    assert against_stored_evidence(tmp_path / "results.json", ev).startswith("not compared")
    assert against_stored_evidence(tmp_path / "results.json", tmp_path / "none").startswith("not compared")


def test_the_demo_prints_its_comparison_with_the_stored_evidence(monkeypatch, tmp_path, capsys):
    """`ctxrank demo` ends with the comparison of its report with evidence/demo."""
    seen = {}

    def experiment(name, **kwargs):
        seen["name"], seen["out"] = name, kwargs["out_dir"]
        return 0

    def compared(results_json, stored):
        seen["compared"] = (results_json, stored)
        return "identical to the stored evidence evidence/demo"

    monkeypatch.setattr(cli_experiment, "experiment", experiment)
    monkeypatch.setattr(cli_experiment, "against_stored_evidence", compared)
    assert main(["demo", "--out", str(tmp_path / "d")]) == 0
    assert seen["compared"] == (tmp_path / "d" / "results.json", cli_experiment.STORED_DEMO)
    assert capsys.readouterr().out.endswith("identical to the stored evidence evidence/demo\n")


#: every page whose figures are checked: the README and every page of docs/, every section
def _pages() -> list:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


#: phrases (regular expressions) whose figures are no result of ctxrank, each with why: a page states
#: them as configuration or identity
NOT_RESULTS = {
    r"Python 3\.11": "the Python version ctxrank needs",
    r"1306\.2597": "MQ2008's arXiv id (LETOR 4.0)",
    r"LETOR [34]\.0": "the name of a dataset release",
    r"scikit-learn >= 1\.4": "the scikit-learn version metadata routing needs",
    r"scikit-learn 1\.9": "the scikit-learn version whose behaviour a page describes",
    r"sections? \d+\.\d+(?: and \d+\.\d+)?": "a section of a paper",
    r"0\.05": "the significance level the reports test at",
    r"5% level": "the significance level the reports test at",
    r"95% (?:CI|confidence)": "the confidence level of the reported intervals",
}
#: the unit of a measured result: a ratio, a share, a time, an amount of memory, a rate
_RESULT_UNIT = (
    r"(?:%|[mµn]?s|sec|seconds?|minutes?|min|hours?|days?|[KMGT]i?B|bytes"
    r"|(?:queries|lists|items|rows|requests|steps|epochs|[KMG]B)/s)"
)
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
#: a figure: a decimal (0.5, 0.6714, 1.55x; not a version such as 2.4.6), or a number (or a range of
#: them) with the unit of a measured result (12x, 449 ms, 124-165 ms, 909 MiB, 178 queries/s, -34%)
_FIGURE = re.compile(
    rf"(?<![\w.])(?:{_NUMBER}(?:\s?(?:-|to)\s?{_NUMBER})?(?:x|\s?{_RESULT_UNIT})(?![\w/])"
    r"|\d[\d,]*\.\d+(?!\d|\.\d))"
)
_GENERATED = re.compile(
    r"<!-- evidence[^>]*-->.*?<!-- /evidence -->|<!-- (bench-[a-z-]+)[^>]*-->.*?<!-- /\1 -->", re.S
)
#: an inline code span (a run of backticks to the next run of the same length): within a paragraph,
#: over line breaks too
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?:[^\n]|\n(?!\s*\n))*?(?<!`)\1(?!`)")
#: a span (a figure, a sentence or a table) quoting another work's numbers, naming its source
QUOTED = re.compile(r"<!-- quoted: (?P<source>[^>]*?) -->.*?<!-- /quoted -->", re.S)


def _prose(text: str) -> str:
    """``text`` without code (fenced blocks, inline spans), link targets and generated blocks (tables and
    inline values regenerated from the evidence); line breaks kept."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            line = ""
        lines.append("" if fenced else line)
    text = re.sub(_CODE_SPAN, lambda m: "\n" * m.group(0).count("\n"), "\n".join(lines))
    text = re.sub(r"\]\([^)]*\)", "]", text)
    for span in QUOTED.finditer(text):
        assert span.group("source").strip(), f"a quoted span names no source: {span.group(0)[:80]!r}"
    text = QUOTED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _figures(line: str) -> list:
    """The figures of one line of prose, less those inside a phrase of :data:`NOT_RESULTS`."""
    excused = [m.span() for phrase in NOT_RESULTS for m in re.finditer(phrase, line)]
    return [
        m.group(0)
        for m in _FIGURE.finditer(line)
        if not any(start <= m.start() and m.end() <= end for start, end in excused)
    ]


@pytest.mark.parametrize("page", [str(page.relative_to(REPO)) for page in _pages()])
def test_no_page_states_a_figure_the_evidence_does_not_give(page):
    """A figure on any page (the README, every page of docs/, every section, tables included) sits in a
    block regenerated from the evidence (a table or an inline value), in code, or in a span quoting
    another work's numbers with its source (:data:`QUOTED`): a decimal, or a number with the unit of a
    measured result (x, %, ms, MiB, queries/s, ...), anywhere else fails, unless it is no result
    (:data:`NOT_RESULTS`)."""
    stray = [
        f"{page}:{number}: {figure} in {line.strip()[:80]!r}"
        for number, line in enumerate(_prose((REPO / page).read_text()).splitlines(), 1)
        for figure in _figures(line)
    ]
    assert not stray, f"{len(stray)} figure(s) outside the generated blocks:\n" + "\n".join(stray)


def test_the_prose_check_finds_a_figure_outside_the_blocks():
    page = (
        "## Results\n\nQILCM leads (raw p 0.041, <!-- evidence value: x p a b m -->0.037<!-- /evidence -->"
        ", 1.55x); `0.123` is code.\n\n<!-- evidence: x -->\n| 0.4844 |\n<!-- /evidence -->\n### Sub\n0.99\n"
        "The paper: <!-- quoted: Liu et al. 2022, Table 2 -->0.4845\n| 0.5012 |<!-- /quoted -->, "
        "here 0.4790.\nIt took 449 ms (178 queries/s, 124-165 ms), 909 MiB, 12x, -34%, 2.9 hours; 0.5 of it. "
        "LETOR 4.0 and numpy 2.4.6 name releases; 80 x 100 items, 3 folds, 5 x 80 queries are sizes; "
        "``sigma = 0.1`` is code, section 4.4 a paper's.\n"
    )
    figures = [f for line in _prose(page).splitlines() for f in _figures(line)]
    assert figures == [
        "0.041", "1.55x", "0.99", "0.4790", "449 ms", "178 queries/s", "124-165 ms", "909 MiB", "12x",
        "34%", "2.9 hours", "0.5",
    ]
    with pytest.raises(AssertionError, match="names no source"):
        _prose("<!-- quoted:  -->0.4845<!-- /quoted -->")


def test_an_api_user_reads_the_fields_and_the_cli_the_flags_of_an_evidence_error(tmp_path, capsys):
    spec = _letor_spec(tmp_path, runs=3)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OptionError) as info:
        resume_from_evidence(load_spec(spec), RunStore(tmp_path / "store"), empty)
    assert str(info.value) == f"resume_from {empty}: not an evidence directory (no spec.json)"
    assert info.value.fields == ("resume_from",)
    argv = ["experiment", str(spec), "--out", str(tmp_path / "o"), "--resume-from", str(empty)]
    assert main([*argv, "--no-progress"]) == 2
    assert capsys.readouterr().err == f"ctxrank: error: {flag_text(info.value.text)}\n"
    assert flag_text(info.value.text).startswith(f"--resume-from {empty}: not an evidence directory")
