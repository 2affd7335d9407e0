"""Makes the README's screenshot, docs/images/job-page.png: the demo job (configs/jobs/demo.yaml, all its steps) submitted
through `baton ui` as a person would, followed to its end, and its page with the samples before the first step, after
step 30 and after the last. Not a test (ctest runs the test_*.py beside it); run it after a change to the page or the
demo:  .venv/bin/python tests/browser/make_readme_shot.py"""

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser_env import SOURCE_DIR, Stack, chromium, screenshot, sign_in, text_of, wait_until  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

DEMO_JOB = os.path.join(SOURCE_DIR, "configs", "jobs", "demo.yaml")
OUT = os.path.join(SOURCE_DIR, "docs", "images", "job-page.png")


def main():
    stack = Stack("readme")
    stack.demo_data()
    stack.start()
    driver = chromium()
    try:
        sign_in(driver, stack.url, stack.token)
        wait_until(driver, lambda d: d.find_elements(By.ID, "jobs"), 30, "the jobs page")
        driver.get(stack.url + "/")
        driver.find_element(By.ID, "job-upload").send_keys(DEMO_JOB)
        wait_until(driver, lambda d: "model: out/demo/pipeline" in d.find_element(By.ID, "job-yaml").get_attribute(
            "value"), 10, "the chosen file in the form")
        driver.find_element(By.ID, "submit-button").click()
        wait_until(driver, lambda d: re.search(r"/jobs/\d+$", d.current_url), 60, "the new job's page")
        wait_until(driver, lambda d: text_of(d, "#job-state") == "finished", 600, "the job to finish")
        wait_until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".by-step img.sample")) == 12, 60,
                   "4 prompts rendered 3 times")
        wait_until(driver, lambda d: all(d.execute_script("""
            return Array.from(document.querySelectorAll('.by-step img.sample')).map(function (i) {
              return i.complete && i.naturalWidth > 0; });""")), 30, "every sample image decoded")
        shutil.copyfile(screenshot(driver, "readme-job-page", whole_page=True), OUT)
        print(f"wrote {OUT}")
    finally:
        driver.quit()
        stack.stop()


if __name__ == "__main__":
    main()
