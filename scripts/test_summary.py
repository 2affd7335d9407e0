#!/usr/bin/env python3
"""After ctest: every test case by name, from the GoogleTest suites' XML (build/test-results/) and ctest's JUnit file.

ctest runs one process per GoogleTest suite (cmake/gtest_suites.py); this names each case in it again. Writes
BUILD/test-results/cases.txt (one line per case: result, seconds, name), prints the cases that failed or were
skipped, and ends with one line "cases: N passed, N failed, N skipped". A ctest test with no per-case XML (a script
test, or a suite that crashed or timed out before GoogleTest wrote its XML) counts as one case under its ctest name.

  test_summary.py BUILD_DIR
  test_summary.py --costs BUILD_DIR tests/ctest_costs.txt   # keep this run's test times for the next fresh build
--costs also writes tests/suite_times.txt beside it: each GoogleTest suite's time inside its process, from which
cmake/gtest_suites.py groups the quick suites of a binary into one process.
"""
import datetime
import glob
import os
import sys
import xml.etree.ElementTree as ET


def gtest_cases(results_dir):
    """{ctest test name ('/' as '_'): [(result, seconds, Suite.Case)]} from the XML file each test wrote
    (RESULTS_DIR/<binary>.<test>.xml, cmake/gtest_suites.py)."""
    tests = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.xml"))):
        test = os.path.basename(path)[:-len(".xml")].split(".", 1)[-1]
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue  # a test killed while writing; ctest's own result for it counts below
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                result = "FAIL"
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                result = "SKIP"
            else:
                result = "PASS"
            name = f"{case.get('classname')}.{case.get('name')}"
            tests.setdefault(test, []).append((result, float(case.get("time", 0)), name))
    return tests


def ctest_tests(junit):
    """[(result, seconds, ctest name)] from ctest --output-junit."""
    if not os.path.exists(junit):
        return []
    tests = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        status = case.get("status", "")
        result = {"run": "PASS", "fail": "FAIL", "disabled": "SKIP", "notrun": "SKIP"}.get(status, "FAIL")
        if case.find("failure") is not None:
            result = "FAIL"
        elif case.find("skipped") is not None:
            result = "SKIP"
        tests.append((result, float(case.get("time", 0)), case.get("name")))
    return tests


def main(build_dir):
    results_dir = os.path.join(build_dir, "test-results")
    by_suite = gtest_cases(results_dir)
    rows = []
    for result, seconds, name in ctest_tests(os.path.join(build_dir, "ctest-junit.xml")):
        cases = by_suite.get(name.replace("/", "_"))
        if cases and not (result == "FAIL" and all(r != "FAIL" for r, _, _ in cases)):
            rows.extend(cases)
        else:
            rows.append((result, seconds, name))  # no per-case results, or the process failed after its cases
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "cases.txt"), "w") as f:
        for result, seconds, name in rows:
            f.write(f"{result} {seconds:8.3f} s  {name}\n")
    counts = {r: sum(1 for row in rows if row[0] == r) for r in ("PASS", "FAIL", "SKIP")}
    for label, key in (("skipped", "SKIP"), ("FAILED", "FAIL")):
        names = [name for result, _, name in rows if result == key]
        if names:
            print(f"{label} ({len(names)}): " + ", ".join(names))
    print(f"every case by name: {os.path.join(results_dir, 'cases.txt')}")
    print(f"cases: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if counts["FAIL"] else 0


COSTS_HEADER = """# ctest's cost data (Testing/Temporary/CTestCostData.txt: name, runs, mean seconds), which scripts/test.sh
# seeds a fresh build with so that ctest starts the longest tests first. Regenerate: scripts/test_summary.py --costs.
"""


SUITE_TIMES_HEADER = """# Each GoogleTest suite's time inside its process in one full run, its SetUpTestSuite included: binary, suite,
# seconds (its shards summed).
# cmake/gtest_suites.py runs the quick ones of a binary in one process. Regenerate: scripts/test_summary.py --costs.
"""


def suite_seconds(root):
    """[(suite, seconds)] of one XML file: each suite's time plus the gap before it (its SetUpTestSuite, which
    GoogleTest's own time leaves out; the previous suite's TearDownTestSuite too), the last one's teardown as well."""
    def stamp(element):
        return datetime.datetime.fromisoformat(element.get("timestamp")).timestamp()
    suites = list(root.iter("testsuite"))
    if not suites or root.get("timestamp") is None or any(s.get("timestamp") is None for s in suites):
        return [(s.get("name"), float(s.get("time", 0))) for s in suites]
    found, end = [], stamp(root)
    for s in suites:
        seconds = float(s.get("time", 0))
        found.append([s.get("name"), max(0.0, stamp(s) - end) + seconds])
        end = stamp(s) + seconds
    found[-1][1] += max(0.0, stamp(root) + float(root.get("time", 0)) - end)
    return [tuple(f) for f in found]


def write_suite_times(results_dir, out):
    """Every suite's in-process seconds from this run's XML files, one "binary suite seconds" line each."""
    times = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.xml"))):
        binary = os.path.basename(path).split(".", 1)[0]
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        for suite, seconds in suite_seconds(root):
            times[(binary, suite)] = times.get((binary, suite), 0.0) + seconds
    with open(out, "w") as f:
        f.write(SUITE_TIMES_HEADER + "".join(f"{b} {s} {t:.3f}\n" for (b, s), t in sorted(times.items())))
    print(f"wrote {len(times)} suite times to {out}")


def write_costs(build_dir, out):
    """This build's ctest cost data (the passed tests' mean times) as the committed seed for fresh builds, and each
    suite's in-process time (write_suite_times) beside it."""
    lines = []
    ran = {name for _, _, name in ctest_tests(os.path.join(build_dir, "ctest-junit.xml"))}  # not gone ones
    with open(os.path.join(build_dir, "Testing", "Temporary", "CTestCostData.txt")) as f:
        for line in f:
            if line.startswith("---"):
                break  # the failed tests' list follows
            parts = line.split()
            if len(parts) == 3 and parts[0] in ran:
                lines.append(f"{parts[0]} 1 {float(parts[2]):.2f}\n")
    with open(out, "w") as f:
        f.write(COSTS_HEADER + "".join(lines))
    print(f"wrote {len(lines)} test times to {out}")
    write_suite_times(os.path.join(build_dir, "test-results"), os.path.join(os.path.dirname(out), "suite_times.txt"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--costs":
        sys.exit(write_costs(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
