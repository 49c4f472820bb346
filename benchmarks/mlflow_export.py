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
    python benchmarks/mlflow_export.py [--repeat 2] [--sweep runs/existing-sweep]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ACTS = "gelu,relu,silu,elu,tanh,mish,leaky_relu,softplus"
CLI = [sys.executable, "-m", "activation_bench.cli"]
ROOT = Path(__file__).resolve().parent.parent

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


def header() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    load = os.getloadavg()[0]
    import mlflow

    return (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, {os.cpu_count()} cores {cpu}, "
            f"python {platform.python_version()}, mlflow {mlflow.__version__}, load average {load:.2f}")


def write_payload(sweep: Path, path: Path) -> tuple[int, int]:
    """The members' calls as actbench makes them; returns (members, metric values)."""
    sys.path.insert(0, str(ROOT))
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


def timed(args: list[str], cwd: Path) -> float:
    """Run in `cwd` (MLflow puts a SQLite store's artifacts in ./mlruns), this checkout's package first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run(args, check=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sweep", type=Path, default=None, help="an existing sweep directory (default: train one)")
    args = ap.parse_args()
    print(header())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sweep = args.sweep.resolve() if args.sweep else tmp / "runs" / "speed"
        if args.sweep is None:
            subprocess.run([*CLI, "sweep", f"activation={ACTS}", "data=normal,uniform", "seed=range(30)",
                            "epochs=1000", "--name", "speed", "--runs-dir", str(tmp / "runs"), "-q"],
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        n_members, n_values = write_payload(sweep, tmp / "payload.pkl")
        (tmp / "bare.py").write_text(BARE)
        empty = tmp / "empty.db"
        subprocess.run([sys.executable, "-c", f"from mlflow import MlflowClient; "
                        f"MlflowClient(tracking_uri='sqlite:///{empty}').search_experiments()"], check=True,
                       stderr=subprocess.DEVNULL)
        times: dict[str, list[float]] = {"actbench": [], "bare": []}
        stored: dict[str, set[tuple[int, int]]] = {"actbench": set(), "bare": set()}
        for i in range(args.repeat):
            for side in ("bare", "actbench"):
                where = tmp / f"{side}{i}"
                where.mkdir()
                db = where / "mlflow.db"
                shutil.copy(empty, db)
                uri = f"sqlite:///{db}"
                cmd = ([sys.executable, str(tmp / "bare.py"), uri, str(tmp / "payload.pkl")] if side == "bare"
                       else [*CLI, "export", "mlflow", str(sweep), "--tracking-uri", uri, "-q"])
                times[side].append(timed(cmd, where))
                stored[side].add(counts(db))
                shutil.rmtree(where)
    print(f"{n_members} members, {n_values:,} metric values each side; stored (runs, values): "
          f"actbench {sorted(stored['actbench'])}, bare {sorted(stored['bare'])}")
    ratios = [a / b for a, b in zip(times["actbench"], times["bare"])]
    for side, ts in times.items():
        med = statistics.median(ts)
        print(f"{side:9s} {med:7.2f} s  ({n_values / med:,.0f} values/s)  rounds: {', '.join(f'{t:.2f}' for t in ts)}")
    print(f"actbench / bare: {statistics.median(ratios):.3f}x (median of the rounds' ratios; target <= 1.2x)")


if __name__ == "__main__":
    main()
