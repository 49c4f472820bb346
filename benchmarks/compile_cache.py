"""What `torch.compile` of the engine's loss-and-gradient costs per process, cold and with caches.

The function compiled is the hand-written loss and gradient of a 240-member GELU stack
(models/hand_gradient.py's forward, MSE and backward as one pure function; Adam stays eager). Each measurement is
a fresh process: the seconds to import `torch._dynamo`, to compile and run the first call, and the
per-call time afterwards, against the same function run eagerly in the same process. Modes, in
this order, sharing one cache folder:

- cold: empty inductor cache (FX graph and AOTAutograd caches on, torch's defaults);
- warm: the on-disk caches the cold run left;
- mega-cache: `torch.compiler.load_cache_artifacts` of the bytes the cold run saved with
  `torch.compiler.save_cache_artifacts`, into an empty folder;
- cpp_wrapper: cold, with inductor's `cpp_wrapper` (C++ instead of Python around the kernels).

Usage:
    python benchmarks/compile_cache.py [--calls 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

M, N, D, H = 240, 10, 64, 64


def loss_and_grads(x, y, w1, b1, w2, b2):
    """hand_gradient.HandGradient.loss for one GELU slice, as a pure function."""
    import torch

    h = torch.baddbmm(b1, x, w1)
    u = h * 0.7071067811865476
    phi = torch.erf(u) * 0.5 + 0.5
    pdf = torch.exp(-(u * u)) * 0.3989422804014327
    a = h * phi
    d = phi + h * pdf
    r = (a * w2).sum(dim=-1, keepdim=True) + b2 - y
    loss = (r * r).mean(dim=(1, 2))
    g_out = r * (2.0 / r.shape[1])
    g_h = g_out * w2 * d
    g_w1 = torch.bmm(x.transpose(1, 2), g_h)
    g_w2 = (g_out * a).sum(dim=1, keepdim=True)
    return loss, g_w1, g_h.sum(dim=1, keepdim=True), g_w2, g_out.sum(dim=1, keepdim=True)


def child(mode: str, calls: int, artifacts: str) -> None:
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter()
    import torch._dynamo  # noqa: F401

    t_dynamo = time.perf_counter()
    if mode == "cpp_wrapper":
        import torch._inductor.config as ic

        ic.cpp_wrapper = True
    if mode == "mega-cache":
        torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g) for s in ((M, N, D), (M, N, 1), (M, D, H), (M, 1, H), (M, 1, H), (M, 1, 1))]
    compiled = torch.compile(loss_and_grads)
    t = time.perf_counter()
    compiled(*args)
    first = time.perf_counter() - t
    if mode == "cold":
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            Path(artifacts).write_bytes(saved[0])
    per = {}
    for name, f in (("compiled", compiled), ("eager", loss_and_grads)) * 2:
        t = time.process_time()
        for _ in range(calls):
            f(*args)
        per[name] = min(per.get(name, 1e9), (time.process_time() - t) / calls * 1e3)
    print(json.dumps({"import_torch_s": t_torch - t0, "import_dynamo_s": t_dynamo - t_torch, "first_call_s": first,
                      "compiled_ms": per["compiled"], "eager_ms": per["eager"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", default="")
    ap.add_argument("--artifacts", default="")
    args = ap.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        child(args.child, args.calls, args.artifacts)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from provenance import header

    print(header())
    print(f"load average {os.getloadavg()[0]:.2f}; {M}-member GELU stack, {args.threads} thread(s); per-call "
          f"times are CPU time")
    root = Path(tempfile.mkdtemp(prefix="actbench-compile-"))
    artifacts = root / "artifacts.bin"
    try:
        for mode, cache in (("cold", "a"), ("warm", "a"), ("mega-cache", "b"), ("cpp_wrapper", "c")):
            if mode == "mega-cache" and not artifacts.exists():
                print("mega-cache: nothing was saved by the cold run")
                continue
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(root / cache), "OMP_NUM_THREADS": str(args.threads)}
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--calls", str(args.calls), "--threads",
                                  str(args.threads), "--artifacts", str(artifacts)], env=env, capture_output=True,
                                 text=True)
            if out.returncode != 0:
                last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode
                print(f"{mode}: failed: {last}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{mode:12s} import torch._dynamo {r['import_dynamo_s']:.2f} s, compile + first call "
                  f"{r['first_call_s']:.2f} s; per call compiled {r['compiled_ms']:.2f} ms, eager "
                  f"{r['eager_ms']:.2f} ms ({r['eager_ms'] / r['compiled_ms']:.2f}x)", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
