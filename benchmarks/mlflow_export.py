"""MLflow export speed: `actbench export mlflow` against a bare script making the same MLflow calls.

Trains the sweep 8 activations x 2 data x 30 seeds x 1000 epochs (480 members) with `actbench
sweep` into a temporary directory (or reads --sweep DIR). Then, each as a fresh process into its
own copy of an empty SQLite tracking store (MLflow's tables made once beforehand, so neither side
pays for the migrations), interleaved over --repeat rounds:

- actbench: `actbench export mlflow SWEEP --tracking-uri sqlite:///...`, timed whole: imports,
  reading results.csv and the run directories, the experiment check, the parent run, one child
  per member with its config.yaml artifact, the sweep's artifacts;
- bare: a script of its own that imports mlflow, loads the members' tags, params and metric
  values already built (a pickle written by this benchmark from actbench's own payloads) and
  makes the same create_run / log_batch / set_terminated calls: the MLflow floor, with no
  reading, no artifacts and no idempotence check.

Both stores are checked to hold the same number of runs and metric values. Prints the date,
commit, machine and load, each side's median wall time and the median of the rounds' ratios.
Usage:
    python -m benchmarks.mlflow_export [--repeat 2] [--sweep runs/existing-sweep]
"""

from __future__ import annotations

import pickle
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import harness, provenance
from benchmarks.peers.grid import ACTS

BARE = """
import pickle, sys
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
uri, payload = sys.argv[1], sys.argv[2]
with open(payload, "rb") as f:
    experiment, sweep, sweep_params, members = pickle.load(f)
client = MlflowClient(tracking_uri=uri)
eid = client.create_experiment(experiment)
parent = client.create_run(eid, run_name=sweep).info.run_id
client.log_batch(parent, params=[Param(k, v) for k, v in sweep_params])
for name, start, end, tags, metrics, params in members:
    run = client.create_run(eid, start_time=start, tags={**tags, "mlflow.parentRunId": parent}, run_name=name)
    client.log_batch(run.info.run_id, metrics=[Metric(*m) for m in metrics], params=[Param(*p) for p in params])
    client.set_terminated(run.info.run_id, "FINISHED", end_time=end)
client.set_terminated(parent)
"""


def write_payload(sweep: Path, path: Path) -> tuple[int, int]:
    """The members' calls as actbench makes them; returns (members, metric values)."""
    from activation_bench.export import mlflow as ex

    plan = ex.collect([sweep])
    members, values = [], 0
    for m in plan.members:
        tags, metrics, params = ex.payload(m)
        members.append((m.name, m.start_ms, m.end_ms, tags,
                        [(x.key, x.value, x.timestamp, x.step) for x in metrics],
                        [(p.key, p.value) for p in params]))
        values += len(metrics)
    overrides = [str(o) for o in ex.read_yaml(sweep / "sweep.yaml")["overrides"]]
    sweep_params = [(p.key, p.value) for p in ex.sweep_params(overrides)]
    with open(path, "wb") as f:
        pickle.dump((sweep.name, sweep.name, sweep_params, members), f)
    return len(members), values


def counts(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as con:
        return (con.execute("select count(*) from runs").fetchone()[0],
                con.execute("select count(*) from metrics").fetchone()[0])


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sweep", type=Path, default=None, help="an existing sweep directory (default: train one)")
    args = ap.parse_args()
    bench = harness.Bench(args, compile_bytecode=True)
    cli = provenance.actbench()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sweep = args.sweep.resolve() if args.sweep else tmp / "runs" / "speed"
        if args.sweep is None:
            harness.run([*cli, "sweep", f"activation={','.join(ACTS)}", "data=normal,uniform", "seed=range(30)",
                         "epochs=1000", "--name", "speed", "--runs-dir", str(tmp / "runs"), "-q"])
        n_members, n_values = write_payload(sweep, tmp / "payload.pkl")
        (tmp / "bare.py").write_text(BARE)
        empty = tmp / "empty.db"
        harness.run([sys.executable, "-c", f"from mlflow import MlflowClient; "
                     f"MlflowClient(tracking_uri='sqlite:///{empty}').search_experiments()"])
        stored: dict[str, set[tuple[int, int]]] = {"actbench": set(), "bare": set()}

        def side(name: str):  # noqa: ANN202
            def one(r: int) -> float:
                where = tmp / f"{name}{r}"  # MLflow puts a SQLite store's artifacts in ./mlruns
                where.mkdir()
                db = where / "mlflow.db"
                shutil.copy(empty, db)
                uri = f"sqlite:///{db}"
                cmd = ([sys.executable, str(tmp / "bare.py"), uri, str(tmp / "payload.pkl")] if name == "bare"
                       else [*cli, "export", "mlflow", str(sweep), "--tracking-uri", uri, "-q"])
                seconds = harness.run(cmd, cwd=where).seconds
                stored[name].add(counts(db))
                shutil.rmtree(where)
                return seconds
            return one

        times = harness.interleaved({"bare": side("bare"), "actbench": side("actbench")}, args.repeat)
    print(f"{n_members} members, {n_values:,} metric values each side; stored (runs, values): "
          f"actbench {sorted(stored['actbench'])}, bare {sorted(stored['bare'])}")
    for name, ts in times.items():
        print(f"{name:9s} {n_values / statistics.median(ts):,.0f} values/s")
    bench.figure("actbench / bare MLflow calls, its time", harness.ratios(times["actbench"], times["bare"]),
                 goal="<= 1.2", digits=3)
    bench.note(members=n_members, metric_values=n_values)
    bench.finish(times)


if __name__ == "__main__":
    main()
