"""Random problems against PyTorch in float64: the lab's meaning of every input, checked by a second
writer.

The C++ random problems (tests/test_random_problems.cpp) hold every kernel to the lab's own fp64
reference, which shares the lab's reading of the modifications: which keys a window, a prefix or a
document lets through, which position a query of a decode shape sits at, which slope ALiBi gives a
head, which key/value head a query head reads, where a per-head bias's rows are. Here the same
kind of draws go through the command line and torch computes each one from the README's
definitions, written out in float64 (positions: query i at i + m - n, key j at j):

  RoPE rotate-half on Q and K at their positions; S = Q Kᵀ / √d_k; + ALiBi -slope_h |pos_i - j|
  (standard, one or per-head slopes); + the bias (shared or per head); the soft-cap C tanh(S / C);
  / T; the mask (a 0 / -inf file, causal, window |pos_i - j| < W, prefix-LM: keys below
  max(pos_i + 1, P), documents: equal ids); softmax; · V of the head's key/value head.

Each draw must be refused (exit 2) exactly when torch finds a query that sees no key (or it is a
problem the README says is refused: document ids with more queries than keys); otherwise
  - the forward of every CPU variant (staged, fused, decode in fp32; fused in bf16) is within the
    tolerance `attnlab verify` states for that run's output (its atol + rtol |ref|, which it
    derives against the lab's fp64), plus 1e-12 of the output's scale for the two fp64 chains'
    own rounding; and that tolerance must stay below 1e-3 of the scale in fp32, so that a
    different meaning, which moves entries by their own size, cannot pass;
  - the staged and the fused backward's dQ, dK, dV and dT are within `--check`'s bounds of torch
    autograd's, as in test_backward.py.

The draws are fixed (seeds 0 .. DRAWS - 1); ATTNLAB_TORCH_DRAWS=N runs N of them. Run by
tests/python/run.sh (ctest label torch); the attnlab binary comes from $ATTNLAB_BINARY."""
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

from test_backward import REL64, arr, rope, save, standard_slopes

ATTNLAB = os.environ["ATTNLAB_BINARY"]
F64 = torch.float64
DRAWS = int(os.environ.get("ATTNLAB_TORCH_DRAWS", "200"))


def attnlab(args):
    return subprocess.run([ATTNLAB, *args, "--backend", "cpu", "--format", "json"], capture_output=True, text=True)


def draw(seed, d):
    """A problem from `seed`, its files written into folder d: the command line's arguments and
    what torch needs (the arrays are filled in from the lab's JSON for a --random problem)."""
    r = random.Random(seed)
    c = {"seed": seed}
    files = r.random() < 0.4  # Q, K, V from files: one head, any number of queries
    if files:
        heads = kv = 1
        m = r.randint(1, 24)
        n = r.choice([m, r.randint(1, m), r.randint(m + 1, m + 5)])
    else:
        heads = r.choice([1, 2, 3, 4])
        kv = r.choice([g for g in range(1, heads + 1) if heads % g == 0])
        m = r.randint(1, 40)
        n = r.choice([m, r.randint(1, m)])
    d_k = r.choice([2, 4, 6, 8, 16])
    d_v = r.randint(1, 8)
    T = math.exp(r.uniform(math.log(0.5), math.log(2.0)))
    c.update(heads=heads, kv=kv, n=n, m=m, d_k=d_k, d_v=d_v, T=T)
    rng = np.random.default_rng(seed)
    if files:
        c["q"] = rng.standard_normal((n, d_k)).astype(np.float32)
        c["k"] = rng.standard_normal((m, d_k)).astype(np.float32)
        c["v"] = rng.standard_normal((m, d_v)).astype(np.float32)
        args = ["--q", save(d, "q.npy", c["q"]), "--k", save(d, "k.npy", c["k"]), "--v", save(d, "v.npy", c["v"])]
    else:
        args = ["--random", str(m), "--queries", str(n), "--heads", str(heads), "--kv-heads", str(kv),
                "--dk", str(d_k), "--dv", str(d_v), "--seed", str(seed)]
    args += ["--temperature", repr(T)]
    pos = np.arange(n)[:, None] + m - n
    key = np.arange(m)[None, :]
    keep = np.ones((n, m), dtype=bool)

    mask = r.choice(["none", "none", "causal", "file"])
    if mask == "file":
        keep = rng.random((n, m)) < 0.8
        path = os.path.join(d, "mask.csv")
        with open(path, "w") as f:
            for row in keep:
                f.write(",".join("0" if x else "-inf" for x in row) + "\n")
        args += ["--mask", path]
    elif mask == "causal":
        args += ["--mask", "causal"]
    mods = []
    causal = mask == "causal"
    # Refused by rule whatever the keys: the causal mask modification beside a mask file (the
    # README: put the causal blocks into the file); a causal rule with more queries than keys (the
    # queries are the last positions of the keys); document ids with more queries than keys.
    c["by_rule"] = False
    if mask != "causal" and r.random() < 0.3:
        mods.append("causal")
        causal = True
        c["by_rule"] |= mask == "file"
    prefix = r.randint(1, m) if r.random() < 0.2 else 0
    if prefix:
        mods.append(f"prefix:{prefix}")
        causal = True  # prefix implies causal
    if causal:
        keep &= key < np.maximum(pos + 1, prefix)
        c["by_rule"] |= n > m
    if r.random() < 0.3:
        w = r.randint(1, m)
        mods.append(f"window:{w}")
        keep &= np.abs(pos - key) < w
    if r.random() < 0.25:
        ids = np.cumsum(rng.random(m) < 0.3) if r.random() < 0.5 else rng.integers(-2, 2, m)
        path = os.path.join(d, "docs.csv")
        with open(path, "w") as f:
            f.write("\n".join(str(int(x)) for x in ids) + "\n")
        mods.append("document:" + path)
        if n > m:
            c["by_rule"] = True
        else:
            keep &= ids[pos] == ids[key]
    if mods:
        args += ["--mask-mod", r.choice([",", "+"]).join(mods)]
    c["keep"] = keep

    score = []
    c["slopes"] = None
    a = r.random()
    if a < 0.2:
        score.append("alibi")
        c["slopes"] = standard_slopes(heads)
    elif a < 0.3:
        s = round(r.uniform(0.05, 1.0), 3)
        score.append(f"alibi:{s}")
        c["slopes"] = [s] * heads
    elif a < 0.4:
        s = [round(r.uniform(0.05, 1.0), 3) for _ in range(heads)]
        score.append("alibi:" + "/".join(map(str, s)))
        c["slopes"] = s
    c["bias"] = None
    if r.random() < 0.3:
        rows = heads * n if r.random() < 0.5 else n
        b = rng.standard_normal((rows, m)).astype(np.float32)
        score.append("bias:" + save(d, "bias.npy", b))
        c["bias"] = np.repeat(b.reshape(1, n, m), heads, axis=0) if rows == n else b.reshape(heads, n, m)
    c["softcap"] = None
    if r.random() < 0.3:
        c["softcap"] = round(r.uniform(0.5, 5.0), 3)
        score.append(f"softcap:{c['softcap']}")
    if score:
        r.shuffle(score)  # a spec is a set: the order of its items is not the order they act in
        args += ["--score-mod", ",".join(score)]
    c["theta"] = None
    if r.random() < 0.3:
        c["theta"] = r.choice([10000.0, 100.0, 10.0])
        args += ["--rope", repr(c["theta"])]
    c["args"] = args
    return c


def chain(c, Q, K, V, T):
    """O (heads, n, d_v) of the README's chain in float64, from leaves Q (heads, n, d_k),
    K and V (kv_heads, m, .) and the temperature T (tensors, so that autograd can run back)."""
    heads, n, m = c["heads"], c["n"], c["m"]
    g = heads // c["kv"]
    Kx, Vx = K.repeat_interleave(g, dim=0), V.repeat_interleave(g, dim=0)
    if c["theta"]:
        Q, Kx = rope(Q, m - n, c["theta"]), rope(Kx, 0, c["theta"])
    S = Q @ Kx.transpose(-1, -2) / math.sqrt(c["d_k"])
    if c["slopes"] is not None:
        dist = (torch.arange(n, dtype=F64)[:, None] + m - n - torch.arange(m, dtype=F64)[None, :]).abs()
        S = S - torch.tensor(c["slopes"], dtype=F64)[:, None, None] * dist
    if c["bias"] is not None:
        S = S + torch.tensor(c["bias"], dtype=F64)
    if c["softcap"]:
        S = c["softcap"] * torch.tanh(S / c["softcap"])
    logits = (S / T).masked_fill(~torch.tensor(c["keep"]), -math.inf)
    return torch.softmax(logits, dim=-1) @ Vx


class RandomAgainstTorch(unittest.TestCase):
    def one(self, seed):
        with tempfile.TemporaryDirectory() as d:
            c = draw(seed, d)
            args = c["args"]
            heads, kv, n, m, d_k, d_v = c["heads"], c["kv"], c["n"], c["m"], c["d_k"], c["d_v"]
            refused = c["by_rule"] or not c["keep"].any(axis=1).all()
            what = " ".join(args)
            first = attnlab(["run", "--variant", "staged", *args])
            if refused:
                self.assertEqual(first.returncode, 2, f"{what}: torch finds a query without a key; the lab ran it")
                self.assertTrue(first.stderr.startswith("error: ") and first.stderr.count("\n") == 1, first.stderr)
                return "refused"
            self.assertEqual(first.returncode, 0, f"{what}: {first.stderr}")
            js = json.loads(first.stdout)
            st = js["stages"]
            # The JSON writes each fp32 value by its shortest round trip: back to fp32, exactly.
            q, k, v = (arr(st[x]).astype(np.float32).astype(np.float64) for x in ("q", "k", "v"))
            self.assertEqual((q.shape, k.shape, v.shape), (((heads * n, d_k)), (kv * m, d_k), (kv * m, d_v)), what)
            if "q" in c:  # files: the lab read what the test wrote
                np.testing.assert_array_equal(q, c["q"])
            self.assertAlmostEqual(js["scale"], 1 / math.sqrt(d_k), delta=1e-15)

            def leaves():
                return (torch.tensor(q.reshape(heads, n, d_k), dtype=F64, requires_grad=True),
                        torch.tensor(k.reshape(kv, m, d_k), dtype=F64, requires_grad=True),
                        torch.tensor(v.reshape(kv, m, d_v), dtype=F64, requires_grad=True))

            want = chain(c, *leaves(), torch.tensor(c["T"], dtype=F64)).detach().numpy().reshape(heads * n, d_v)
            scale = float(np.max(np.abs(want)))
            for variant, precision in (("staged", "fp32"), ("fused", "fp32"), ("decode", "fp32"), ("fused", "bf16")):
                how = ["--variant", variant, "--precision", precision]
                run = first if variant == "staged" else attnlab(["run", *how, *args])
                self.assertEqual(run.returncode, 0, f"{what} {how}: {run.stderr}")
                got = arr(json.loads(run.stdout)["stages"]["output"])
                ver = attnlab(["verify", *how, *args])
                self.assertEqual(ver.returncode, 0, f"{what} {how}: verify {ver.stdout}{ver.stderr}")
                tol = next(s for s in json.loads(ver.stdout)["stages"] if s["stage"] == "output")
                if precision == "fp32":
                    self.assertLessEqual(tol["atol"], 1e-3 * scale, f"{what} {how}: a tolerance that could pass a meaning")
                bound = tol["atol"] + tol["rtol"] * np.abs(want) + 1e-12 * scale
                worst = np.unravel_index(np.argmax(np.abs(got - want) - bound), want.shape)
                self.assertTrue(np.all(np.abs(got - want) <= bound),
                                f"{what} {how}: output[{worst}] lab {got[worst]}, torch {want[worst]}")

            dseed = str(seed % 7)
            for variant in ("staged", "fused"):
                back = attnlab(["backward", "--check", "--variant", variant, "--dout-seed", dseed, *args])
                self.assertEqual(back.returncode, 0, f"{what} backward {variant}: {back.stdout[-400:]}{back.stderr}")
                bj = json.loads(back.stdout)
                self.assertTrue(bj["check"]["pass"], what)
                Q, K, V = leaves()
                Tt = torch.tensor(c["T"], dtype=F64, requires_grad=True)
                dO = arr(bj["gradients"]["dO"]).reshape(heads, n, d_v)
                (chain(c, Q, K, V, Tt) * torch.tensor(dO, dtype=F64)).sum().backward()
                ref = {"dQ": Q.grad.reshape(heads * n, d_k), "dK": K.grad.reshape(kv * m, d_k),
                       "dV": V.grad.reshape(kv * m, d_v)}
                bounds = {gr["name"]: gr["max_bound"] for gr in bj["check"]["gradients"]}
                # The bounds must stay far below the gradients' scale (the largest entry of the
                # three: one of them may be all but zero, as dQ where every query sees one key).
                gscale = max(float(np.max(np.abs(x.numpy()))) for x in ref.values())
                for name, r in ref.items():
                    r = r.numpy()
                    got = arr(bj["gradients"][name]).reshape(r.shape)
                    err = float(np.max(np.abs(got - r)))
                    self.assertLessEqual(err, bounds[name] + REL64 * gscale,
                                         f"{what} backward {variant} {name}: max |lab - torch| {err:.3g}, bound {bounds[name]:.3g}")
                    self.assertLessEqual(bounds[name], 1e-4 * gscale, f"{what} backward {variant}: {name}'s bound")
                dT = float(Tt.grad)
                self.assertLessEqual(abs(bj["dT"] - dT), bounds["dT"] + REL64 * abs(dT), f"{what} backward {variant} dT")
            return "ran"

    def test_draws(self):
        seen = {"ran": 0, "refused": 0}
        for seed in range(DRAWS):
            with self.subTest(seed=seed):
                seen[self.one(seed)] += 1
        # The draws reach both outcomes (a change to draw() that made every draw refused would
        # leave the test passing while checking nothing).
        print(f"\n{seen['ran']} draws ran, {seen['refused']} refused", file=sys.stderr)
        if DRAWS >= 20:
            self.assertGreater(seen["ran"], DRAWS // 2, seen)
            self.assertGreater(seen["refused"], 0, seen)


if __name__ == "__main__":
    unittest.main()
