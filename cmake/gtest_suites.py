#!/usr/bin/env python3
"""Registers a GoogleTest binary's tests with ctest one suite per test (called after each build of the binary).

A process per test case loaded libtorch (~0.5 s) once per case; a process per suite loads it once per suite and runs
its cases in a row, while ctest still runs suites side by side. A suite of more than MAX_CASES cases (the integration
tests: their cases take seconds each) is split into shards "Suite/KofN" of every N-th case, so that ctest can still
spread it over both cores. A suite whose cases took under QUICK_SECONDS in the run recorded in tests/suite_times.txt
(scripts/test_summary.py --costs writes it) is all start-up: such suites of one binary share one process, "<binary>.quick"
or "<binary>.quick/KofN" of at most GROUP_SECONDS recorded time each (a suite not recorded runs alone). Each test
writes its cases' results to RESULTS_DIR/<binary>.<test>.xml ('/' as '_'), from which scripts/test_summary.py reports
every case by name.

  gtest_suites.py BINARY OUT.cmake WORKING_DIR RESULTS_DIR [LABELS] [TIMEOUT] [MAX_CASES]
"""
import os
import subprocess
import sys

SUITE_TIMES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "suite_times.txt")
QUICK_SECONDS = 0.5  # a process start loads libtorch in ~0.5 s: a suite quicker than that shares one
GROUP_SECONDS = 3.0  # recorded time per shared process, so that ctest still spreads the groups over the cores


def suites(binary):
    """[(suite, [case, ...])] in the binary's order."""
    listing = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True, timeout=120)
    if listing.returncode != 0:
        sys.exit(f"{binary} --gtest_list_tests exited {listing.returncode}:\n{listing.stdout}{listing.stderr}")
    found = []
    for line in listing.stdout.splitlines():
        head = line.split("#")[0].strip()
        # "Suite." or "Prefix/Suite.  # TypeParam = ..." opens a suite; its cases follow, indented.
        if line and not line.startswith(" ") and head.endswith(".") and " " not in head:
            found.append((head[:-1], []))
        elif line.startswith("  ") and head and found:
            found[-1][1].append(head)
    return [(suite, cases) for suite, cases in found if not suite.startswith("DISABLED_")]


def shards(suite, cases, max_cases):
    """[(ctest name, gtest filter)]: the whole suite, or runs of at most max_cases cases of a longer one."""
    if max_cases <= 0 or len(cases) <= max_cases:
        return [(suite, f"{suite}.*")]
    count = (len(cases) + max_cases - 1) // max_cases
    return [(f"{suite}/{i + 1}of{count}", ":".join(f"{suite}.{c}" for c in cases[i::count])) for i in range(count)]


def recorded_times(target):
    """{suite: seconds its cases took} for this binary, from SUITE_TIMES ("binary suite seconds" lines)."""
    times = {}
    if os.path.exists(SUITE_TIMES):
        with open(SUITE_TIMES) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == target:
                    times[parts[1]] = float(parts[2])
    return times


def quick_groups(target, quick):
    """[(ctest name, gtest filter)] packing the quick [(suite, seconds)] in order, GROUP_SECONDS each at most."""
    groups, total = [], 0.0
    for suite, seconds in quick:
        if not groups or total + seconds > GROUP_SECONDS:
            groups.append([])
            total = 0.0
        groups[-1].append(suite)
        total += seconds
    name = f"{target}.quick"
    return [(name if len(groups) == 1 else f"{name}/{i + 1}of{len(groups)}", ":".join(f"{s}.*" for s in group))
            for i, group in enumerate(groups)]


def tests(target, found, max_cases):
    """[(ctest name, gtest filter)] for every suite of the binary: alone, sharded, or in a quick group."""
    times = recorded_times(target)
    alone, quick = [], []
    for suite, cases in found:
        seconds = times.get(suite)
        if seconds is not None and seconds < QUICK_SECONDS and (max_cases <= 0 or len(cases) <= max_cases):
            quick.append((suite, seconds))
        else:
            alone.extend(shards(suite, cases, max_cases))
    return alone + (quick_groups(target, quick) if quick else [])


def bracket(text):
    return "[==[" + text + "]==]"


def main(binary, out, working_dir, results_dir, labels="", timeout="", max_cases="0"):
    binary = os.path.abspath(binary)
    target = os.path.basename(binary)
    lines = [f"# Written by cmake/gtest_suites.py after each build of {target}: one ctest test per GoogleTest suite "
             "(or shard, or group of quick suites)."]
    for name, gtest_filter in tests(target, suites(binary), int(max_cases)):
        xml = os.path.join(results_dir, f"{target}.{name.replace('/', '_')}.xml")
        lines.append(f"add_test({bracket(name)} {bracket(binary)} {bracket('--gtest_filter=' + gtest_filter)} "
                     f"{bracket('--gtest_output=xml:' + xml)})")
        props = [f"WORKING_DIRECTORY {bracket(working_dir)}"]
        if labels:
            props.append(f"LABELS {bracket(labels)}")
        if timeout:
            props.append(f"TIMEOUT {timeout}")
        lines.append(f"set_tests_properties({bracket(name)} PROPERTIES {' '.join(props)})")
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6, 7, 8):
        sys.exit(__doc__)
    main(*sys.argv[1:])
