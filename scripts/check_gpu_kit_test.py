#!/usr/bin/env python3
"""Tests of check_gpu_kit.py: the tree's CMake passes against gpu_pack.sh's list; the same CMake against a
gpu_pack.sh with a package deliberately removed from DEV fails, naming the package and the line that needs it; a
header that only a compiled file's dependencies show (gloo's, through c10d), a library the configure recorded, a
static archive the kit prunes and an unknown Find module fail too. Reads this machine's dpkg database (the packages
scripts/setup.sh installs); no network."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
SCRIPT = HERE / "check_gpu_kit.py"
PACK = HERE / "gpu_pack.sh"


def run_check(root, *extra):
    r = subprocess.run([sys.executable, str(SCRIPT), str(root), *extra], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


class CheckGpuKitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run(["bash", str(PACK), "--list"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        cls.full_list = r.stdout

    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._dir.name)

    def tearDown(self):
        self._dir.cleanup()

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def copy_tree_cmake(self):
        """Every CMakeLists.txt and *.cmake of the repository, as they are (no sources, no build)."""
        skip = {"gpu_kit", "gpu_rehearsal", "out", "node_modules"}  # and build*/ and hidden folders
        for dirpath, dirnames, filenames in os.walk(REPO):
            top = pathlib.Path(dirpath) == REPO
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and
                           not (top and (d in skip or d.startswith("build")))]
            for f in filenames:
                if f == "CMakeLists.txt" or f.endswith(".cmake"):
                    dst = self.root / pathlib.Path(dirpath, f).relative_to(REPO)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(os.path.join(dirpath, f), dst)

    def pack_without(self, package):
        """The real gpu_pack.sh with PACKAGE taken out of DEV."""
        text = PACK.read_text()
        dev = re.search(r'^DEV="([^"]*)"', text, re.M)
        self.assertIsNotNone(dev)
        words = dev.group(1).split()
        self.assertIn(package, words)
        new = " ".join(w for w in words if w != package)
        path = self.write("scripts/gpu_pack.sh", text[:dev.start(1)] + new + text[dev.end(1):])
        path.chmod(0o755)

    def stub_pack(self, drop=()):
        """A gpu_pack.sh whose --list is the real one's, minus the kit packages in DROP (for the small trees)."""
        lines = [x for x in self.full_list.splitlines() if x not in {f"kit {d}" for d in drop}]
        self.write("scripts/list.txt", "\n".join(lines) + "\n")
        self.write("scripts/gpu_pack.sh", '#!/bin/sh\ncat "$(dirname "$0")/list.txt"\n').chmod(0o755)

    def test_the_tree_passes(self):
        rc, out = run_check(REPO)
        self.assertEqual(rc, 0, out)
        self.assertIn("every file the build looks for is in the kit", out)

    def test_the_tree_without_libgloo_dev_fails_at_the_gloo_header(self):
        self.copy_tree_cmake()
        self.pack_without("libgloo-dev")
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"FAIL Debian package libgloo-dev is neither in the kit nor on the GPU machine .*: "
                              r"/usr/include/gloo/context\.h is in it, needed by collective/CMakeLists\.txt:\d+ "
                              r"find_path\(BATON_GLOO_INCLUDE gloo/context\.h\)")
        self.assertEqual(out.count("FAIL"), 1, out)

    def test_the_tree_without_prometheus_cpp_dev_fails_down_to_libcurl(self):
        self.copy_tree_cmake()
        self.pack_without("prometheus-cpp-dev")
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"FAIL Debian package prometheus-cpp-dev is neither .*prometheus-cpp-config\.cmake is in "
                              r"it, needed by CMakeLists\.txt:\d+ -> find_package\(prometheus-cpp\)")
        # prometheus-cpp's config looks for CURL: the kit lost libcurl4-openssl-dev with it.
        self.assertRegex(out, r"FAIL Debian package libcurl4-openssl-dev is neither .*find_package\(CURL\)")

    def test_a_header_only_the_build_dependencies_show_counts(self):
        self.write("CMakeLists.txt", "project(x CXX)\n")
        deps = self.write("deps.txt", "collective/gloo_group.o: #deps 2, deps mtime 1 (VALID)\n"
                                      "    /usr/include/gloo/context.h\n    /usr/include/c++/12/vector\n")
        self.stub_pack()
        rc, out = run_check(self.root, "--deps", str(deps))
        self.assertEqual(rc, 0, out)
        self.stub_pack(drop=["libgloo-dev"])
        rc, out = run_check(self.root, "--deps", str(deps))
        self.assertEqual(rc, 1, out)
        self.assertIn("Debian package libgloo-dev is neither", out)
        self.assertIn("/usr/include/gloo/context.h is in it, needed by an #include of a compiled file", out)

    def test_what_the_configure_found_counts(self):
        self.write("CMakeLists.txt", "project(x CXX)\n")
        build = self.root / "b"
        (build).mkdir()
        (build / "CMakeCache.txt").write_text(
            "CURL_LIBRARY_RELEASE:FILEPATH=/usr/lib/x86_64-linux-gnu/libcurl.so\nCMAKE_AR:FILEPATH=/usr/bin/ar\n")
        deps = self.write("deps.txt", "")
        self.stub_pack()
        rc, out = run_check(self.root, "--build", str(build), "--deps", str(deps), "--verbose")
        self.assertEqual(rc, 0, out)
        # The link's target is cmake's libcurl4, which the machine has: gpu_pack.sh brings the file along.
        self.assertIn("libcurl4 (the machine, brought along by gpu_pack.sh)", out)
        self.stub_pack(drop=["libcurl4-openssl-dev"])
        rc, out = run_check(self.root, "--build", str(build), "--deps", str(deps))
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"Debian package libcurl4-openssl-dev is neither .*/libcurl\.so is in it, needed by "
                              r"\S*CMakeCache\.txt: CURL_LIBRARY_RELEASE")

    def test_the_machines_cuda_toolkit_is_exempt_wherever_it_lies(self):
        # CI's machine installs the toolkit straight into /usr/local: FindCUDA there records /usr/local/bin/nvcc
        # and /usr/local/lib64/libcublas.so, files of no Debian package (the failure of stop 39).
        self.write("CMakeLists.txt", "project(x CXX)\n")
        build = self.root / "b"
        build.mkdir()
        elsewhere = tempfile.TemporaryDirectory()  # outside ROOT, whose own files are always exempt
        self.addCleanup(elsewhere.cleanup)
        nvcc = pathlib.Path(elsewhere.name, "nvcc")
        cublas = pathlib.Path(elsewhere.name, "libcublas.so")
        nvcc.write_text("#!/bin/sh\n")
        cublas.write_text("")
        (build / "CMakeCache.txt").write_text(
            f"CUDA_NVCC_EXECUTABLE:FILEPATH={nvcc}\nCUDA_cublas_LIBRARY:FILEPATH={cublas}\n"
            f"CUDAToolkit_NVCC_EXECUTABLE:FILEPATH={nvcc}\n")
        deps = self.write("deps.txt", "")
        self.stub_pack()
        rc, out = run_check(self.root, "--build", str(build), "--deps", str(deps))
        self.assertEqual(rc, 0, out)
        self.assertIn("CUDA_NVCC_EXECUTABLE", out)
        self.assertIn("the machine's CUDA toolkit", out)
        # The same file under any other variable is not the toolkit's say-so: it fails as a file of no package.
        (build / "CMakeCache.txt").write_text(f"SOME_LIBRARY:FILEPATH={cublas}\n")
        rc, out = run_check(self.root, "--build", str(build), "--deps", str(deps))
        self.assertEqual(rc, 1, out)
        self.assertIn("SOME_LIBRARY", out)

    def test_a_static_archive_the_kit_prunes_fails(self):
        self.write("CMakeLists.txt", "find_library(SSL_STATIC NAMES libssl.a)  # a comment (find_path(X y.h))\n")
        self.stub_pack()
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1, out)
        self.assertIn("libssl.a is in libssl-dev, but a static archive, which gpu_pack.sh deletes", out)
        self.write("CMakeLists.txt", "find_library(GTEST_STATIC NAMES libgtest.a)\n")
        self.assertEqual(run_check(self.root)[0], 0)

    def test_an_unknown_package_fails(self):
        self.write("CMakeLists.txt", "if(FALSE)\n  find_package(NotThere)\nendif()\nfind_package(NoSuchThing REQUIRED)\n")
        self.stub_pack()
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1, out)
        self.assertIn("CMakeLists.txt:4: find_package(NoSuchThing) finds no CMake config", out)
        self.assertNotIn("NotThere", out)


if __name__ == "__main__":
    unittest.main()
