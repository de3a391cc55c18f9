"""``ctxrank synth``: write SYNTHETIC data files for tests, demos and benchmarks.

* ``ctxrank synth choice --sessions N --seed S --out FILE.csv|.parquet``: airline-itinerary choice
  sessions (:func:`ctxrank.data.synth_choice.make_choice_sessions`), one row per itinerary with a 0/1
  ``chosen`` column. The chooser's own probabilities go to a SEPARATE file ``<stem>.chooser.csv``
  (``session,item,chooser_prob``) so they can never be read as a feature by accident; the chooser's
  reference (log-likelihood, P@1, hit@5: the ceiling for any model on these data) is printed.
* ``ctxrank synth letor --queries N --items L --features F --seed S --out FILE``: an MSLR-shaped LETOR
  text file (:func:`ctxrank.data.synth.write_synthetic_letor`).

Nothing measured on these files says anything about real data; every run says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SYNTHETIC_NOTE = "note: these data are SYNTHETIC (generated, not measured); use them for tests and demos only"


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return v


def add_synth_command(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "synth",
        parents=[common],
        help="write SYNTHETIC data (choice sessions table, LETOR file) for tests and demos",
        description=(
            "Write synthetic data files. `choice`: airline-itinerary choice sessions as a table "
            "(one row per itinerary, `chosen` 0/1), with the chooser's probabilities in a separate "
            "<stem>.chooser.csv. `letor`: an MSLR-shaped LETOR text file. The data are generated, "
            "not measured: results on them say nothing about real data."
        ),
    )
    ssub = p.add_subparsers(dest="synth_command", metavar="{choice,letor}", required=True)

    pc = ssub.add_parser(
        "choice",
        parents=[common],
        help="airline-itinerary choice sessions (a table)",
        description=(
            "Synthetic choice sessions (mixed logit with per-session tastes; see "
            "ctxrank.data.synth_choice): columns session, item, chosen, price, duration, stops, "
            "dep_hour, airline, cabin. Writes FILE (.csv, .csv.gz, .tsv, .tsv.gz, .parquet, .pq) and "
            "<stem>.chooser.csv (session, item, chooser_prob: NOT a feature) and prints the chooser's "
            "reference. Train on it with e.g. `ctxrank train --model qilcm --data FILE --query-col "
            "session --label-col chosen --docid-col item --categorical airline,cabin --out runs/q`."
        ),
    )
    pc.add_argument("--sessions", type=_positive_int, default=1000, metavar="N", help="default 1000")
    pc.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    pc.add_argument("--min-items", type=_positive_int, default=10, metavar="N", help="default 10")
    pc.add_argument("--max-items", type=_positive_int, default=60, metavar="N", help="default 60")
    pc.add_argument(
        "--utility-scale",
        type=float,
        default=1.5,
        metavar="X",
        help="utility multiplier: larger = more predictable choices (default 1.5)",
    )
    pc.add_argument("--out", required=True, metavar="FILE", help="the table to write")
    pc.add_argument("--json", action="store_true", help="machine-readable summary")
    pc.set_defaults(func=cmd_synth_choice)

    pl = ssub.add_parser(
        "letor",
        parents=[common],
        help="an MSLR-shaped LETOR text file",
        description=(
            "A synthetic LETOR/SVMlight file (`label qid:Q 1:v ... F:v #docid = D-q-i`; .gz when FILE ends "
            "with it): N queries of L items, F dense features, labels 0..4 from a noisy linear function."
        ),
    )
    pl.add_argument("--queries", type=_positive_int, default=1000, metavar="N", help="default 1000")
    pl.add_argument("--items", type=_positive_int, default=100, metavar="L", help="items per query (100)")
    pl.add_argument("--features", type=_positive_int, default=136, metavar="F", help="default 136")
    pl.add_argument("--max-label", type=_positive_int, default=4, metavar="K", help="labels 0..K (4)")
    pl.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    pl.add_argument("--out", required=True, metavar="FILE", help="the file to write (.txt or .gz)")
    pl.set_defaults(func=cmd_synth_letor)


def chooser_path(out: str | Path) -> Path:
    """``sessions.csv`` / ``sessions.csv.gz`` / ``sessions.parquet`` -> ``sessions.chooser.csv``."""
    from ctxrank.data.table import _format_of

    out = Path(out)
    ext = _format_of(out)
    name = out.name[: -len(ext)] if ext else out.name
    return out.with_name(f"{name}.chooser.csv")


def cmd_synth_choice(args: argparse.Namespace) -> int:
    import pandas as pd

    from ctxrank._io import atomic_write
    from ctxrank.cli import _out, _print_json
    from ctxrank.data.synth_choice import make_choice_sessions
    from ctxrank.data.table import TABLE_EXTENSIONS, _format_of

    out = Path(args.out)
    fmt = _format_of(out)
    if fmt is None:
        raise ValueError(f"{out}: --out must end in one of {', '.join(TABLE_EXTENSIONS)}")
    chooser = chooser_path(out)
    if chooser.resolve() == out.resolve():
        raise ValueError(f"{out}: choose a name whose chooser file ({chooser.name}) differs from it")
    sessions = make_choice_sessions(
        args.sessions,
        min_items=args.min_items,
        max_items=args.max_items,
        utility_scale=args.utility_scale,
        seed=args.seed,
    )
    table = sessions.table
    if fmt in (".parquet", ".pq"):
        atomic_write(out, lambda tmp: table.to_parquet(tmp, index=False))
    else:
        sep = "\t" if fmt.startswith(".tsv") else ","
        comp = "gzip" if fmt.endswith(".gz") else None
        atomic_write(out, lambda tmp: table.to_csv(tmp, sep=sep, index=False, compression=comp))
    probs = pd.DataFrame(
        {"session": table["session"], "item": table["item"], "chooser_prob": sessions.chooser_prob}
    )
    atomic_write(chooser, lambda tmp: probs.to_csv(tmp, index=False, float_format="%.9g"))
    ref = sessions.chooser_reference()
    summary = {
        "synthetic": True,
        "file": str(out),
        "chooser_file": str(chooser),
        "sessions": int(args.sessions),
        "rows": len(table),
        "seed": args.seed,
        "min_items": args.min_items,
        "max_items": args.max_items,
        "utility_scale": args.utility_scale,
        "columns": [str(c) for c in table.columns],
        "chooser_reference": ref,
    }
    if args.json:
        _print_json(summary)
        return 0
    _out(
        f"wrote {len(table):,} itineraries in {args.sessions:,} sessions to {out} "
        f"(seed {args.seed}; columns {', '.join(summary['columns'])})"
    )
    _out(f"wrote the chooser's probabilities to {chooser} (session, item, chooser_prob: not a feature)")
    _out(
        f"chooser reference (the ceiling for any model on these data): log-likelihood "
        f"{ref['log_likelihood']:.4f} per session, P@1 {ref['p@1']:.4f} "
        f"(expected {ref['expected_p@1']:.4f}), hit@5 {ref['hit@5']:.4f}"
    )
    _out(SYNTHETIC_NOTE)
    return 0


def cmd_synth_letor(args: argparse.Namespace) -> int:
    from ctxrank.cli import _out
    from ctxrank.data.synth import write_synthetic_letor

    out = Path(args.out)
    if out.parent != Path():
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{out.suffix}")  # keep the .gz suffix for the writer
    try:
        write_synthetic_letor(
            tmp,
            n_queries=args.queries,
            list_size=args.items,
            n_features=args.features,
            max_label=args.max_label,
            seed=args.seed,
        )
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    _out(
        f"wrote {args.queries:,} queries x {args.items} items, {args.features} features, labels "
        f"0..{args.max_label} (seed {args.seed}) to {out}"
    )
    _out(SYNTHETIC_NOTE)
    return 0
