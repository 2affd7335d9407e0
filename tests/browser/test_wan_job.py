"""A Wan image-to-video job followed in Chromium: its sample videos (H.264 MP4, rendered by the stage workers during
training) play in the page, muted and looping, and last frames / fps seconds."""

import os
import sys
import unittest

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(__file__))
from browser_env import SOURCE_DIR, Stack, chromium, run, screenshot, sign_in, text_of, wait_until  # noqa: E402

FRAMES, FPS = 5, 16  # the job's samples.frames; Wan's videos play at 16 frames per second


class WanJobInTheBrowser(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack("wan")
        d = cls.stack.dir
        run("baton", "init-weights", "--pipeline", "wan-i2v-tiny", "--seed", "0", "--out", os.path.join(d, "pipeline"))
        run("encoder_worker", "--dataset", os.path.join(SOURCE_DIR, "data", "wan_sample"), "--cache",
            os.path.join(d, "cache"), "--model", os.path.join(d, "pipeline"), "--resolution", "32", "--max_frames", "5",
            "--max_sequence_length", "16", "--threads", "1")
        cls.stack.start()
        cls.driver = chromium()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.stack.stop()

    def test_sample_videos_play(self):
        job_yaml = (
            "model: pipeline\ndataset: cache\nlora: {rank: 4, targets: attention}\noptimizer: {lr: 0.01}\nsteps: 2\n"
            "batch_size: 2\nmicro_batches: 2\nseed: 3\ntimesteps: {sampling: none, shift: 5}\n"
            "samples: {every: 2, prompts: [a red circle, a yellow square], steps: 3, guidance: 3.0, size: [32, 32], "
            f"frames: {FRAMES}, negative_prompt: blurry, image: "
            + os.path.join(SOURCE_DIR, "data", "wan_sample", "red_circle_right.mp4") + "}\n")
        d = self.driver
        sign_in(d, self.stack.url, self.stack.token)
        wait_until(d, lambda d: d.find_elements(By.ID, "job-yaml"), 30, "the jobs page")
        d.execute_script("document.getElementById('job-yaml').value = arguments[0]", job_yaml)
        d.find_element(By.ID, "job-name").send_keys("wan-i2v")
        d.find_element(By.ID, "submit-button").click()
        wait_until(d, lambda d: text_of(d, "#job-state") == "finished", 300, "the Wan job to finish")
        wait_until(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".by-step video.sample")) == 4, 30,
                   "two prompts' videos before the first step and after the last")
        state = """return Array.from(document.querySelectorAll('.by-step video.sample')).map(function (v) {
                     return [v.readyState, v.duration, v.muted, v.loop, v.error ? v.error.code : 0]; });"""
        wait_until(d, lambda d: all(v[0] >= 2 for v in d.execute_script(state)), 60, "every video ready to play")
        for ready, duration, muted, loop, error in d.execute_script(state):
            self.assertGreaterEqual(ready, 2)
            self.assertEqual(error, 0)
            self.assertAlmostEqual(duration, FRAMES / FPS, delta=1e-3)
            self.assertTrue(muted and loop)
        captions = [f.text for f in d.find_elements(By.CSS_SELECTOR, ".by-step figcaption")]
        self.assertIn("Step 2 · a yellow square", captions)
        screenshot(d, "wan-job-page", whole_page=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
