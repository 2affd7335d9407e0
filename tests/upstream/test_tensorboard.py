"""Referee: the TensorBoard event files every run writes (<output>/tensorboard/), read back by the `tensorboard`
package's own reader (EventAccumulator, what `tensorboard --logdir` serves).

A short `baton train-local` run of the tiny FLUX.2 pipeline (`baton init-weights --pipeline tiny`) on the bundled
sample pictures, with a validation pass and samples before the first step and after the last: TensorBoard must show
each step's loss, learning rate and gradient norm equal to train_log.jsonl's (as float32, what a TensorBoard scalar
holds), each validation timestep's loss and the mean, and every sample image, its PNG bytes unchanged. The job keeps
an EMA evaluated beside the adapters (`ema: {evals: both}`): its passes show under validation_ema/ and samples_ema/.
"""

import json
import os
import subprocess
import unittest

import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from referee import BIN_DIR, baton, temp_dir

REPO = os.path.join(os.path.dirname(__file__), "..", "..")


class TensorBoardTest(unittest.TestCase):
    def test_a_run_shows_in_tensorboard_as_in_its_train_log(self):
        with temp_dir() as tmp:
            pipeline, cache, out = (os.path.join(tmp, d) for d in ("pipeline", "cache", "out"))
            baton("init-weights", "--pipeline", "tiny", "--out", pipeline, "--seed", 0)
            subprocess.run([os.path.join(BIN_DIR, "encoder_worker"), "--dataset", os.path.join(REPO, "data", "sample"),
                            "--cache", cache, "--model", pipeline, "--resolution", "32", "--max_sequence_length",
                            "16", "--threads", "1"], check=True, capture_output=True, timeout=300)
            job = os.path.join(tmp, "job.yaml")
            with open(job, "w") as f:
                f.write(f"model: {pipeline}\ndataset: {cache}\nlora: {{rank: 2, targets: all-linear}}\n"
                        f"optimizer: {{lr: 0.001, warmup_steps: 2}}\nsteps: 3\nbatch_size: 2\nseed: 1\n"
                        f"ema: {{decay: 0.5, evals: both}}\n"
                        f"validation: {{every: 3, dataset: {cache}, samples: 0, timesteps: [0.25, 0.75]}}\n"
                        f"samples: {{every: 3, prompts: [a red circle, a blue square], steps: 2, size: [32, 32]}}\n")
            baton("train-local", "--job", job, "--output", out)
            with open(os.path.join(out, "train_log.jsonl")) as f:
                lines = [json.loads(line) for line in f]
            acc = event_accumulator.EventAccumulator(os.path.join(out, "tensorboard"),
                                                     size_guidance={event_accumulator.IMAGES: 0})
            acc.Reload()
            steps = [line for line in lines if "event" not in line and "loss" in line]
            self.assertEqual(len(steps), 3)
            for key in ("loss", "lr", "grad_norm"):
                shown = {e.step: e.value for e in acc.Scalars(f"train/{key}")}
                self.assertEqual(shown, {line["step"]: float(np.float32(line[key])) for line in steps}, key)
            shown_images = 0
            for weights, of in (("", ""), ("ema", "_ema")):
                passes = [line for line in lines if line.get("weights", "") == weights]
                validations = [line for line in passes if line.get("event") == "validation"]
                self.assertEqual(len(validations), 2)  # before the first step and after the last
                for t in ("0.25", "0.75", "mean"):
                    tag = f"validation{of}/loss_mean" if t == "mean" else f"validation{of}/loss_t={t}"
                    shown = {e.step: e.value for e in acc.Scalars(tag)}
                    self.assertEqual(shown, {v["step"]: float(np.float32(v["validation_loss"][t]))
                                             for v in validations})
                sample_passes = [line for line in passes if line.get("event") == "samples"]
                self.assertEqual(len(sample_passes), 2)
                for s in sample_passes:
                    for name in sorted(os.listdir(s["dir"])):
                        if not name.endswith(".png"):
                            continue
                        events = [e for e in acc.Images(f"samples{of}/{name[:-4]}") if e.step == s["step"]]
                        self.assertEqual(len(events), 1, name)
                        with open(os.path.join(s["dir"], name), "rb") as f:
                            self.assertEqual(events[0].encoded_image_string, f.read(), name)
                        shown_images += 1
            print(f"TensorBoard: {len(steps)} steps x 3 scalars, 2 x {len(validations)} validation passes, "
                  f"{shown_images} sample images, all equal to train_log.jsonl's")
            self.assertGreaterEqual(shown_images, 2 * 2 * 3)  # two samples and the contact sheet, twice, twice


if __name__ == "__main__":
    unittest.main()
