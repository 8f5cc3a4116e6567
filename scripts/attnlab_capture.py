#!/usr/bin/env python3
"""Capture the attention of a PyTorch model as an attnlab bundle (core/bundle.h, README).

As a module:

    from attnlab_capture import capture
    result = capture(model, input_ids, out="bundle", tokens=["The", " cat"])

runs ``model(*args, **kwargs)`` once (under torch.no_grad) while recording every call of
``torch.nn.functional.scaled_dot_product_attention`` (however the model reached it: through ``F``,
a name imported from it, or ``torch._C._nn``; a torch function mode sees the call itself) and
every ``nn.MultiheadAttention`` module, then writes DIR/manifest.json and float32 .npy files. It
returns what the model returned.

As a command (on a machine that has the model's weights):

    python3 scripts/attnlab_capture.py --hf gpt2 --text "The cat sat on the mat" --out bundle
    attnlab run --bundle bundle --layer 0 --head 3

What is handled: is_causal, attn_mask (boolean: True keeps; additive float: -inf and values at
or below half the dtype's lowest, such as torch.finfo(dtype).min, block the key and become the
bundle's 0 / -inf mask; the finite rest, such as ALiBi's distances or a relative-position bias,
becomes its "bias"), broadcast masks, an explicit scale, grouped-query attention (fewer key/value
heads, enable_gqa; key/value heads the model repeated before the call, as Hugging Face's repeat_kv
does whenever it passes a mask, are stored once, so a grouped-query model keeps its groups), batch
> 1 (element `batch` is kept). Notes say what the replay cannot repeat: dropout in training mode
(sdpa's dropout_p, MultiheadAttention's dropout), a model that ran in another dtype than float32
(the bundle holds its values widened to float32). Calls the lab cannot represent (query
heads that do not share key/value heads evenly, MultiheadAttention's bias_k, a mask with NaN or
+inf, a query row that sees no key, as left padding under a causal mask gives) are listed under
"skipped" in the manifest with the reason, and named on stderr.

RoPE, where the capture can see it: while the model runs, every module-level
``apply_rotary_pos_emb(q, k, cos, sin, ...)`` of the model's Python modules (Hugging Face's LLaMA,
Mistral, Qwen2, Gemma, Falcon, GPT-NeoX, ...) is wrapped. When the Q and K that one returns are the
ones that reach the attention call, the capture rotates its inputs (Q and K before the rotation)
with the lab's RoPE (rotate-half, query i at position i + m - n, key j at j, base = the config's
rope_theta) and compares: within --rope-tolerance (default 1e-5, relative to the largest |Q| or
|K|), the bundle holds Q and K before rotation and the call's "rope_theta"; the lab rotates them
itself. Otherwise (rope_scaling, partial rotary, positions that are not 0..m-1, a cache, fp32
angles far into a long text), and for models that rotate in code the capture cannot see, it
writes the rotated Q and K as they reached the call, with a note in the call's "notes" saying why.
One line per call on stderr says what was captured.

The bundle: one entry per call in manifest.json's "calls" (name, heads, kv_heads, n, m, d_k, d_v,
scale or null for 1/sqrt(d_k), causal, mask file or null, bias file or null, rope_theta or null,
q/k/v/output files, notes); arrays are 2-D, heads stacked along rows: q (heads*n, d_k),
k (kv_heads*m, d_k), v (kv_heads*m, d_v), output (heads*n, d_v) what the call returned, mask
(n, m) or (heads*n, m) of 0 / -inf, bias (n, m) or (heads*n, m) of finite values (0 where masked).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

FORMAT = "attnlab-bundle"
VERSION = 1
ROPE_TOLERANCE = 1e-5  # the lab's rotation of the un-rotated Q/K against the model's, relative
ROTATED_NOTE = ("RoPE is applied inside the model before the attention call; the bundle holds the "
                "rotated Q and K")


def _blocking(mask: torch.Tensor) -> torch.Tensor:
    """Where an additive float mask blocks the key: -inf, or at or below half the lowest value of
    its dtype (torch.finfo(dtype).min is what Hugging Face writes, possibly plus a small bias)."""
    return torch.isneginf(mask) | (mask <= torch.finfo(mask.dtype).min / 2)


def rope_rotate(x: np.ndarray, pos0: int, theta: float, cos_sin=None) -> np.ndarray:
    """The lab's RoPE (core/modify.cpp rope_rotate) in float64: rows of x (rows, d) at positions
    pos0, pos0 + 1, ...; value c paired with c + d/2, turned by pos * theta^(-2c/d). cos_sin: the
    (cos, sin) of every (row, c) to use instead (the fp32 angles of a model)."""
    x = np.asarray(x, np.float64)
    rows, d = x.shape
    half = d // 2
    if cos_sin is None:
        pos = pos0 + np.arange(rows, dtype=np.float64)
        angle = pos[:, None] * theta ** (-2.0 * np.arange(half, dtype=np.float64) / d)[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
    else:
        cos, sin = cos_sin
    a, b = x[:, :half], x[:, half:2 * half]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)


def _fp32_cos_sin(rows: int, pos0: int, d: int, theta: float):
    """cos and sin of the angles as Hugging Face's default rotary embedding computes them in fp32
    (inverse frequencies and their products with the positions rounded to fp32)."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    angle = (pos0 + torch.arange(rows, dtype=torch.int64)).float()[:, None] * inv[None, :]
    return angle.cos().double().numpy(), angle.sin().double().numpy()


def _shared_heads(k: torch.Tensor, v: torch.Tensor) -> int:
    """The fewest key/value heads that k and v, (heads, m, d), are repeat_interleave'd copies of
    (each head once per query head of its group, as repeat_kv writes them): heads when none repeat."""
    heads = k.shape[0]
    for g in range(1, heads):
        if heads % g:
            continue
        rep = heads // g
        if all(torch.equal(t.reshape(g, rep, *t.shape[1:]),
                           t.reshape(g, rep, *t.shape[1:])[:, :1].expand(g, rep, *t.shape[1:])) for t in (k, v)):
            return g
    return heads


class _SdpaMode(TorchFunctionMode):
    """Routes every call of the scaled_dot_product_attention builtin to the recorder (the mode is
    off while its handler runs, so the recorder's own call of it goes straight to torch)."""

    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDPA:
            return self.rec._sdpa(*args, **kwargs)
        return func(*args, **kwargs)


_SDPA = torch._C._nn.scaled_dot_product_attention


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|."""
    diff = float(np.max(np.abs(got - want), initial=0.0))
    scale = float(np.max(np.abs(want), initial=0.0))
    return diff / scale if scale > 0 else diff


def _config_of(mod, model):
    """The config an attention module answers to (its own, else the model's), text part first."""
    cfg = getattr(mod, "config", None) or getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        try:
            cfg = cfg.get_text_config()
        except Exception:
            pass
    return cfg


def _rope_settings(cfg, mod) -> dict:
    """What a config says about its RoPE: {"theta", "type", "partial", "params"} (None when absent).
    Reads Transformers 5's rope_parameters (flat, or one per layer type) and the older rope_theta,
    rope_scaling, rotary_emb_base, rotary_pct, partial_rotary_factor."""
    out = {"theta": None, "type": None, "partial": None, "params": None}
    if cfg is None:
        return out
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) for v in rp.values()):
        kind = getattr(mod, "layer_type", None) or getattr(mod, "attention_type", None)
        if kind in rp:
            rp = rp[kind]
        else:
            thetas = {v.get("rope_theta") for v in rp.values()}
            rp = next(iter(rp.values())) if len(thetas) == 1 else None
    if isinstance(rp, dict):
        out["params"] = rp
        out["theta"] = rp.get("rope_theta")
        out["type"] = rp.get("rope_type") or rp.get("type")
        out["partial"] = rp.get("partial_rotary_factor")
    if out["theta"] is None:
        out["theta"] = getattr(cfg, "rope_theta", None) or getattr(cfg, "rotary_emb_base", None)
    scaling = getattr(cfg, "rope_scaling", None)
    if out["type"] in (None, "default") and isinstance(scaling, dict):
        out["type"] = scaling.get("rope_type") or scaling.get("type")
        out["params"] = scaling
    if out["partial"] is None:
        out["partial"] = getattr(cfg, "partial_rotary_factor", None) or getattr(cfg, "rotary_pct", None)
    return out


def _rope_signs(model) -> str | None:
    """Why one would think the model uses RoPE (a config key, a rotary module), or None."""
    cfg = getattr(model, "config", None)
    if cfg is not None:
        for key in ("rope_theta", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base",
                    "partial_rotary_factor"):
            if getattr(cfg, key, None) is not None:
                return f"its config has {key}"
        if getattr(cfg, "position_embedding_type", None) == "rotary":
            return "its config has position_embedding_type 'rotary'"
    for mod in model.modules():
        name = type(mod).__name__.lower()
        if "rotary" in name or "rope" in name:
            return f"it has a {type(mod).__name__} module"
    return None


class _Recorder:
    def __init__(self, model: torch.nn.Module, batch: int, rope_tolerance: float = ROPE_TOLERANCE,
                 log=sys.stderr):
        self.model = model
        self.batch = batch
        self.rope_tolerance = rope_tolerance
        self.log = log
        self.calls: list[dict[str, Any]] = []
        self.skipped: list[dict[str, str]] = []
        self.stack: list[str] = []
        self.names: dict[str, int] = {}
        self.handles: list[Any] = []
        self.in_mha = 0
        self.original = _SDPA
        self.mode = _SdpaMode(self)
        self.modules = dict(model.named_modules())
        # RoPE: the Python modules whose apply_rotary_pos_emb is wrapped (module -> original), the
        # last rotation seen inside each running module (by name), rotations whose form the
        # capture cannot read, and a reason to think the model rotates at all.
        self.rope_patched: dict[Any, Any] = {}
        self.rope_pending: dict[str, dict[str, Any]] = {}
        self.rope_unreadable: dict[str, str] = {}
        self.rope_signs = _rope_signs(model)

    def say(self, text: str) -> None:
        if self.log is not None:
            print(f"attnlab_capture: {text}", file=self.log)

    # -- names: the innermost module running when a call happens
    def _name(self) -> str:
        base = next((n for n in reversed(self.stack) if n), "model")
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}#{count + 1}"

    def __enter__(self):
        for name, mod in self.model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._push(name)))
            self.handles.append(mod.register_forward_hook(self._pop()))
            if isinstance(mod, torch.nn.MultiheadAttention):
                self.handles.append(mod.register_forward_hook(self._mha_hook(name or "mha"), with_kwargs=True))
        for mod in self.model.modules():
            pymod = sys.modules.get(type(mod).__module__)
            fn = getattr(pymod, "apply_rotary_pos_emb", None) if pymod is not None else None
            if pymod is not None and pymod not in self.rope_patched and callable(fn):
                self.rope_patched[pymod] = fn
                setattr(pymod, "apply_rotary_pos_emb", self._rope_wrapper(fn, pymod.__name__))
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(None, None, None)
        for pymod, fn in self.rope_patched.items():
            setattr(pymod, "apply_rotary_pos_emb", fn)
        for h in self.handles:
            h.remove()
        return False

    # -- RoPE: a module-level apply_rotary_pos_emb(q, k, cos, sin, ...) returning (q_rot, k_rot)
    def _rope_wrapper(self, fn, where):
        @functools.wraps(fn)
        def wrapped(*args, **kw):
            out = fn(*args, **kw)
            owner = self.stack[-1] if self.stack else ""
            q_in = args[0] if len(args) > 0 else kw.get("q")
            k_in = args[1] if len(args) > 1 else kw.get("k")
            cos = args[2] if len(args) > 2 else kw.get("cos")
            if (torch.is_tensor(q_in) and torch.is_tensor(k_in) and isinstance(out, tuple) and len(out) >= 2
                    and torch.is_tensor(out[0]) and torch.is_tensor(out[1])
                    and out[0].shape == q_in.shape and out[1].shape == k_in.shape):
                self.rope_pending[owner] = {
                    "q_in": q_in.detach(), "k_in": k_in.detach(), "q_out": out[0].detach(),
                    "k_out": out[1].detach(), "where": f"{where}.apply_rotary_pos_emb",
                    "rotary_dim": int(cos.shape[-1]) if torch.is_tensor(cos) else None}
            else:
                self.rope_unreadable[owner] = (f"{where}.apply_rotary_pos_emb does not take (q, k, ...) and "
                                               "return the rotated (q, k)")
            return out
        return wrapped

    def _rope_for(self, owner: str, q4, k4):
        """The RoPE of the call about to be recorded inside module `owner`: (theta, q_pre, k_pre,
        rel_err, None) with q_pre, k_pre shaped like q4, k4, or (None, None, None, None, note)
        where the bundle keeps the rotated Q and K (note None: the call has no RoPE to speak of)."""
        rope = self.rope_pending.pop(owner, None)
        if rope is None:
            why = self.rope_unreadable.pop(owner, None)
            if why is not None:
                return None, None, None, None, f"{ROTATED_NOTE} ({why})"
            mod = self.modules.get(owner)
            pymod = sys.modules.get(type(mod).__module__) if mod is not None else None
            if pymod in self.rope_patched:
                return None, None, None, None, None  # its apply_rotary_pos_emb did not run: no RoPE here
            if self.rope_signs:
                return None, None, None, None, (f"{ROTATED_NOTE} (the model seems to use RoPE: {self.rope_signs}; "
                                                "its rotation is not a module-level apply_rotary_pos_emb the "
                                                "capture can see)")
            return None, None, None, None, None

        def fail(why):
            return None, None, None, None, f"{ROTATED_NOTE} ({why})"

        q_in, k_in, q_out, k_out = rope["q_in"], rope["k_in"], rope["q_out"], rope["k_out"]
        if q_out.dim() == 4 and q_out.shape != q4.shape and q_out.transpose(1, 2).shape == q4.shape:
            q_in, q_out = q_in.transpose(1, 2), q_out.transpose(1, 2)  # rotated as (B, L, H, E)
            k_in, k_out = k_in.transpose(1, 2), k_out.transpose(1, 2)
        if (q_out.dim() == q4.dim() and q_out.shape[:-1] == q4.shape[:-1] and q_out.shape[-1] < q4.shape[-1]
                and torch.equal(q4[..., :q_out.shape[-1]], q_out)):
            return fail(f"partial rotary: the model rotates the first {q_out.shape[-1]} of the {q4.shape[-1]} "
                        "values of each head")
        if q_out.shape != q4.shape or not torch.equal(q_out, q4):
            return fail(f"the Q that reached the attention call is not the one {rope['where']} returned")
        if k_out.dim() == 4 and k4.dim() == 4 and k_out.shape[2] != k4.shape[2]:
            return fail(f"the attention call has {k4.shape[2]} keys, {k_out.shape[2]} of them rotated in this "
                        "step (the others come from a cache, rotated before)")
        if k_out.dim() == 4 and k4.dim() == 4 and k_out.shape[1] != k4.shape[1] and k4.shape[1] % k_out.shape[1] == 0:
            rep = k4.shape[1] // k_out.shape[1]  # repeat_kv: every key/value head once per query head
            k_in, k_out = k_in.repeat_interleave(rep, dim=1), k_out.repeat_interleave(rep, dim=1)
        if k_out.shape != k4.shape or not torch.equal(k_out, k4):
            return fail(f"the K that reached the attention call is not the one {rope['where']} returned")
        d = q4.shape[-1]
        mod = self.modules.get(owner)
        cfg = _rope_settings(_config_of(mod, self.model), mod)
        theta = cfg["theta"]
        if theta is None:
            return fail("the model's config names no rope_theta")
        if d % 2:
            return fail(f"d_k {d} is odd")
        # Batch element b, heads stacked along rows, as the bundle writes them.
        b = self.batch
        pick = lambda t: t[b if t.shape[0] > 1 else 0]
        heads, n, _ = pick(q4).shape
        kvh, m, _ = pick(k4).shape
        qi = pick(q_in).double().reshape(heads, n, d).numpy()
        ki = pick(k_in).double().reshape(kvh, m, d).numpy()
        qo = pick(q4).double().reshape(heads, n, d).numpy()
        ko = pick(k4).double().reshape(kvh, m, d).numpy()

        def err(cos_sin_q=None, cos_sin_k=None):
            eq = _rel_err(np.stack([rope_rotate(x, m - n, theta, cos_sin_q) for x in qi]), qo)
            ek = _rel_err(np.stack([rope_rotate(x, 0, theta, cos_sin_k) for x in ki]), ko)
            return max(eq, ek)

        rel = err()
        if rel <= self.rope_tolerance:
            return float(theta), q_in, k_in, rel, None
        # Why not: the config's kind of RoPE, a partial rotation, or the model's fp32 angles.
        kind = cfg["type"]
        if kind not in (None, "default"):
            return fail(f"rope_scaling '{kind}' ({cfg['params']}): the lab's RoPE is the plain one; the lab's "
                        f"rotation differs by {rel:.2g}")
        rdim = rope["rotary_dim"]
        if rdim is not None and rdim < d:
            return fail(f"partial rotary: the model rotates the first {rdim} of the {d} values of each head")
        if cfg["partial"] is not None and float(cfg["partial"]) < 1:
            return fail(f"partial rotary (partial_rotary_factor {cfg['partial']})")
        rel32 = err(_fp32_cos_sin(n, m - n, d, theta), _fp32_cos_sin(m, 0, d, theta))
        if rel32 <= self.rope_tolerance:
            return fail(f"the model computes its angles in fp32, the lab in double; at positions up to {m - 1} "
                        f"they differ by {rel:.2g} relative, more than the tolerance {self.rope_tolerance:g} "
                        "(--rope-tolerance)")
        return fail(f"rotating the un-rotated Q and K by the lab's RoPE (theta {theta:g}, query i at position "
                    f"i + {m - n}, key j at j) differs from what reached the attention call by {rel:.2g} "
                    "relative (other positions, such as left padding? another convention?)")

    def _push(self, name):
        def hook(mod, args):
            self.stack.append(name)
        return hook

    def _pop(self):
        def hook(mod, args, out):
            if self.stack:
                self.stack.pop()
        return hook

    # -- torch.nn.functional.scaled_dot_product_attention
    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              **kw):
        out = self.original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, **kw)
        if not self.in_mha:
            self._record(self._name(), query, key, value, attn_mask, is_causal, scale, out,
                         dropout_p, owner=self.stack[-1] if self.stack else "")
        return out

    def _skip(self, name, reason):
        self.skipped.append({"name": name, "reason": reason})
        self.say(f"skipped '{name}': {reason}")

    def _record(self, name, q, k, v, mask, causal, scale, out, dropout_p=0.0, owner=None, dropout_note=None):
        notes = []
        if dropout_note:
            notes.append(dropout_note)
        elif dropout_p:
            notes.append(f"dropout_p={dropout_p} (the model was training?); the lab computes without dropout")
        if q.dtype != torch.float32:
            kind = str(q.dtype).replace("torch.", "")
            notes.append(f"the model ran in {kind}: the bundle holds its {kind} Q, K, V and output widened to "
                         f"float32, so an fp32 replay differs from that output by about {kind}'s rounding")

        def four(t):  # (..., L, E) -> (B, H, L, E)
            if t.dim() == 2:
                return t[None, None]
            if t.dim() == 3:
                return t[:, None]
            return t.reshape(t.shape[0], -1, t.shape[-2], t.shape[-1])

        q4, k4, v4, o4 = four(q), four(k), four(v), four(out)
        b = self.batch
        if b >= q4.shape[0]:
            raise ValueError(f"batch {b} requested but {name} has batch size {q4.shape[0]}")
        pick = lambda t: t[b if t.shape[0] > 1 else 0]
        qh, kh, vh, oh = pick(q4), pick(k4), pick(v4), pick(o4)
        heads, n, d_k = qh.shape
        kv_heads, m, _ = kh.shape
        d_v = vh.shape[-1]
        if heads % kv_heads:
            self._skip(name, f"{heads} query heads over {kv_heads} key/value heads")
            return
        entry = {"name": name, "heads": heads, "kv_heads": kv_heads, "n": n, "m": m, "d_k": d_k,
                 "d_v": d_v, "scale": None if scale is None else float(scale),
                 "causal": bool(causal), "mask": None, "bias": None, "rope_theta": None}
        arrays = {"q": qh.reshape(heads * n, d_k), "k": kh.reshape(kv_heads * m, d_k),
                  "v": vh.reshape(kv_heads * m, d_v), "output": oh.reshape(heads * n, d_v)}
        did = []
        if mask is not None:
            mk = mask
            while mk.dim() < 4:
                mk = mk[None]
            mk = torch.broadcast_to(mk, (q4.shape[0], heads, n, m))[b]
            bias = None
            if mk.dtype == torch.bool:
                add = torch.where(mk, 0.0, -math.inf)
            else:
                if bool((torch.isnan(mk) | torch.isposinf(mk)).any()):
                    self._skip(name, "additive mask with NaN or +inf values")
                    return
                # The blocking entries become the 0 / -inf mask, the finite rest the bias.
                blocked = _blocking(mk)
                add = torch.where(blocked, -math.inf, 0.0)
                bias = torch.where(blocked, 0.0, mk.double()).float()
                if not bool((bias != 0).any()):
                    bias = None
            if causal:  # torch refuses both; kept for completeness
                add = add + torch.triu(torch.full((n, m), -math.inf), 1)
                entry["causal"] = False
            # A query row that sees no key (left padding under a causal mask): torch writes 0, NaN or
            # (under a mask of the dtype's lowest value) the mean of V there; the lab refuses the
            # row, so the call could not be replayed.
            unseeing = torch.isinf(add).all(dim=-1).any(dim=0)
            if bool(unseeing.any()):
                rows = [int(i) for i in torch.nonzero(unseeing).flatten()]
                shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
                self._skip(name, f"{len(rows)} query row(s) of batch element {b} see no key (rows {shown}: "
                                 "padding?); torch gives them 0, NaN or the mean of V, the lab refuses such a row; capture "
                                 "an element without padding (batch=...)")
                return
            if bool(torch.isinf(add).any()):
                same = bool((add == add[:1]).all())
                arrays["mask"] = add[0] if same else add.reshape(heads * n, m)
                did.append("mask " + ("shared" if same else "per head"))
            if bias is not None:
                same = bool((bias == bias[:1]).all())
                arrays["bias"] = bias[0] if same else bias.reshape(heads * n, m)
                did.append("bias " + ("shared" if same else "per head") + " (the float mask's finite values)")
        if entry["causal"]:
            did.append("causal")
        if owner is not None:
            theta, q_pre, k_pre, rel, note = self._rope_for(owner, q4, k4)
            if theta is not None:
                entry["rope_theta"] = theta
                arrays["q"] = pick(q_pre).reshape(heads * n, d_k)
                arrays["k"] = pick(k_pre).reshape(kv_heads * m, d_k)
                did.append(f"RoPE theta {theta:g} (Q and K before rotation; the lab's rotation matches the "
                           f"model's to {rel:.1e})")
            elif note is not None:
                notes.append(note)
        # Key/value heads the model repeated before the call (repeat_kv): stored once each.
        shared = _shared_heads(arrays["k"].reshape(kv_heads, m, d_k), arrays["v"].reshape(kv_heads, m, d_v))
        if shared < kv_heads:
            did.append(f"key/value heads {shared}, each repeated {kv_heads // shared} times by the model before the "
                       "call (stored once)")
            arrays["k"] = arrays["k"].reshape(shared, kv_heads // shared, m, d_k)[:, 0].reshape(shared * m, d_k)
            arrays["v"] = arrays["v"].reshape(shared, kv_heads // shared, m, d_v)[:, 0].reshape(shared * m, d_v)
            kv_heads = entry["kv_heads"] = shared
        if notes:
            entry["notes"] = notes
        self.say(f"call {len(self.calls)} '{name}': {heads} heads"
                 + (f" over {kv_heads} key/value heads" if kv_heads != heads else "")
                 + f", n {n}, m {m}, d_k {d_k}; " + (", ".join(did) if did else "no mask")
                 + "".join(f"; note: {t}" for t in notes))
        self.calls.append((entry, arrays))

    # -- nn.MultiheadAttention: its projections redone here, the attention through torch's sdpa
    def _mha_hook(self, name):
        def hook(mod, args, kwargs, result):
            self._mha(name, mod, args, kwargs)
        return hook

    def _mha(self, name, mod, args, kwargs):
        names = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                 "average_attn_weights", "is_causal"]
        a = dict(zip(names, args))
        a.update(kwargs)
        query, key, value = a["query"], a["key"], a["value"]
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        name = name if count == 0 else f"{name}#{count + 1}"
        if mod.bias_k is not None or mod.add_zero_attn:
            self._skip(name, "MultiheadAttention with bias_k/add_zero_attn")
            return
        if mod.batch_first:
            query, key, value = (x.transpose(0, 1) if x.dim() == 3 else x for x in (query, key, value))
        if query.dim() == 2:
            query, key, value = query[:, None], key[:, None], value[:, None]
        L, B, E = query.shape
        S = key.shape[0]
        H = mod.num_heads
        hd = E // H
        if mod._qkv_same_embed_dim:
            wq, wk, wv = mod.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = mod.q_proj_weight, mod.k_proj_weight, mod.v_proj_weight
        bq = bk = bv = None
        if mod.in_proj_bias is not None:
            bq, bk, bv = mod.in_proj_bias.chunk(3)
        q = F.linear(query, wq, bq).reshape(L, B, H, hd).permute(1, 2, 0, 3)
        k = F.linear(key, wk, bk).reshape(S, B, H, hd).permute(1, 2, 0, 3)
        v = F.linear(value, wv, bv).reshape(S, B, H, hd).permute(1, 2, 0, 3)
        mask = None
        am, kpm = a.get("attn_mask"), a.get("key_padding_mask")
        causal = bool(a.get("is_causal") or False)
        if am is not None:
            # nn.MultiheadAttention: a boolean True *blocks*; float masks are added
            mask = torch.where(am, -math.inf, 0.0) if am.dtype == torch.bool else am.float()
            if mask.dim() == 3:
                mask = mask.reshape(B, H, L, S)
            causal = False
        if kpm is not None:
            pad = torch.where(kpm, -math.inf, 0.0) if kpm.dtype == torch.bool else kpm.float()
            pad = pad[:, None, None, :]
            mask = pad if mask is None else mask + pad
        if causal and mask is None:
            mask_for_sdpa, is_causal = None, True
        else:
            mask_for_sdpa, is_causal = mask, False
        out = self.original(q, k, v, attn_mask=mask_for_sdpa, is_causal=is_causal)
        drop = None
        if mod.training and mod.dropout > 0:
            drop = (f"MultiheadAttention dropout={mod.dropout:g} in training mode (the model was training?); the "
                    "output stored and the lab's are without dropout")
        self._record(name, q, k, v, mask_for_sdpa, is_causal, None, out, dropout_note=drop)



# MultiheadAttention's own inner scaled_dot_product_attention call is not recorded a second time.
def _mha_pre(rec: _Recorder):
    def pre(mod, args):
        rec.in_mha += 1
    return pre


def _mha_post(rec: _Recorder):
    def post(mod, args, out):
        rec.in_mha -= 1
    return post


def _replace_atomically(path: str, write) -> None:
    """Calls write(f) on a temporary file beside `path`, then renames it over `path`: a reader never
    sees half a file, and a failure leaves no partial one."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_bundle(out: str, calls, tokens=None, model: str | None = None, skipped=None) -> dict:
    """Writes the arrays of `calls` [(entry, arrays)], then DIR/manifest.json; returns the manifest.

    A bundle is complete when its manifest exists: an old manifest goes first and the new one is
    written last (atomically), so a capture interrupted half-way leaves no manifest to read."""
    os.makedirs(out, exist_ok=True)
    manifest_path = os.path.join(out, "manifest.json")
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    manifest = {"format": FORMAT, "version": VERSION, "model": model,
                "tokens": list(tokens) if tokens is not None else [], "calls": [],
                "skipped": skipped or []}
    for i, (entry, arrays) in enumerate(calls):
        e = dict(entry)
        for key in ("q", "k", "v", "output", "mask", "bias"):
            if key in arrays:
                fname = f"{i:04d}_{key}.npy"
                a = arrays[key]
                a = a.detach().to("cpu", torch.float32).numpy() if torch.is_tensor(a) else np.asarray(a, np.float32)
                _replace_atomically(os.path.join(out, fname),
                                    lambda f, a=a: np.save(f, np.ascontiguousarray(a, dtype=np.float32)))
                e[key] = fname
            else:
                e.setdefault(key, None)
        manifest["calls"].append(e)
    _replace_atomically(manifest_path,
                        lambda f: f.write(json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8")))
    return manifest


def capture(model, *args, out: str, tokens=None, batch: int = 0, model_name: str | None = None,
            rope_tolerance: float = ROPE_TOLERANCE, log=sys.stderr, **kwargs):
    """Runs model(*args, **kwargs) recording its attention calls, writes the bundle to `out`.

    tokens: labels of the sequence (one per position of batch element `batch`), or None.
    rope_tolerance: how closely the lab's RoPE must reproduce the model's rotated Q and K (relative
    to their largest value) for the bundle to hold them un-rotated with rope_theta.
    log: where the line per call goes (None: nowhere).
    Returns what the model returned."""
    rec = _Recorder(model, batch, rope_tolerance, log)
    with rec:
        for mod in model.modules():
            if isinstance(mod, torch.nn.MultiheadAttention):
                rec.handles.append(mod.register_forward_pre_hook(_mha_pre(rec)))
                rec.handles.append(mod.register_forward_hook(_mha_post(rec)))
        with torch.no_grad():
            result = model(*args, **kwargs)
    if not rec.calls and rec.skipped:
        print(f"attnlab_capture: every attention call was skipped ({len(rec.skipped)}; the reasons are above "
              "and under 'skipped' in the manifest)", file=sys.stderr)
    elif not rec.calls:
        print("attnlab_capture: no attention call was recorded (does the model use "
              "scaled_dot_product_attention or nn.MultiheadAttention?)", file=sys.stderr)
    name = model_name or type(model).__name__
    write_bundle(out, rec.calls, tokens, name, rec.skipped)
    return result


def capture_hf(model_id: str, text: str, out: str, device: str = "cpu",
               rope_tolerance: float = ROPE_TOLERANCE) -> dict:
    """Loads a Hugging Face model with attn_implementation="sdpa" and its tokenizer, captures one
    forward pass over `text`; tokens come from the tokenizer."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_id)
    model = AutoModel.from_pretrained(model_id, attn_implementation="sdpa", torch_dtype=torch.float32)
    model.to(device).eval()
    enc = tok(text, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    tokens = [tok.decode([i]) for i in ids]
    enc = {k: v.to(device) for k, v in enc.items()}
    capture(model, out=out, tokens=tokens, model_name=model_id, rope_tolerance=rope_tolerance, **enc)
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Capture a Hugging Face model's attention as an attnlab bundle")
    ap.add_argument("--hf", required=True, metavar="MODEL", help="model id or local directory")
    ap.add_argument("--text", required=True, help="the text to run through the model")
    ap.add_argument("--out", required=True, metavar="DIR", help="the bundle directory to write")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rope-tolerance", type=float, default=ROPE_TOLERANCE, metavar="REL",
                    help="how closely the lab's RoPE must reproduce the model's rotated Q and K for the "
                    "bundle to hold them un-rotated with rope_theta (default %(default)g)")
    a = ap.parse_args(argv)
    try:
        m = capture_hf(a.hf, a.text, a.out, a.device, a.rope_tolerance)
    except Exception as e:  # one line for a person, exit 2
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    rope = sum(1 for c in m["calls"] if c.get("rope_theta"))
    bias = sum(1 for c in m["calls"] if c.get("bias"))
    print(f"{a.out}: {len(m['calls'])} attention calls, {len(m['tokens'])} tokens"
          + (f", {rope} with RoPE applied by the lab" if rope else "")
          + (f", {bias} with a bias" if bias else "")
          + (f", {len(m['skipped'])} skipped" if m["skipped"] else "")
          + f"; try: attnlab run --bundle {a.out} --layer 0 --head 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
