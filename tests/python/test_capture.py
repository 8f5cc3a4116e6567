"""scripts/attnlab_capture.py against torch: small models covering causal, boolean and float masks,
an explicit scale, grouped-query heads, batch > 1 and nn.MultiheadAttention, each captured, replayed
by `attnlab run --bundle` and compared with the output torch returned; a random-weight Hugging
Face GPT-2 captured end to end, through capture() and through the --hf command on a local model.

Run by tests/python/run.sh (ctest label torch) with the venv of scripts/torch-venv; the attnlab
binary comes from $ATTNLAB_BINARY."""
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import attnlab_capture  # noqa: E402

ATTNLAB = os.environ["ATTNLAB_BINARY"]
ATOL = 2e-5


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
