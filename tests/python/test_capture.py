"""scripts/attnlab_capture.py against torch: small models covering causal, boolean and float masks,
an explicit scale, grouped-query heads, batch > 1 and nn.MultiheadAttention, each captured, replayed
by `attnlab run --bundle` and compared with the output torch returned; a random-weight Hugging
Face GPT-2 captured end to end, through capture() and through the --hf command on a local model.
Modifications: an ALiBi-like float mask kept as the bundle's mask plus bias (a plain call and a
random-weight Falcon with alibi), RoPE captured before rotation with the config's rope_theta (a
random-weight LLaMA, grouped heads) and replayed with the lab's own rotation, and the RoPE the
capture cannot hand to the lab (rope_scaling, partial rotary, a rotation out of its sight) kept
rotated with a note saying why. Every replay must equal torch's output within 1e-4 relative.

Run by tests/python/run.sh (ctest label torch) with the venv of scripts/torch-venv; the attnlab
binary comes from $ATTNLAB_BINARY."""
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as imported_sdpa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import attnlab_capture  # noqa: E402

ATTNLAB = os.environ["ATTNLAB_BINARY"]
ATOL = 2e-5
REL = 1e-4  # the modifications' replays: max |lab - torch| / max |torch|


def manifest(d):
    with open(os.path.join(d, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def lab_output(bundle, layer, head=None, extra=()):
    args = [ATTNLAB, "run", "--bundle", bundle, "--layer", str(layer), "--format", "json",
            "--backend", "cpu", *extra]
    if head is not None:
        args += ["--head", str(head)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return np.array(json.loads(r.stdout)["stages"]["output"], dtype=np.float64), json.loads(r.stdout)


class Sdpa(torch.nn.Module):
    """One attention call on fixed inputs, with the keyword arguments of the test."""

    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.kw)


class ImportedSdpa(torch.nn.Module):
    """Calls the function through a name imported before the capture began, as model code does."""

    def forward(self, q, k, v):
        return imported_sdpa(q, k, v, is_causal=True)


def stacked(t):  # (H, L, E) -> (H*L, E)
    return t.reshape(-1, t.shape[-1]).numpy().astype(np.float64)


class BundleWrites(unittest.TestCase):
    def test_an_interrupted_capture_leaves_no_manifest(self):
        """A bundle is complete when its manifest exists: the old manifest goes first, the arrays
        are written, the manifest last; a failure half-way leaves no manifest and no partial file."""
        with tempfile.TemporaryDirectory() as d:
            entry = {"name": "c", "heads": 1, "kv_heads": 1, "n": 2, "m": 2, "d_k": 2, "d_v": 2,
                     "causal": False, "scale": None}
            arrays = {"q": np.ones((2, 2)), "k": np.ones((2, 2)), "v": np.ones((2, 2))}
            attnlab_capture.write_bundle(d, [(entry, arrays)])
            self.assertTrue(os.path.exists(os.path.join(d, "manifest.json")))
            saved = attnlab_capture.np.save
            count = {"n": 0}

            def failing_save(f, a):
                count["n"] += 1
                if count["n"] == 2:
                    f.write(b"\x93NUMPY partial")
                    raise OSError("disk full (injected)")
                saved(f, a)

            attnlab_capture.np.save = failing_save
            try:
                with self.assertRaises(OSError):
                    attnlab_capture.write_bundle(d, [(entry, arrays)])
            finally:
                attnlab_capture.np.save = saved
            names = sorted(os.listdir(d))
            self.assertNotIn("manifest.json", names)
            self.assertFalse([n for n in names if ".tmp" in n], names)
            # The arrays written before the failure are whole files.
            np.testing.assert_array_equal(np.load(os.path.join(d, "0000_q.npy")), arrays["q"])


class SmallModels(unittest.TestCase):
    def check(self, model, q, k, v, batch=0, expect=None):
        with tempfile.TemporaryDirectory() as d:
            out = attnlab_capture.capture(model, q, k, v, out=d, batch=batch)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 1, man)
            call = man["calls"][0]
            if expect:
                for key, value in expect.items():
                    self.assertEqual(call[key], value, key)
            want = stacked(out[batch] if out.dim() == 4 else out)
            got, js = lab_output(d, 0)
            np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
            # One head alone is the same rows.
            h = call["heads"] - 1
            n = call["n"]
            got_h, _ = lab_output(d, 0, head=h)
            np.testing.assert_allclose(got_h, want[h * n:(h + 1) * n], atol=ATOL, rtol=0)
            return man, js

    def test_causal(self):
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(1, 3, 9, 16, generator=g) for _ in range(3))
        self.check(Sdpa(is_causal=True), q, k, v, expect={"causal": True, "mask": None, "heads": 3})

    def test_float_mask_broadcast(self):
        g = torch.Generator().manual_seed(2)
        q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
        mask = torch.zeros(6, 6)
        mask[:, 4:] = torch.finfo(torch.float32).min  # padding, as Hugging Face writes it
        mask[2, 1] = -math.inf
        man, _ = self.check(Sdpa(attn_mask=mask[None, None]), q, k, v)
        self.assertIsNotNone(man["calls"][0]["mask"])

    def test_bool_mask_per_head(self):
        g = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))
        mask = torch.ones(2, 5, 5, dtype=torch.bool)
        mask[1, :, 0] = False
        with tempfile.TemporaryDirectory() as d:
            out = attnlab_capture.capture(Sdpa(attn_mask=mask[None]), q, k, v, out=d)
            for h in range(2):
                got, _ = lab_output(d, 0, head=h)
                np.testing.assert_allclose(got, out[0, h].numpy(), atol=ATOL, rtol=0)
            r = subprocess.run([ATTNLAB, "run", "--bundle", d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertTrue(r.stderr.startswith("error: ") and "--head" in r.stderr, r.stderr)

    def test_explicit_scale(self):
        g = torch.Generator().manual_seed(4)
        q, k, v = (torch.randn(1, 2, 7, 32, generator=g) for _ in range(3))
        _, js = self.check(Sdpa(scale=0.37), q, k, v, expect={"scale": 0.37})
        self.assertAlmostEqual(js["scale"], 0.37)
        self.assertTrue(js["scale_explicit"])

    def test_grouped_query_heads(self):
        g = torch.Generator().manual_seed(5)
        q = torch.randn(1, 6, 8, 16, generator=g)
        k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(2))
        self.check(Sdpa(enable_gqa=True, is_causal=True), q, k, v, expect={"heads": 6, "kv_heads": 2})

    def test_batch_greater_than_one(self):
        g = torch.Generator().manual_seed(6)
        q, k, v = (torch.randn(3, 2, 5, 8, generator=g) for _ in range(3))
        mask = torch.zeros(3, 1, 5, 5)
        mask[1, :, :, 3:] = -math.inf
        man, _ = self.check(Sdpa(attn_mask=mask), q, k, v, batch=1)
        self.assertIsNotNone(man["calls"][0]["mask"])

    def test_cross_attention_fewer_queries(self):
        g = torch.Generator().manual_seed(7)
        q = torch.randn(1, 2, 3, 8, generator=g)
        k, v = (torch.randn(1, 2, 7, 8, generator=g) for _ in range(2))
        self.check(Sdpa(is_causal=True), q, k, v, expect={"n": 3, "m": 7, "causal": True})

    def test_a_name_imported_from_torch_is_seen(self):
        """The capture sees the function however the model reached it (it had seen only calls through
        F and said the model used no attention)."""
        g = torch.Generator().manual_seed(9)
        q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
        self.check(ImportedSdpa(), q, k, v, expect={"causal": True, "heads": 2})

    def test_training_dropout_and_other_dtypes_are_noted(self):
        """What the replay cannot repeat is said: MultiheadAttention's dropout in training mode, as
        sdpa's dropout_p is, and a model that ran in bfloat16 (its rounded values are what the bundle
        holds)."""
        torch.manual_seed(10)
        mha = torch.nn.MultiheadAttention(16, 4, dropout=0.5, batch_first=True).train()
        x = torch.randn(1, 5, 16)
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(mha, x, x, x, out=d, log=None)
            notes = manifest(d)["calls"][0]["notes"]
            self.assertEqual(len(notes), 1, notes)
            self.assertIn("MultiheadAttention dropout=0.5 in training mode", notes[0])
            got, _ = lab_output(d, 0)  # the stored output is the capture's own, without dropout
            np.testing.assert_allclose(got, np.load(os.path.join(d, manifest(d)["calls"][0]["output"])),
                                       atol=ATOL, rtol=0)
        g = torch.Generator().manual_seed(11)
        q, k, v = (torch.randn(1, 2, 6, 8, generator=g).to(torch.bfloat16) for _ in range(3))
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(Sdpa(), q, k, v, out=d, log=None)
            notes = manifest(d)["calls"][0]["notes"]
            self.assertEqual(len(notes), 1, notes)
            self.assertIn("the model ran in bfloat16", notes[0])

    def test_multihead_attention_module(self):
        torch.manual_seed(8)
        mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
        x = torch.randn(2, 6, 16)
        causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
        with tempfile.TemporaryDirectory() as d:
            out, _ = attnlab_capture.capture(mha, x, x, x, out=d, batch=1, attn_mask=causal)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 1, man)
            self.assertEqual(man["calls"][0]["heads"], 4)
            got, _ = lab_output(d, 0)  # (4*6, 4): per head, before the output projection
            per_pos = got.reshape(4, 6, 4).transpose(1, 0, 2).reshape(6, 16)
            proj = per_pos @ mha.out_proj.weight.detach().numpy().T.astype(np.float64) + mha.out_proj.bias.detach().numpy()
            np.testing.assert_allclose(proj, out[1].numpy(), atol=1e-4, rtol=0)


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def alibi_bias(heads, n, m):
    """ALiBi as a float mask adds it: -slope_h * |i + m - n - j|, standard slopes, (heads, n, m)."""
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
    dist = (torch.arange(n)[:, None] + m - n - torch.arange(m)[None, :]).abs().float()
    return -slopes[:, None, None] * dist


class ScoreModifications(unittest.TestCase):
    """Additive float masks with values other than 0 and blocking ones: the bundle's mask and bias."""

    def test_alibi_float_mask_becomes_mask_and_bias(self):
        g = torch.Generator().manual_seed(11)
        heads, n = 4, 9
        q, k, v = (torch.randn(1, heads, n, 16, generator=g) for _ in range(3))
        lowest = torch.finfo(torch.float32).min
        mask = alibi_bias(heads, n, n).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), lowest)
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            out = attnlab_capture.capture(Sdpa(attn_mask=mask[None], scale=0.3), q, k, v, out=d, log=log)
            call = manifest(d)["calls"][0]
            self.assertIsNotNone(call["mask"])
            self.assertIsNotNone(call["bias"])
            self.assertIsNone(call["rope_theta"])
            self.assertNotIn("notes", call)
            self.assertIn("mask shared, bias per head", log.getvalue())
            # The blocking entries are the mask; the finite rest the bias, 0 where the mask blocks.
            blocked = np.triu(np.ones((n, n), bool), 1)
            np.testing.assert_array_equal(np.isinf(np.load(os.path.join(d, call["mask"]))), blocked)
            bias = np.load(os.path.join(d, call["bias"])).reshape(heads, n, n)
            np.testing.assert_array_equal(bias, np.where(blocked, 0.0, alibi_bias(heads, n, n).numpy()))
            want = stacked(out[0])
            got, js = lab_output(d, 0)
            self.assertLessEqual(rel_err(got, want), REL)
            got_h, _ = lab_output(d, 0, head=2)  # one head: its rows of the bias
            self.assertLessEqual(rel_err(got_h, want[2 * n:3 * n]), REL)

    def test_bias_shared_by_every_head(self):
        g = torch.Generator().manual_seed(12)
        q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
        bias = torch.randn(6, 6, generator=g)
        bias[:, 5] = -math.inf  # one key blocked for every query
        with tempfile.TemporaryDirectory() as d:
            out = attnlab_capture.capture(Sdpa(attn_mask=bias), q, k, v, out=d, log=None)
            call = manifest(d)["calls"][0]
            self.assertEqual(np.load(os.path.join(d, call["bias"])).shape, (6, 6))
            self.assertEqual(np.load(os.path.join(d, call["mask"])).shape, (6, 6))
            got, _ = lab_output(d, 0)
            self.assertLessEqual(rel_err(got, stacked(out[0])), REL)

    def test_falcon_with_alibi(self):
        """A random-weight Falcon with alibi=True adds ALiBi to its float mask (finfo.min where it
        blocks): every call is kept, with a per-head bias, and replays torch's output."""
        from transformers import FalconConfig, FalconModel
        cfg = FalconConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=40,
                           alibi=True, new_decoder_architecture=False, multi_query=False,
                           bos_token_id=0, eos_token_id=0)
        torch.manual_seed(0)
        model = FalconModel._from_config(cfg, attn_implementation="sdpa").eval()
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(model, input_ids=torch.tensor([[3, 17, 5, 9, 22, 1, 30]]), out=d, log=None)
            man = manifest(d)
            self.assertEqual((len(man["calls"]), man["skipped"]), (2, []), man)
            for layer, call in enumerate(man["calls"]):
                self.assertIsNotNone(call["bias"], call)
                self.assertEqual(np.load(os.path.join(d, call["bias"])).shape, (4 * 7, 7))
                self.assertIsNone(call["rope_theta"])  # alibi Falcon does not rotate
                self.assertNotIn("notes", call)
                got, _ = lab_output(d, layer)
                self.assertLessEqual(rel_err(got, np.load(os.path.join(d, call["output"]))), REL)


def tiny_llama(**kw):
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      vocab_size=40, max_position_embeddings=128, bos_token_id=0, eos_token_id=0,
                      pad_token_id=0, **kw)
    torch.manual_seed(0)
    return LlamaModel._from_config(cfg, attn_implementation="sdpa").eval()


class RotaryEmbeddings(unittest.TestCase):
    IDS = torch.tensor([[3, 17, 5, 9, 22, 1, 30, 2, 11]])

    def test_llama_rope_captured_before_rotation(self):
        """rope_theta from the config; Q and K before rotation; the lab's own RoPE replays torch."""
        model = tiny_llama(num_key_value_heads=2, rope_theta=500.0)
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            attnlab_capture.capture(model, input_ids=self.IDS, out=d, log=log)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 2, man)
            self.assertEqual(len(log.getvalue().splitlines()), 2, log.getvalue())
            self.assertIn("RoPE theta 500 (Q and K before rotation", log.getvalue())
            for layer, call in enumerate(man["calls"]):
                self.assertEqual(call["rope_theta"], 500.0)
                self.assertEqual((call["heads"], call["kv_heads"], call["d_k"]), (4, 2, 16))
                self.assertNotIn("notes", call)
                # The stored Q is the un-rotated one: rotating it is what reached torch's call.
                q = np.load(os.path.join(d, call["q"])).reshape(4, 9, 16)
                self.assertGreater(np.abs(attnlab_capture.rope_rotate(q[1], 0, 500.0) - q[1]).max(), 1e-3)
                want = np.load(os.path.join(d, call["output"]))
                got, _ = lab_output(d, layer)
                self.assertLessEqual(rel_err(got, want), REL)
                got_h, _ = lab_output(d, layer, head=3)
                self.assertLessEqual(rel_err(got_h, want[27:36]), REL)

    def test_repeated_key_value_heads_are_stored_once(self):
        """Hugging Face repeats the key/value heads before the call whenever it passes a mask
        (repeat_kv): the bundle stores each once, so a grouped-query model keeps its groups (it had
        written 4 key/value heads for 4 query heads over 2)."""
        model = tiny_llama(num_key_value_heads=2, rope_theta=500.0)
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            ids = torch.cat([self.IDS, self.IDS.flip(1)])
            mask = torch.ones_like(ids)
            mask[1, 6:] = 0  # the second element padded: the model passes a mask
            attnlab_capture.capture(model, input_ids=ids, attention_mask=mask, out=d, log=log, batch=0)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 2, man)
            for layer, call in enumerate(man["calls"]):
                self.assertEqual((call["heads"], call["kv_heads"], call["rope_theta"]), (4, 2, 500.0), log.getvalue())
                self.assertEqual(np.load(os.path.join(d, call["k"])).shape, (2 * 9, 16))
                got, _ = lab_output(d, layer)
                self.assertLessEqual(rel_err(got, np.load(os.path.join(d, call["output"]))), REL)
            self.assertIn("key/value heads 2, each repeated 2 times by the model", log.getvalue())

    def check_kept_rotated(self, model, why):
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            attnlab_capture.capture(model, input_ids=self.IDS, out=d, log=log)
            man = manifest(d)
            self.assertTrue(man["calls"])
            for layer, call in enumerate(man["calls"]):
                self.assertIsNone(call["rope_theta"])
                self.assertEqual(len(call["notes"]), 1, call)
                self.assertTrue(call["notes"][0].startswith(attnlab_capture.ROTATED_NOTE), call["notes"])
                self.assertIn(why, call["notes"][0])
                got, _ = lab_output(d, layer)
                self.assertLessEqual(rel_err(got, np.load(os.path.join(d, call["output"]))), REL)
            self.assertIn("note: " + attnlab_capture.ROTATED_NOTE, log.getvalue())

    def test_rope_scaling_keeps_the_rotated_qk(self):
        self.check_kept_rotated(tiny_llama(rope_scaling={"rope_type": "linear", "factor": 2.0}),
                                "rope_scaling 'linear'")

    def test_partial_rotary_keeps_the_rotated_qk(self):
        from transformers import GPTNeoXConfig, GPTNeoXModel
        cfg = GPTNeoXConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                            vocab_size=40, rotary_pct=0.25, bos_token_id=0, eos_token_id=0)
        torch.manual_seed(0)
        model = GPTNeoXModel._from_config(cfg, attn_implementation="sdpa").eval()
        self.check_kept_rotated(model, "partial rotary: the model rotates the first 4 of the 16 values")

    def test_rotation_out_of_sight_is_noted(self):
        """A model that rotates inline (no module-level apply_rotary_pos_emb) but shows a rotary
        module: the bundle keeps what reached the call and says so."""

        class MyRotaryEmbedding(torch.nn.Module):
            def forward(self, x):  # (B, H, L, E): rotate-half at positions 0..L-1, base 10000
                half = x.shape[-1] // 2
                ang = torch.arange(x.shape[2])[:, None] * 10000.0 ** (-torch.arange(half) / half)[None, :]
                a, b = x[..., :half], x[..., half:]
                return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1)

        class Attn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rotary = MyRotaryEmbedding()

            def forward(self, q, k, v):
                return F.scaled_dot_product_attention(self.rotary(q), self.rotary(k), v, is_causal=True)

        g = torch.Generator().manual_seed(13)
        q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
        with tempfile.TemporaryDirectory() as d:
            out = attnlab_capture.capture(Attn(), q, k, v, out=d, log=None)
            call = manifest(d)["calls"][0]
            self.assertIsNone(call["rope_theta"])
            self.assertEqual(call["notes"], [attnlab_capture.ROTATED_NOTE + " (the model seems to use RoPE: it has "
                                             "a MyRotaryEmbedding module; its rotation is not a module-level "
                                             "apply_rotary_pos_emb the capture can see)"])
            got, _ = lab_output(d, 0)
            self.assertLessEqual(rel_err(got, stacked(out[0])), REL)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=40,
                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return GPT2Model._from_config(cfg, attn_implementation="sdpa").eval()


class HuggingFace(unittest.TestCase):
    def test_random_gpt2_end_to_end(self):
        model = tiny_gpt2()
        ids = torch.tensor([[3, 17, 5, 9, 22, 1, 30]])
        tokens = [f"t{i}" for i in ids[0].tolist()]
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(model, input_ids=ids, out=d, tokens=tokens)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 2, man)
            self.assertEqual(man["tokens"], tokens)
            for layer, call in enumerate(man["calls"]):
                self.assertEqual((call["heads"], call["n"], call["d_k"]), (4, 7, 8))
                self.assertTrue(call["causal"] or call["mask"], call)
                want = np.load(os.path.join(d, call["output"]))
                got, js = lab_output(d, layer)
                np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
                self.assertEqual(js["tokens"], tokens)
            # The call's output is what the layer computed: layer 0's attention output through
            # c_proj equals the module's own.
            text = subprocess.run([ATTNLAB, "run", "--bundle", d, "--layer", man["calls"][1]["name"],
                                   "--head", "2", "--lang", "en"], capture_output=True, text=True)
            self.assertEqual(text.returncode, 0, text.stderr)
            self.assertIn("head 2 of 4", text.stdout)

    def test_padded_batch_keeps_one_element(self):
        model = tiny_gpt2()
        ids = torch.tensor([[3, 17, 5, 9, 22], [4, 8, 0, 0, 0]])
        att = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(model, input_ids=ids, attention_mask=att, out=d, batch=0)
            man = manifest(d)
            self.assertEqual(len(man["calls"]), 2)
            for layer, call in enumerate(man["calls"]):
                got, _ = lab_output(d, layer)
                np.testing.assert_allclose(got, np.load(os.path.join(d, call["output"])), atol=ATOL, rtol=0)
        # Left padding under the causal mask: the padded element's first rows see no key. Its calls
        # are listed as skipped with the reason, not written as bundles the lab refuses to replay.
        left = torch.tensor([[3, 17, 5, 9, 22], [0, 0, 4, 8, 6]])
        att = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(model, input_ids=left, attention_mask=att, out=d, batch=0)
            self.assertEqual((len(manifest(d)["calls"]), manifest(d)["skipped"]), (2, []))
        with tempfile.TemporaryDirectory() as d:
            attnlab_capture.capture(model, input_ids=left, attention_mask=att, out=d, batch=1, log=None)
            man = manifest(d)
            self.assertEqual(man["calls"], [])
            self.assertEqual(len(man["skipped"]), 2, man["skipped"])
            for s in man["skipped"]:
                self.assertIn("query row(s) of batch element 1 see no key (rows 0, 1: padding?)", s["reason"])

    def test_hf_command_on_a_local_model(self):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
        words = ["[UNK]", "the", "cat", "sat", "on", "mat"] + [f"w{i}" for i in range(30)]
        tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
        tk.pre_tokenizer = pre_tokenizers.Whitespace()
        with tempfile.TemporaryDirectory() as d:
            local = os.path.join(d, "model")
            tiny_gpt2().save_pretrained(local)
            PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(local)
            out = os.path.join(d, "bundle")
            r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "attnlab_capture.py"),
                                "--hf", local, "--text", "the cat sat on the mat", "--out", out],
                               capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            self.assertEqual(r.returncode, 0, r.stderr)
            man = manifest(out)
            self.assertEqual(man["tokens"], ["the", "cat", "sat", "on", "the", "mat"])
            got, js = lab_output(out, 1, head=0)
            self.assertEqual(js["tokens"], man["tokens"])
            want = np.load(os.path.join(out, man["calls"][1]["output"]))[:6]
            np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
            bad = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "attnlab_capture.py"),
                                  "--hf", os.path.join(d, "nothing"), "--text", "x", "--out", out],
                                 capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            self.assertEqual(bad.returncode, 2)
            self.assertTrue(bad.stderr.strip().splitlines()[-1].startswith("error: "), bad.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
