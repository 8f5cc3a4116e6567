"""`attnlab backward` against PyTorch autograd in float64.

Each case runs `attnlab backward --format json --check` on inputs the test writes (Q, K, V and dO
as .npy, a mask file, a bias, an mse target; a bundle for an explicit scale and grouped heads) or on a
random problem whose Q, K, V and dO the JSON carries, and computes the same gradients in torch
float64: F.scaled_dot_product_attention (attn_mask / is_causal, scale = s / T, enable_gqa) for
dQ, dK and dV, and the same chain written out (repeat_interleave for grouped heads, RoPE's
rotate-half, ALiBi, the soft-cap, the mask, / T) for dT and the modifications.

Tolerance. The lab's gradients are fp32; its `--check` holds every entry within a derived bound
of the lab's own fp64 backward (core/backward_check.h) and reports each gradient's largest bound
(`max_bound`). Torch's float64 gradients differ from the lab's fp64 ones by rounding alone, some
10^-15 of a gradient's scale here (a few dozen terms per sum); so every entry must satisfy
    |lab - torch| <= max_bound + 1e-9 * max|torch|
and max_bound itself must stay below 1e-4 of the gradient's scale, so that a formula that differs
from torch's (a missing term, a wrong factor, a head summed into the wrong key/value head) cannot
pass: it moves entries by their own size.

Run by tests/python/run.sh (ctest label torch) with the venv of scripts/torch-venv; the attnlab
binary comes from $ATTNLAB_BINARY."""
import json
import math
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F

ATTNLAB = os.environ["ATTNLAB_BINARY"]
F64 = torch.float64
REL64 = 1e-9


def lab(args):
    cmd = [ATTNLAB, "backward", "--format", "json", "--check", "--backend", "cpu", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def arr(x):
    return np.array(x, dtype=np.float64)


def save(d, name, a):
    path = os.path.join(d, name)
    np.save(path, np.ascontiguousarray(a, dtype=np.float32))
    return path


def rope(x, pos0, theta):
    """Rotate-half RoPE of rows (..., L, d) at positions pos0.., in float64."""
    d = x.shape[-1]
    half = d // 2
    pos = torch.arange(x.shape[-2], dtype=F64)[:, None] + pos0
    ang = pos * theta ** (-2.0 * torch.arange(half, dtype=F64) / d)
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def standard_slopes(heads):
    def pow2(h):
        return [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]
    p = 1 << (heads.bit_length() - 1)
    if p == heads:
        return pow2(heads)
    return pow2(p) + pow2(2 * p)[0::2][: heads - p]


def torch_grads(q, k, v, dout, heads, kv_heads, n, m, scale, T, keep, is_causal=False, loss=None, target=None,
                theta=None, alibi=False, softcap=None, bias=None):
    """Gradients of (q, k, v, T) in float64. q (heads*n, d_k), k (kv_heads*m, d_k), v (kv_heads*m, d_v);
    keep (n, m) bool (True: visible). dout: the given dO, or None with `loss` ("sum" | "mse" + target);
    bias: an (n, m) additive term of the scaled scores.
    Returns a dict of dQ dK dV (stacked like the lab's), dT and the loss, from the written-out chain;
    and the same dQ dK dV from SDPA when there are no RoPE, ALiBi or soft-cap (a bias and the mask
    go in as one additive float attn_mask)."""
    d_k, d_v = q.shape[1], v.shape[1]
    g = heads // kv_heads

    def leaves():
        Q = torch.tensor(q.reshape(heads, n, d_k), dtype=F64, requires_grad=True)
        K = torch.tensor(k.reshape(kv_heads, m, d_k), dtype=F64, requires_grad=True)
        V = torch.tensor(v.reshape(kv_heads, m, d_v), dtype=F64, requires_grad=True)
        return Q, K, V

    def backward(O):
        if loss == "sum":
            L = O.sum()
        elif loss == "mse":
            L = 0.5 * ((O - torch.tensor(target.reshape(heads, n, d_v), dtype=F64)) ** 2).sum()
        else:
            L = (O * torch.tensor(dout.reshape(heads, n, d_v), dtype=F64)).sum()
        L.backward()
        return float(L.detach())

    out = {}
    # The chain written out.
    Q, K, V = leaves()
    Tt = torch.tensor(T, dtype=F64, requires_grad=True)
    Kx, Vx = K.repeat_interleave(g, dim=0), V.repeat_interleave(g, dim=0)
    Qr, Kr = (rope(Q, m - n, theta), rope(Kx, 0, theta)) if theta else (Q, Kx)
    S = Qr @ Kr.transpose(-1, -2) * scale
    if bias is not None:
        S = S + torch.tensor(bias, dtype=F64)
    if alibi:
        dist = (torch.arange(n, dtype=F64)[:, None] + m - n - torch.arange(m, dtype=F64)[None, :]).abs()
        S = S - torch.tensor(standard_slopes(heads), dtype=F64)[:, None, None] * dist
    if softcap:
        S = softcap * torch.tanh(S / softcap)
    # Divide, then mask: the mask's -inf never meets T's gradient (0 * inf would be no number).
    logits = (S / Tt).masked_fill(~torch.tensor(keep), -math.inf)
    O = torch.softmax(logits, dim=-1) @ Vx
    out["loss"] = backward(O)
    out["dQ"] = Q.grad.reshape(heads * n, d_k).numpy()
    out["dK"] = K.grad.reshape(kv_heads * m, d_k).numpy()
    out["dV"] = V.grad.reshape(kv_heads * m, d_v).numpy()
    out["dT"] = float(Tt.grad.detach())
    if theta or alibi or softcap:
        return out, None
    # SDPA: the scale folds in the temperature, s / T; a boolean mask is the mask; with a bias, one
    # additive float mask, (bias + mask) / T, added to the scores after the scale.
    Q, K, V = leaves()
    if bias is not None:
        additive = torch.tensor(bias, dtype=F64).masked_fill(~torch.tensor(keep), -math.inf) / T
        kw = {"attn_mask": additive}
    elif is_causal:
        kw = {"is_causal": True}
    else:
        kw = {"attn_mask": torch.tensor(keep)}
    O = F.scaled_dot_product_attention(Q[None], K[None], V[None], scale=scale / T, enable_gqa=g > 1, **kw)[0]
    backward(O)
    sdpa = {"dQ": Q.grad.reshape(heads * n, d_k).numpy(), "dK": K.grad.reshape(kv_heads * m, d_k).numpy(),
            "dV": V.grad.reshape(kv_heads * m, d_v).numpy()}
    return out, sdpa


class Backward(unittest.TestCase):
    def compare(self, js, want, names=("dQ", "dK", "dV")):
        check = js["check"]
        self.assertTrue(check["pass"], json.dumps(check))
        bounds = {g["name"]: g["max_bound"] for g in check["gradients"]}
        for name in names:
            got = arr(js["gradients"][name])
            ref = np.asarray(want[name], dtype=np.float64)
            self.assertEqual(got.shape, ref.shape, name)
            scale = float(np.max(np.abs(ref)))
            self.assertLessEqual(bounds[name], 1e-4 * scale, name)
            tol = bounds[name] + REL64 * scale
            err = float(np.max(np.abs(got - ref)))
            self.assertLessEqual(err, tol, f"{name}: max |lab - torch| {err:.3g}, tolerance {tol:.3g}")

    def compare_dt(self, js, want):
        bound = {g["name"]: g["max_bound"] for g in js["check"]["gradients"]}["dT"]
        err = abs(js["dT"] - want["dT"])
        self.assertLessEqual(err, bound + REL64 * abs(want["dT"]), f"dT: lab {js['dT']}, torch {want['dT']}")

    def files_case(self, n=5, m=5, d_k=8, d_v=4, T=1.0, mask="none", loss=None, seed=0, q_scale=1.0, bias=False):
        rng = np.random.default_rng(seed)
        q = (rng.standard_normal((n, d_k)) * q_scale).astype(np.float32)
        k = rng.standard_normal((m, d_k)).astype(np.float32)
        v = rng.standard_normal((m, d_v)).astype(np.float32)
        dout = rng.standard_normal((n, d_v)).astype(np.float32)
        target = rng.standard_normal((n, d_v)).astype(np.float32)
        additive = rng.standard_normal((n, m)).astype(np.float32)
        keep = np.ones((n, m), dtype=bool)
        with tempfile.TemporaryDirectory() as d:
            args = ["--q", save(d, "q.npy", q), "--k", save(d, "k.npy", k), "--v", save(d, "v.npy", v),
                    "--temperature", repr(T)]
            if mask == "causal":
                keep = np.tril(np.ones((n, m), dtype=bool), m - n)
                args += ["--mask", "causal"]
            elif mask == "file":
                keep = (np.add.outer(np.arange(n) * 7, np.arange(m) * 3) % 5) >= 2
                keep[np.arange(n), np.arange(n) + m - n] = True
                path = os.path.join(d, "mask.csv")
                with open(path, "w") as f:
                    for row in keep:
                        f.write(",".join("0" if x else "-inf" for x in row) + "\n")
                args += ["--mask", path]
            if bias:
                args += ["--score-mod", "bias:" + save(d, "bias.npy", additive)]
            if loss == "sum":
                args += ["--loss", "sum"]
            elif loss == "mse":
                args += ["--loss", "mse:" + save(d, "y.npy", target)]
            else:
                args += ["--dout", save(d, "do.npy", dout)]
            js = lab(args)
        want, sdpa = torch_grads(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                 dout.astype(np.float64), 1, 1, n, m, 1 / math.sqrt(d_k), T, keep,
                                 is_causal=mask == "causal" and n == m, loss=loss, target=target.astype(np.float64),
                                 bias=additive.astype(np.float64) if bias else None)
        self.compare(js, want)
        self.compare(js, sdpa)
        self.compare_dt(js, want)
        if loss:
            self.assertAlmostEqual(js["loss"], want["loss"], delta=1e-5 * max(1.0, abs(want["loss"])))
        return js

    def test_no_mask(self):
        self.files_case(T=0.7)

    def test_causal(self):
        self.files_case(n=6, m=6, mask="causal")

    def test_mask_file_decode_shape(self):
        self.files_case(n=3, m=7, mask="file")

    def test_additive_mask_decode_shape(self):
        # A bias (--score-mod bias:FILE) and a 0 / -inf mask file: SDPA's additive float attn_mask.
        self.files_case(n=3, m=7, mask="file", bias=True, T=0.7)

    def test_causal_decode_shape(self):
        # Bottom-right: query i sees keys up to i + m - n (an explicit attn_mask on torch's side,
        # whose is_causal is top-left).
        self.files_case(n=2, m=6, mask="causal")

    def test_loss_sum(self):
        js = self.files_case(mask="causal", loss="sum")
        self.assertEqual(js["upstream"], {"kind": "sum"})

    def test_loss_mse(self):
        js = self.files_case(loss="mse", T=1.3)
        self.assertEqual(js["upstream"]["kind"], "mse")

    def test_temperatures(self):
        # Q scaled by T keeps the logits O(1): the gradients stay of their natural size.
        for T in (1e-3, 1e-2, 0.2, 20.0, 50.0):
            with self.subTest(T=T):
                self.files_case(T=T, q_scale=T, mask="causal", seed=3)

    def test_bundle_explicit_scale(self):
        heads, kv_heads, n, m, d_k, d_v = 4, 2, 5, 5, 8, 6
        rng = np.random.default_rng(9)
        q = rng.standard_normal((heads * n, d_k)).astype(np.float32)
        k = rng.standard_normal((kv_heads * m, d_k)).astype(np.float32)
        v = rng.standard_normal((kv_heads * m, d_v)).astype(np.float32)
        dout = rng.standard_normal((heads * n, d_v)).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            call = {"name": "attn", "heads": heads, "kv_heads": kv_heads, "n": n, "m": m, "d_k": d_k, "d_v": d_v,
                    "scale": 0.2, "causal": True, "mask": None,
                    "q": os.path.basename(save(d, "q.npy", q)), "k": os.path.basename(save(d, "k.npy", k)),
                    "v": os.path.basename(save(d, "v.npy", v))}
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump({"format": "attnlab-bundle", "version": 1, "model": None, "tokens": [], "calls": [call],
                           "skipped": []}, f)
            js = lab(["--bundle", d, "--dout", save(d, "do.npy", dout), "--temperature", "0.8"])
        # A bundle's problem keeps the model's key/value heads, each shared by its group of query
        # heads (core/bundle.cpp), so dK and dV come per key/value head, summed over the group, as
        # torch's grouped-query autograd gives them.
        self.assertEqual((js["heads"], js["kv_heads"], js["scale"]), (heads, kv_heads, 0.2))
        keep = np.tril(np.ones((n, m), dtype=bool))
        want, sdpa = torch_grads(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                 dout.astype(np.float64), heads, kv_heads, n, m, 0.2, 0.8, keep, is_causal=True)
        self.compare(js, want)
        self.compare(js, sdpa)
        self.compare_dt(js, want)

    def random_case(self, args, heads, kv_heads, n, m, theta=None, alibi=False, softcap=None, window=None):
        js = lab(args)
        st = js["stages"]
        q, k, v = arr(st["q"]), arr(st["k"]), arr(st["v"])
        pos = np.arange(n)[:, None] + m - n
        keep = np.arange(m)[None, :] <= pos
        if window:
            keep &= np.abs(pos - np.arange(m)[None, :]) < window
        want, sdpa = torch_grads(q, k, v, arr(js["gradients"]["dO"]), heads, kv_heads, n, m, js["scale"],
                                 js["temperature"], keep, theta=theta, alibi=alibi, softcap=softcap)
        self.compare(js, want)
        if sdpa:
            self.compare(js, sdpa)
        self.compare_dt(js, want)

    def test_decode_grouped_causal(self):
        self.random_case(["--random", "7", "--queries", "3", "--heads", "4", "--kv-heads", "2", "--dk", "8",
                          "--dv", "5", "--mask", "causal", "--seed", "4", "--dout-seed", "2"], 4, 2, 3, 7)

    def test_modifications(self):
        self.random_case(["--random", "8", "--queries", "5", "--heads", "4", "--kv-heads", "2", "--dk", "8",
                          "--dv", "4", "--seed", "5", "--mask-mod", "causal,window:4", "--rope", "100",
                          "--score-mod", "alibi,softcap:2.5", "--temperature", "0.9"],
                         4, 2, 5, 8, theta=100.0, alibi=True, softcap=2.5, window=4)


if __name__ == "__main__":
    unittest.main()
