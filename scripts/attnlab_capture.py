#!/usr/bin/env python3
"""Capture the attention of a PyTorch model as an attnlab bundle (core/bundle.h, README).

As a module:

    from attnlab_capture import capture
    result = capture(model, input_ids, out="bundle", tokens=["The", " cat"])

runs ``model(*args, **kwargs)`` once (under torch.no_grad) while recording every call of
``torch.nn.functional.scaled_dot_product_attention`` and every ``nn.MultiheadAttention``
module, then writes DIR/manifest.json and float32 .npy files. It returns what the model returned.

As a command (on a machine that has the model's weights):

    python3 scripts/attnlab_capture.py --hf gpt2 --text "The cat sat on the mat" --out bundle
    attnlab run --bundle bundle --layer 0 --head 3

What is handled: is_causal, attn_mask (boolean: True keeps; additive float: 0 keeps and values at
or below -1e30, such as torch.finfo(dtype).min, block), broadcast masks, an explicit scale,
grouped-query attention (fewer key/value heads, enable_gqa), batch > 1 (element `batch` is kept).
Calls the lab cannot represent (an additive mask with other values, such as ALiBi biases) are
listed under "skipped" in the manifest with the reason, and named on stderr.

The bundle: one entry per call in manifest.json's "calls" (name, heads, kv_heads, n, m, d_k, d_v,
scale or null for 1/sqrt(d_k), causal, mask file or null, q/k/v/output files); arrays are 2-D,
heads stacked along rows: q (heads*n, d_k), k (kv_heads*m, d_k), v (kv_heads*m, d_v), output
(heads*n, d_v) what the call returned, mask (n, m) or (heads*n, m) of 0 / -inf.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

FORMAT = "attnlab-bundle"
VERSION = 1
_BLOCK = -1e30  # additive mask values at or below this block the key


class _Recorder:
    def __init__(self, model: torch.nn.Module, batch: int):
        self.model = model
        self.batch = batch
        self.calls: list[dict[str, Any]] = []
        self.skipped: list[dict[str, str]] = []
        self.stack: list[str] = []
        self.names: dict[str, int] = {}
        self.handles: list[Any] = []
        self.in_mha = 0
        self.original = F.scaled_dot_product_attention

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
        F.scaled_dot_product_attention = self._sdpa
        return self

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self.original
        for h in self.handles:
            h.remove()
        return False

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
                         dropout_p)
        return out

    def _record(self, name, q, k, v, mask, causal, scale, out, dropout_p=0.0):
        if dropout_p:
            print(f"attnlab_capture: {name}: dropout_p={dropout_p} (the model is training?); the "
                  "lab computes without dropout", file=sys.stderr)

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
            self.skipped.append({"name": name, "reason": f"{heads} query heads over {kv_heads} key/value heads"})
            return
        entry = {"name": name, "heads": heads, "kv_heads": kv_heads, "n": n, "m": m, "d_k": d_k,
                 "d_v": d_v, "scale": None if scale is None else float(scale),
                 "causal": bool(causal), "mask": None}
        arrays = {"q": qh.reshape(heads * n, d_k), "k": kh.reshape(kv_heads * m, d_k),
                  "v": vh.reshape(kv_heads * m, d_v), "output": oh.reshape(heads * n, d_v)}
        if mask is not None:
            mk = mask
            while mk.dim() < 4:
                mk = mk[None]
            mk = torch.broadcast_to(mk, (q4.shape[0], heads, n, m))[b]
            if mk.dtype == torch.bool:
                add = torch.where(mk, 0.0, -math.inf)
            else:
                mk = mk.float()
                blocked = mk <= _BLOCK
                if bool(((mk != 0) & ~blocked).any()):
                    self.skipped.append({"name": name, "reason": "additive mask with values other than 0 and "
                                         "blocking ones (a bias such as ALiBi); the lab takes 0 / -inf masks"})
                    print(f"attnlab_capture: skipped {name}: {self.skipped[-1]['reason']}", file=sys.stderr)
                    return
                add = torch.where(blocked, -math.inf, 0.0)
            if causal:  # torch refuses both; kept for completeness
                add = add + torch.triu(torch.full((n, m), -math.inf), 1)
                entry["causal"] = False
            same = bool((add == add[:1]).all())
            arrays["mask"] = add[0] if same else add.reshape(heads * n, m)
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
            self.skipped.append({"name": name, "reason": "MultiheadAttention with bias_k/add_zero_attn"})
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
        self._record(name, q, k, v, mask_for_sdpa, is_causal, None, out)



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
        for key in ("q", "k", "v", "output", "mask"):
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


def capture(model, *args, out: str, tokens=None, batch: int = 0, model_name: str | None = None, **kwargs):
    """Runs model(*args, **kwargs) recording its attention calls, writes the bundle to `out`.

    tokens: labels of the sequence (one per position of batch element `batch`), or None.
    Returns what the model returned."""
    rec = _Recorder(model, batch)
    with rec:
        for mod in model.modules():
            if isinstance(mod, torch.nn.MultiheadAttention):
                rec.handles.append(mod.register_forward_pre_hook(_mha_pre(rec)))
                rec.handles.append(mod.register_forward_hook(_mha_post(rec)))
        with torch.no_grad():
            result = model(*args, **kwargs)
    if not rec.calls:
        print("attnlab_capture: no attention call was recorded (does the model use "
              "scaled_dot_product_attention or nn.MultiheadAttention?)", file=sys.stderr)
    name = model_name or type(model).__name__
    write_bundle(out, rec.calls, tokens, name, rec.skipped)
    return result


def capture_hf(model_id: str, text: str, out: str, device: str = "cpu") -> dict:
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
    capture(model, out=out, tokens=tokens, model_name=model_id, **enc)
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Capture a Hugging Face model's attention as an attnlab bundle")
    ap.add_argument("--hf", required=True, metavar="MODEL", help="model id or local directory")
    ap.add_argument("--text", required=True, help="the text to run through the model")
    ap.add_argument("--out", required=True, metavar="DIR", help="the bundle directory to write")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    try:
        m = capture_hf(a.hf, a.text, a.out, a.device)
    except Exception as e:  # one line for a person, exit 2
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {len(m['calls'])} attention calls, {len(m['tokens'])} tokens"
          + (f", {len(m['skipped'])} skipped" if m["skipped"] else "")
          + f"; try: attnlab run --bundle {a.out} --layer 0 --head 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
