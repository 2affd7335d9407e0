"""Referee: the LoRA types beyond plain LoRA (DoRA, LoHa, LoKr) against peft and lycoris-lora on a tiny FLUX.2.

Gradients: peft puts a random adapter of each type (LoraConfig(use_dora=True), LoHaConfig, LoKrConfig, every factor
non-zero) on diffusers' Flux2Transformer2DModel; the adapter is written as Baton reads it (DoRA in diffusers/PEFT
naming with lora_alpha in its metadata, LoHa and LoKr in LyCORIS naming with ".alpha") and a job starts from it
(`init_lora`); `baton step-grads` runs one step's forward and backward; peft, fed the step's own inputs and target,
must give the same loss and every adapter gradient (DoRA's magnitude included).
Files: `baton train-local` trains each type for a few steps; the file it writes loads where users load that type
(DoRA: diffusers' load_lora_adapter, i.e. peft; LoHa and LoKr: lycoris-lora's create_lycoris_from_weights on the
diffusers transformer) and gives `baton forward --lora`'s output.
Original (ComfyUI) naming, `save_bfl: true` (original_naming.py): the BFL file of DoRA and LoHa, applied by
lycoris-lora to Linears named and weighted as BFL's (q, k, v fused by to_bfl_state_dict), acts as the diffusers file
applied by peft or lycoris-lora; a LoKr off the fused Linears loads with diffusers' own FLUX.2 LoKr loader (ai-toolkit's
format) and gives `baton forward --lora` on the BFL file; across q, k and v it is refused before training.

Wan: the tiny Wan with a random peft adapter of each type, `baton forward --lora` against peft's forward; the file
`baton lora-convert --to original` writes names each module as diffusers' Wan converter maps back to the adapted
Linear, and lycoris-lora applying it to Linears of those names acts as peft's adapters.
Tolerance: 1e-5 of the largest value (fp32 on both sides; the difference is summation order).
"""

import copy
import json
import os
import re
import unittest

import torch
from diffusers import Flux2Pipeline, WanTransformer3DModel
from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_wan_lora_to_diffusers
from lycoris import create_lycoris_from_weights
from peft import LoHaConfig, LoKrConfig, LoraConfig, get_peft_model_state_dict
from safetensors.torch import load_file, save_file

from flux2_tiny import baton_forward, diffusers_forward, make_inputs, make_model, to_bfl_state_dict, write_config
from original_naming import effective_weights, lycoris_on_original_tree, original_modules
from referee import baton, max_rel_error, temp_dir

WAN_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "models", "wan-tiny.json")
TOLERANCE = 1e-5
MIN_EFFECT = 1e-2  # a trained adapter must move the output by at least this (relative)
CONFIG = dict(
    patch_size=1, in_channels=8, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
    joint_attention_dim=24, timestep_guidance_channels=256, axes_dims_rope=[4, 4, 4, 4], guidance_embeds=True,
)
# Baton's all-linear: every Linear inside the blocks.
BLOCK_LINEARS = (r"(transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)"
                 r"|ff\.linear_in|ff\.linear_out|ff_context\.linear_in|ff_context\.linear_out)"
                 r"|single_transformer_blocks\.\d+\.attn\.(to_qkv_mlp_proj|to_out))")
# Every block Linear BFL keeps apart (BFL fuses q, k and v).
LOKR_UNFUSED = ("to_out.0,to_add_out,ff.linear_in,ff.linear_out,ff_context.linear_in,ff_context.linear_out,"
                "attn.to_qkv_mlp_proj,attn.to_out")
# rank, alpha (scale ≠ 1 everywhere) and the peft config of each type. LoKr at rank 2 keeps w2 decomposed on every
# layer of this model (peft decomposes when r < max(out_k, in_n) / 2), so LyCORIS applies the file's alpha too.
TYPES = {
    "dora": (4, 8, lambda: LoraConfig(r=4, lora_alpha=8, target_modules=BLOCK_LINEARS, use_dora=True,
                                      init_lora_weights=False)),
    "loha": (4, 8, lambda: LoHaConfig(r=4, alpha=8, target_modules=BLOCK_LINEARS, init_weights=False)),
    "lokr": (2, 6, lambda: LoKrConfig(r=2, alpha=6, target_modules=BLOCK_LINEARS, init_weights=False)),
}


def peft_name(name):
    """peft's parameter name → the saved (and Baton's) name."""
    return name.replace(".default", "").replace("lora_magnitude_vector.weight", "lora_magnitude_vector")


def write_init_file(kind, model, path, alpha):
    """The peft adapter on `model` as Baton reads it: diffusers/PEFT naming (DoRA) or LyCORIS naming (LoHa, LoKr)."""
    sd = {k: v.detach().clone().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    if kind == "dora":
        meta = {"format": "pt", "lora_adapter_metadata": json.dumps({"transformer.r": 4, "transformer.lora_alpha": alpha})}
        save_file({"transformer." + k: v for k, v in sd.items()}, path, metadata=meta)
        return
    out = {}
    for k, v in sd.items():
        module, param = k.rsplit(".", 1)
        lyco = "lycoris_" + module.replace(".", "_")
        out[f"{lyco}.{param}"] = v
        out[f"{lyco}.alpha"] = torch.tensor(float(alpha))
    save_file(out, path, metadata={"format": "pt"})


def tiny_model_and_cache(cls, seed):
    """A random tiny FLUX.2 (returned) saved under a new temporary folder (cls.tmp, cls.folder) with a synthetic
    cache for it (cls.cache)."""
    cls.tmp_handle = temp_dir()
    cls.tmp = cls.tmp_handle.name
    model = make_model(seed, **CONFIG)
    cls.folder = os.path.join(cls.tmp, "transformer")
    model.save_pretrained(cls.folder)
    config = os.path.join(cls.tmp, "config.json")
    write_config(model, config)
    cls.cache = os.path.join(cls.tmp, "cache")
    baton("synthetic-cache", "--config", config, "--out", cls.cache, "--samples", 4, "--grids", "2x3", "--text-len", 5)
    return model


class VariantGradientsTest(unittest.TestCase):
    """One step's loss and adapter gradients, Baton against peft, for each type."""

    @classmethod
    def setUpClass(cls):
        cls.base = tiny_model_and_cache(cls, 53)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def check_type(self, kind):
        rank, alpha, make_config = TYPES[kind]
        torch.manual_seed(17)
        model = copy.deepcopy(self.base)
        model.add_adapter(make_config())
        init = os.path.join(self.tmp, f"init_{kind}.safetensors")
        write_init_file(kind, model, init, alpha)
        job = os.path.join(self.tmp, f"job_{kind}.yaml")
        with open(job, "w") as f:
            f.write(f"model: {self.folder}\ndataset: {self.cache}\n"
                    f"lora: {{type: {kind}, rank: {rank}, alpha: {alpha}, targets: all-linear}}\n"
                    f"init_lora: {init}\nsteps: 1\nbatch_size: 2\nmicro_batches: 1\nseed: 5\n")
        out = os.path.join(self.tmp, f"grads_{kind}.safetensors")
        baton("step-grads", "--job", job, "--output", out)
        got = load_file(out)

        inputs = {k.removeprefix("mb0/in/"): v for k, v in got.items() if k.startswith("mb0/in/")}
        pred = model(**inputs, return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(pred.float(), got["mb0/target"].float())
        loss.backward()
        grads = {peft_name(n): p.grad for n, p in model.named_parameters() if p.requires_grad}
        self.assertEqual(len(grads), len([k for k in got if k.startswith("grad/")]), kind)
        loss_err = abs(got["mb0/loss"].item() - loss.item()) / abs(loss.item())
        worst, worst_name = 0.0, ""
        for name, expected in grads.items():
            key = "grad/" + name
            self.assertIn(key, got, kind)
            self.assertGreater(expected.abs().max().item(), 0.0, f"{kind}: {name} has no gradient to compare")
            err = max_rel_error(got[key], expected)
            if err > worst:
                worst, worst_name = err, name
        print(f"{kind}: loss rel err {loss_err:.2e}; {len(grads)} gradients, worst rel err {worst:.2e} ({worst_name})")
        self.assertLess(loss_err, TOLERANCE, kind)
        self.assertLess(worst, TOLERANCE, f"{kind}: {worst_name}")

    def test_dora(self):
        self.check_type("dora")

    def test_loha(self):
        self.check_type("loha")

    def test_lokr(self):
        self.check_type("lokr")


class VariantFilesTest(unittest.TestCase):
    """A file `baton train-local` writes for each type, loaded by the library users load that type with."""

    @classmethod
    def setUpClass(cls):
        cls.model = tiny_model_and_cache(cls, 59)
        cls.inputs = make_inputs(cls.model, 7, 2, 3, 4, 6)
        cls.plain = diffusers_forward(cls.model, cls.inputs)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_handle.cleanup()

    def train(self, kind, extra="", targets="all-linear", check=True, save_bfl=True):
        """Trains `kind`; returns the run's lora.safetensors (with save_bfl, bfl/lora_bfl.safetensors beside it)."""
        rank, alpha, _ = TYPES[kind]
        job = os.path.join(self.tmp, f"job_{kind}.yaml")
        with open(job, "w") as f:
            f.write(f"model: {self.folder}\ndataset: {self.cache}\n"
                    f"lora: {{type: {kind}, rank: {rank}, alpha: {alpha}, targets: '{targets}'{extra}}}\n"
                    f"steps: 3\nbatch_size: 2\nseed: 3\noptimizer: {{lr: 0.05}}\nsave_bfl: {str(save_bfl).lower()}\n")
        out = os.path.join(self.tmp, f"out_{kind}")
        proc = baton("train-local", "--job", job, "--output", out, check=check)
        return os.path.join(out, "lora.safetensors") if check else proc

    def check_original_naming(self, kind, path, transformer):
        """The run's original-naming file (bfl/lora_bfl.safetensors), applied by lycoris-lora to Linears with BFL's
        names and weights (to_bfl_state_dict: q, k and v fused, written apart from Baton), acts as `transformer` (the
        run's own file applied by the library users load it with) after the same fusion."""
        names = [n for n, _ in self.model.named_modules() if re.fullmatch(BLOCK_LINEARS, n)]
        acting = dict(self.model.state_dict())
        for name, w in effective_weights(transformer, names).items():
            acting[name + ".weight"] = w
        expected = to_bfl_state_dict(acting)
        base = {k.removesuffix(".weight"): v for k, v in to_bfl_state_dict(self.model.state_dict()).items()}
        bfl = os.path.join(os.path.dirname(path), "bfl", "lora_bfl.safetensors")
        got = lycoris_on_original_tree(bfl, base, self.tmp)
        self.assertEqual(len(got), 2 * 8 + 2 * 2, f"{kind}: 8 BFL Linears per double block, 2 per single block")
        worst = max(max_rel_error(w, expected[m + ".weight"]) for m, w in got.items())
        effect = max(max_rel_error(base[m], expected[m + ".weight"]) for m in got)
        print(f"{kind}, original naming (lycoris-lora on BFL names): rel error {worst:.2e} (adapter effect {effect:.2e})")
        self.assertGreater(effect, MIN_EFFECT, kind)
        self.assertLess(worst, TOLERANCE, kind)
        # `baton lora-convert` takes it back to Baton's own naming (diffusers/PEFT, LyCORIS), which acts the same.
        back = os.path.join(self.tmp, f"{kind}_back.safetensors")
        baton("lora-convert", "--in", bfl, "--out", back, "--to", "diffusers")
        self.compare(f"{kind}, original naming converted back", back, diffusers_forward(transformer, self.inputs))

    def compare(self, kind, path, expected):
        got = baton_forward(self.tmp, self.folder, self.inputs, "--lora", path)
        err, effect = max_rel_error(got, expected), max_rel_error(self.plain, expected)
        print(f"{kind}: rel error {err:.2e} (adapter effect {effect:.2e})")
        self.assertGreater(effect, MIN_EFFECT, f"{kind}: the adapter barely changes the output")
        self.assertLess(err, TOLERANCE, kind)

    def test_dora_loads_in_diffusers(self):
        path = self.train("dora")
        transformer = copy.deepcopy(self.model)
        transformer.load_lora_adapter(path, prefix="transformer", adapter_name="baton")
        self.assertTrue(any("lora_magnitude_vector" in n for n, _ in transformer.named_parameters()))
        self.compare("dora (load_lora_adapter)", path, diffusers_forward(transformer, self.inputs))
        self.check_original_naming("dora", path, transformer)

    def check_lycoris(self, kind, extra="", targets="all-linear", save_bfl=True):
        path = self.train(kind, extra, targets, save_bfl=save_bfl)
        transformer = copy.deepcopy(self.model)
        network, _ = create_lycoris_from_weights(1.0, path, transformer)
        network.apply_to()
        self.compare(f"{kind} (create_lycoris_from_weights)", path, diffusers_forward(transformer, self.inputs))
        return path, transformer, len(network.loras)

    def test_loha_loads_in_lycoris(self):
        path, transformer, adapted = self.check_lycoris("loha")
        # 12 Linears in each of the 2 double blocks, 2 in each of the 2 single blocks.
        self.assertEqual(adapted, 2 * 12 + 2 * 2, "loha: LyCORIS found every adapted Linear")
        self.check_original_naming("loha", path, transformer)

    def test_lokr_loads_in_lycoris(self):
        _, _, adapted = self.check_lycoris("lokr", ", factor: 4", save_bfl=False)
        self.assertEqual(adapted, 2 * 12 + 2 * 2, "lokr: LyCORIS found every adapted Linear")

    def test_lokr_original_naming_loads_in_diffusers(self):
        """A LoKr off the fused q, k, v: its BFL file loads with diffusers' FLUX.2 LoKr loader (ai-toolkit's format);
        across q, k and v it is refused before training (Kronecker products stacked are not one)."""
        refused = self.train("lokr", ", factor: 4", check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("has no FLUX.2 original (BFL/ComfyUI) naming", refused.stderr)
        path, _, adapted = self.check_lycoris("lokr", ", factor: 4", LOKR_UNFUSED)
        self.assertEqual(adapted, 2 * 6 + 2 * 2, "lokr: LyCORIS found every adapted Linear")
        bfl = os.path.join(os.path.dirname(path), "bfl", "lora_bfl.safetensors")
        state_dict, metadata = Flux2Pipeline.lora_state_dict(bfl, return_lora_metadata=True)
        transformer = copy.deepcopy(self.model)
        Flux2Pipeline.load_lora_into_transformer(state_dict, transformer=transformer, adapter_name="baton",
                                                 metadata=metadata)
        expected = diffusers_forward(transformer, self.inputs)
        self.compare("lokr, original naming (Flux2Pipeline.load_lora_weights)", bfl, expected)
        # `baton lora-convert --to diffusers` writes it LyCORIS-named again, which lycoris-lora loads the same.
        back = os.path.join(self.tmp, "lokr_back.safetensors")
        baton("lora-convert", "--in", bfl, "--out", back, "--to", "diffusers")
        lycoris_model = copy.deepcopy(self.model)
        network, _ = create_lycoris_from_weights(1.0, back, lycoris_model)
        network.apply_to()
        err = max_rel_error(diffusers_forward(lycoris_model, self.inputs), expected)
        print(f"lokr, original naming converted back (create_lycoris_from_weights): rel error {err:.2e}")
        self.assertLess(err, TOLERANCE)


class WanVariantsTest(unittest.TestCase):
    """The tiny Wan with a random adapter of each type made by peft: `baton forward --lora` gives peft's output."""

    def test_each_type_on_wan(self):
        with open(WAN_CONFIG) as f:
            config = {k: v for k, v in json.load(f).items() if k != "_class_name"}
        g = torch.Generator().manual_seed(1)
        inputs = dict(hidden_states=torch.randn(1, 4, 2, 8, 8, generator=g), timestep=torch.tensor([700.0]),
                      encoder_hidden_states=torch.randn(1, 5, 16, generator=g))
        handle = temp_dir()
        tmp = handle.name
        torch.manual_seed(0)
        plain = WanTransformer3DModel(**config).eval()
        plain.save_pretrained(os.path.join(tmp, "transformer"))
        save_file(inputs, os.path.join(tmp, "inputs.safetensors"))
        with torch.no_grad():
            base = plain(**inputs).sample
        wan_targets = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]
        configs = {
            "dora": LoraConfig(r=4, lora_alpha=8, target_modules=wan_targets, use_dora=True, init_lora_weights=False),
            "loha": LoHaConfig(r=4, alpha=8, target_modules=wan_targets, init_weights=False),
            "lokr": LoKrConfig(r=2, alpha=6, target_modules=wan_targets, init_weights=False),
        }
        for kind, peft_config in configs.items():
            torch.manual_seed(23)
            model = copy.deepcopy(plain)
            model.add_adapter(peft_config)
            with torch.no_grad():
                expected = model(**inputs).sample
            path = os.path.join(tmp, f"{kind}.safetensors")
            write_init_file(kind, model, path, 8 if kind != "lokr" else 6)
            out = os.path.join(tmp, "out.safetensors")
            baton("forward", "--model", os.path.join(tmp, "transformer"), "--inputs",
                  os.path.join(tmp, "inputs.safetensors"), "--output", out, "--lora", path)
            err, effect = max_rel_error(load_file(out)["output"], expected), max_rel_error(base, expected)
            print(f"wan {kind}: rel error {err:.2e} (adapter effect {effect:.2e})")
            self.assertGreater(effect, MIN_EFFECT, kind)
            self.assertLess(err, TOLERANCE, kind)
            original = os.path.join(tmp, f"{kind}_original.safetensors")
            baton("lora-convert", "--in", path, "--out", original, "--to", "original")
            baton("forward", "--model", os.path.join(tmp, "transformer"), "--inputs",
                  os.path.join(tmp, "inputs.safetensors"), "--output", out, "--lora", original)
            self.assertLess(max_rel_error(load_file(out)["output"], expected), TOLERANCE, f"{kind}, original naming")
            self.check_wan_original_naming(kind, tmp, original, plain, model)
        handle.cleanup()

    def check_wan_original_naming(self, kind, tmp, original, plain, model):
        """`baton lora-convert --to original`'s file: each module under the name diffusers' Wan converter maps back to
        the adapted Linear, and lycoris-lora applying the file to Linears of those names and weights acts as peft's."""
        base, expected = {}, {}
        acting = effective_weights(model, [n for n, m in model.named_modules() if hasattr(m, "base_layer")])
        for module in original_modules(load_file(original)):
            dummy = {f"diffusion_model.{module}.lora_{p}.weight": torch.zeros(1, 1) for p in "AB"}
            diffusers = {k.removeprefix("transformer.").rsplit(".lora_", 1)[0]
                         for k in _convert_non_diffusers_wan_lora_to_diffusers(dummy)}
            self.assertEqual(len(diffusers), 1, module)
            name = diffusers.pop()
            base[module] = plain.get_submodule(name).weight.detach()
            expected[module] = acting.pop(name)
        self.assertEqual(acting, {}, f"{kind}: adapted Linears the original file lacks")
        got = lycoris_on_original_tree(original, base, tmp)
        worst = max(max_rel_error(w, expected[m]) for m, w in got.items())
        print(f"wan {kind}, original naming (lycoris-lora on Wan's names): rel error {worst:.2e}")
        self.assertLess(worst, TOLERANCE, kind)


if __name__ == "__main__":
    unittest.main()
