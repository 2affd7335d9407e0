#!/usr/bin/env python3
"""Tests of check_layering.py on small trees: an include that points down passes, one planted pointing up (or
sideways, or into test support from library code) fails and is named by file:line."""

import pathlib
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parent / "check_layering.py"


class CheckLayeringTest(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._dir.name)
        (self.root / "proto" / "baton" / "v1").mkdir(parents=True)
        self.write("CMakeLists.txt", "add_subdirectory(proto)\nadd_subdirectory(core)\nadd_subdirectory(tools)\n")
        self.write("core/util/status.h", "#pragma once\n#include <string>\n")
        self.write("core/lora/lora.h", '#pragma once\n#include "core/util/status.h"\n')
        self.write("core/model/flux2_model.h", '#pragma once\n#include "core/lora/lora.h"\n')
        self.write("core/testing/tiny_flux2.h", '#pragma once\n#include "core/model/flux2_model.h"\n')
        self.write("wire/tensor_codec.h",
                   '#pragma once\n#include "baton/v1/stage.pb.h"\n#include "core/model/flux2_model.h"\n')
        self.write("tools/main.cc", '#include "wire/tensor_codec.h"\n#include "nlohmann/json.hpp"\n')
        self.write("tests/pipeline_test.cc", '#include "tools/main.h"\n#include "core/testing/tiny_flux2.h"\n')

    def tearDown(self):
        self._dir.cleanup()

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def run_check(self):
        r = subprocess.run([sys.executable, str(SCRIPT), str(self.root)], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def test_includes_pointing_down_pass(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("point down", out)

    def test_an_upward_include_in_core_fails_naming_file_and_line(self):
        self.write("core/lora/lora.cc", '#include "core/lora/lora.h"\n\n#include "core/model/flux2_model.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/lora/lora.cc:3: includes core/model/flux2_model.h: core/lora may not include core/model",
                      out)

    def test_the_client_may_not_include_the_coordinator(self):
        self.write("coordinator/stage_session.h", "#pragma once\n")
        self.write("client/sample_command.cc", '#include "coordinator/stage_session.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("client/sample_command.cc:1: includes coordinator/stage_session.h", out)

    def test_the_client_stands_on_no_libtorch_floor(self):
        self.write("core/train/job.h", "#pragma once\n")
        self.write("client/job_commands.cc", '#include "core/util/status.h"\n#include "core/train/job.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("client/job_commands.cc:2: includes core/train/job.h: client may not include core/train", out)

    def test_the_stage_driver_may_not_include_the_training_job(self):
        self.write("CMakeLists.txt", "add_subdirectory(proto)\nadd_subdirectory(core)\nadd_subdirectory(tools)\n"
                   "add_subdirectory(stage_driver)\n")
        self.write("core/train/job.h", "#pragma once\n")
        self.write("core/train/adamw.h", "#pragma once\n")
        self.write("stage_driver/stage_fleet.h", '#pragma once\n#include "core/train/adamw.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.write("stage_driver/stage_set.h", '#pragma once\n\n#include "core/train/job.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("stage_driver/stage_set.h:3: includes core/train/job.h: the stage driver knows pipelines", out)

    def test_core_may_not_include_rpc_or_generated_protos(self):
        self.write("core/train/job.cc", '#include "wire/tensor_codec.h"\n#include "baton/v1/stage.pb.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/train/job.cc:1:", out)
        self.assertIn("core/train/job.cc:2:", out)

    def test_only_test_code_includes_core_testing(self):
        self.write("core/lora/lora_test.cc", '#include "core/testing/tiny_flux2.h"\n')
        self.write("rpc/tls_test.cc", '#include "core/testing/tiny_flux2.h"\n')
        self.assertEqual(self.run_check()[0], 0)
        self.write("rpc/tls.cc", '#include "core/testing/tiny_flux2.h"\n')
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("rpc/tls.cc:1: includes core/testing/tiny_flux2.h: only test code includes core/testing", out)

    def test_a_floor_library_linking_a_floor_it_may_not_include_fails(self):
        self.write("core/CMakeLists.txt", "baton_floor(util x)\nbaton_floor(model baton_core_lora)\n")
        self.assertEqual(self.run_check()[0], 0)
        self.write("core/CMakeLists.txt", "baton_floor(lora baton_core_model\n  baton_core_util)\n")
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("baton_core_lora links baton_core_model, but core/lora may not include core/model", out)

    def test_a_folder_missing_from_the_table_fails(self):
        self.write("core/newfloor/thing.h", "#pragma once\n")
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/newfloor", out)
        self.write("CMakeLists.txt", "add_subdirectory(core)\nadd_subdirectory(scheduler)\n")
        self.assertIn("add_subdirectory(scheduler)", self.run_check()[1])


class TableTest(unittest.TestCase):
    def test_the_table_points_down_and_a_cycle_in_it_is_an_error(self):
        sys.dont_write_bytecode = True  # no __pycache__ in the source tree
        sys.path.insert(0, str(SCRIPT.parent))
        import check_layering

        self.assertEqual(check_layering.check_table(), [])
        saved = list(check_layering.ALLOWED)
        try:
            check_layering.ALLOWED.append(("core/lora", "core/model", "a planted cycle"))
            errors = check_layering.check_table()
        finally:
            check_layering.ALLOWED[:] = saved
        self.assertEqual(errors, ["ALLOWED lets core/lora include core/model, which is not beneath it in LEVELS"])


if __name__ == "__main__":
    unittest.main()
