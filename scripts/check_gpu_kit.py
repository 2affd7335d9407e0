#!/usr/bin/env python3
"""The GPU kit (scripts/gpu_pack.sh) against what Baton's build looks for, so that the kit cannot drift behind the
CMake again (issue 34: the kit predated libgloo-dev, and its libcurl.so pointed to nothing).

    scripts/check_gpu_kit.py ROOT [--build DIR] [--ninja PROGRAM] [--deps FILE] [--verbose]

What it checks, on this machine (Debian 12 with scripts/setup.sh's packages installed; no network, a few seconds):
  1. What the build looks for. In every CMakeLists.txt and *.cmake under ROOT: find_package, pkg_check_modules /
     pkg_search_module, find_path, find_library, find_file and find_program. A find_package is followed into the
     package's CMake config (its find_dependency/find_package calls, recursively, and every file its imported
     targets name) or, for a Find module, into the headers, libraries and programs that module looks for (the
     MODULES table below); a pkg-config module into its .pc file, the modules it requires and the libraries it
     links. With --build (a configured build folder): also every library, program and package folder its
     CMakeCache.txt recorded as found (the finds that packages' configs make, e.g. CURL for prometheus-cpp), and
     every header under /usr that any compiled file included (`ninja -t deps`: e.g. gloo's headers, which c10d's
     ProcessGroupGloo.hpp includes; or --deps FILE, that output saved). Without --build: the headers ROOT's own
     sources include with <...> that /usr/include holds.
  2. Where each file comes from: its Debian package (`dpkg -S`), for a symbolic link also the package of every
     file on the way to the real one.
  3. That gpu_pack.sh provides it (`scripts/gpu_pack.sh --list`): the package is one the kit unpacks ("kit": DEV's
     dependency closure minus BASE's) and the file is not one the kit prunes, or the GPU machine is taken to have
     the package ("base": python3, cmake, g++ ... and their closure; a kit link into such a package brings the file
     along, and gpu_pack.sh fails if a link dangles), or it is an FFmpeg library the kit builds itself.
     Exempt, and printed as such: the machine's own torch wheel and CUDA toolkit (torch's config finds them; the
     toolkit is told by the cache variables its finds set, or by a path into /usr/local/cuda*), compiler-internal
     headers, and the optional finds in OPTIONAL.
Anything else fails, naming the file, the CMake line or header that needs it, and its package. Exit status 0 when
everything is provided, 1 otherwise.
"""

import argparse
import glob
import os
import re
import subprocess
import sys

ARCH = "x86_64-linux-gnu"
INCLUDE_DIRS = ["/usr/include", f"/usr/include/{ARCH}"]
LIB_DIRS = [f"/usr/lib/{ARCH}", f"/lib/{ARCH}", "/usr/lib", "/lib"]
PROGRAM_DIRS = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
PKGCONFIG_DIRS = [f"/usr/lib/{ARCH}/pkgconfig", "/usr/lib/pkgconfig", "/usr/share/pkgconfig"]
CONFIG_BASES = [f"/usr/lib/{ARCH}", "/usr/lib", "/usr/share"]

# Find modules (CMake's own, and those that packages' configs bring along): what each looks for. A find_package of
# a name in neither this table nor a config on this machine fails the check: add the module's files here.
MODULES = {
    "Threads": {"headers": ["pthread.h"]},
    "PkgConfig": {"programs": ["pkg-config"]},
    "Protobuf": {"headers": ["google/protobuf/service.h"], "libs": ["protobuf"], "programs": ["protoc"]},
    "PNG": {"headers": ["png.h"], "libs": ["png"], "packages": ["ZLIB"]},
    "JPEG": {"headers": ["jpeglib.h"], "libs": ["jpeg"]},
    "ZLIB": {"headers": ["zlib.h"], "libs": ["z"]},
    "OpenSSL": {"headers": ["openssl/ssl.h"], "libs": ["ssl", "crypto"]},
    "CURL": {"headers": ["curl/curl.h"], "libs": ["curl"], "pkgconfig": ["libcurl"]},
    "GTest": {"headers": ["gtest/gtest.h", "gmock/gmock.h"], "libs": ["gtest", "gtest_main", "gmock", "gmock_main"],
              "config": True},
    "c-ares": {"headers": ["ares.h"], "libs": ["cares"]},  # gRPC's modules/Findc-ares.cmake
    "re2": {"headers": ["re2/re2.h"], "libs": ["re2"], "pkgconfig": ["re2"]},  # gRPC's modules/Findre2.cmake
    "LibDl": {"libs": ["dl"]},  # civetweb's FindLibDl.cmake
    "LibRt": {"libs": ["rt"]},  # civetweb's FindLibRt.cmake
}
# Provided by the GPU machine itself, not the kit.
MACHINE_PACKAGES = {"Torch": "the machine's torch wheel (gpu_check.sh puts torch.utils.cmake_prefix_path first)",
                    "CUDA": "the machine's CUDA toolkit", "CUDAToolkit": "the machine's CUDA toolkit"}
# Finds whose result the build may do without, by the variable or program they set or look for.
OPTIONAL = {"ccache": "CMakeLists.txt uses ccache as the compiler launcher when it is found",
            "CCACHE_PROGRAM": "CMakeLists.txt uses ccache as the compiler launcher when it is found"}
# Found by the build but not the kit's business: the machine's compilers, CUDA and torch, the project itself.
EXEMPT_PREFIXES = ["/usr/local/cuda", "/usr/lib/gcc/", "/usr/lib/llvm-"]
EXEMPT_VARS = {"BATON_PYTHON": "the machine's python3 (gpu_check.sh passes -DBATON_PYTHON)"}
# Cache variables that find_package(CUDA) / find_package(CUDAToolkit) set (torch's config makes both finds): the
# machine's CUDA toolkit wherever it lies. CI's machine installs it straight into /usr/local (/usr/local/bin/nvcc,
# /usr/local/lib64/libcublas.so), where no path prefix tells it from anything else.
EXEMPT_VAR_PREFIXES = {"CUDA_": "the machine's CUDA toolkit (find_package(CUDA), which torch's config makes)",
                       "CUDAToolkit_": "the machine's CUDA toolkit (find_package(CUDAToolkit))"}
SKIP_DIRS = {".git", "build", "gpu_kit", "gpu_rehearsal", ".gpu_cache", ".venv", "out", "node_modules"}
KEYWORDS = {"NAMES", "HINTS", "PATHS", "PATH_SUFFIXES", "DOC", "NO_DEFAULT_PATH", "REQUIRED", "NO_CACHE",
            "NAMES_PER_DIR", "NO_CMAKE_PATH", "NO_SYSTEM_ENVIRONMENT_PATH", "CMAKE_FIND_ROOT_PATH_BOTH",
            "ONLY_CMAKE_FIND_ROOT_PATH", "NO_CMAKE_FIND_ROOT_PATH", "ENV", "VALIDATOR", "REGISTRY_VIEW",
            "NO_PACKAGE_ROOT_PATH", "NO_CMAKE_ENVIRONMENT_PATH", "NO_CMAKE_SYSTEM_PATH", "NO_CMAKE_INSTALL_PREFIX",
            "QUIET", "OPTIONAL"}
PKG_KEYWORDS = {"REQUIRED", "QUIET", "NO_CMAKE_PATH", "NO_CMAKE_ENVIRONMENT_PATH", "IMPORTED_TARGET", "GLOBAL"}
FIND_RE = re.compile(r"\b(find_package|find_dependency|pkg_check_modules|pkg_search_module|find_path|find_library|"
                     r"find_file|find_program)\s*\(([^()]*)\)", re.IGNORECASE)


def strip_cmake(text):
    """Comments out (keeping line numbers) and `if(FALSE) ... endif()` blocks blanked."""
    text = re.sub(r"#\[(=*)\[.*?\]\1\]", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = "\n".join(re.sub(r'^((?:[^"#]|"(?:[^"\\]|\\.)*")*)#.*$', r"\1", line) for line in text.split("\n"))
    return re.sub(r"\bif\s*\(\s*(FALSE|0|OFF|NO)\s*\).*?\bendif\s*\([^)]*\)",
                  lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.I)


def cmake_finds(path, text=None):
    """(command, args, line) for each find call in one CMake file."""
    text = strip_cmake(text if text is not None else open(path, errors="replace").read())
    out = []
    for m in FIND_RE.finditer(text):
        args = [a.strip('"') for a in m.group(2).split()]
        out.append((m.group(1).lower(), args, text.count("\n", 0, m.start()) + 1))
    return out


class Need:
    """One file the build needs, and why."""

    def __init__(self, path, why, kind):
        self.path, self.why, self.kind = path, why, kind


class Checker:
    def __init__(self, root, build, deps_file, ninja, verbose):
        self.root, self.build, self.deps_file, self.ninja, self.verbose = root, build, deps_file, ninja, verbose
        self.needs = []  # Need
        self.failures = []  # strings
        self.notes = []  # exemptions, for the record
        self.seen_packages = set()
        self.torch_prefixes = []

    # ---- gpu_pack.sh's lists -----------------------------------------------------------------------------------
    def load_lists(self):
        script = os.path.join(self.root, "scripts", "gpu_pack.sh")
        r = subprocess.run(["bash", script, "--list"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit(f"check_gpu_kit: {script} --list failed ({r.returncode}): {r.stderr[-800:]}")
        lists = {"kit": set(), "base": set(), "ffmpeg": set(), "pruned": [], "static_kept": []}
        for line in r.stdout.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            kind, name = line.split(None, 1)
            if isinstance(lists.get(kind), set):
                lists[kind].add(name.split(":")[0])
            elif kind in lists:
                lists[kind].append(name)
        if not lists["kit"]:
            sys.exit(f"check_gpu_kit: {script} --list names no package for the kit")
        self.lists = lists

    # ---- resolving names to files on this machine ----------------------------------------------------------------
    @staticmethod
    def first(paths):
        for p in paths:
            if os.path.lexists(p):
                return p
        return None

    def header(self, name):
        return self.first(os.path.join(d, name) for d in INCLUDE_DIRS)

    def library(self, name):
        if name.startswith("/"):
            return name if os.path.lexists(name) else None
        names = [name] if re.search(r"\.(so|a)(\.|$)", name) else [f"lib{name}.so", f"lib{name}.a", name]
        return self.first(os.path.join(d, n) for n in names for d in LIB_DIRS)

    def program(self, name):
        return self.first(os.path.join(d, name) for d in PROGRAM_DIRS)

    def config_files(self, name):
        """The folder of package NAME's CMake config on this machine (CMake's search under /usr), or None."""
        low = name.lower()
        wanted = {f"{name}Config.cmake", f"{low}-config.cmake"}
        for base in CONFIG_BASES:
            for pattern in ("cmake/*", "*", "*/cmake", "*/CMake"):
                for d in sorted(glob.glob(os.path.join(base, pattern))):
                    parts = os.path.relpath(d, base).split("/")
                    folder = parts[1] if parts[0] == "cmake" and len(parts) > 1 else parts[0]
                    if not folder.lower().startswith(low) or not os.path.isdir(d):
                        continue
                    if any(os.path.exists(os.path.join(d, w)) for w in wanted):
                        return d
        return None

    def pc_file(self, module):
        return self.first(os.path.join(d, module + ".pc") for d in PKGCONFIG_DIRS)

    def add(self, path, why, kind):
        self.needs.append(Need(path, why, kind))

    def missing(self, what, why):
        self.failures.append(f"{why}: {what} is not on this machine (scripts/setup.sh installs what the build needs; "
                             "the check reads the packages from here)")

    # ---- following finds ----------------------------------------------------------------------------------------
    def find_package(self, name, why, depth=0):
        key = name
        if key in self.seen_packages:
            return
        self.seen_packages.add(key)
        if name in MACHINE_PACKAGES:
            self.notes.append(f"{why}: find_package({name}) is {MACHINE_PACKAGES[name]}, not the kit's")
            return
        module = MODULES.get(name)
        cfg = self.config_files(name) if (module is None or module.get("config")) else None
        if cfg:
            self.follow_config(name, cfg, why, depth)
        if module:
            for h in module.get("headers", []):
                self.need_file(self.header(h), h, f"{why} -> find_package({name}) looks for header {h}", "header")
            for lib in module.get("libs", []):
                self.need_file(self.library(lib), f"lib{lib}", f"{why} -> find_package({name}) looks for lib{lib}",
                               "library")
            for prog in module.get("programs", []):
                self.need_file(self.program(prog), prog, f"{why} -> find_package({name}) looks for {prog}", "program")
            for mod in module.get("pkgconfig", []):
                self.pkg_module(mod, f"{why} -> find_package({name})", optional=True)
            for dep in module.get("packages", []):
                self.find_package(dep, f"{why} -> find_package({name})", depth + 1)
        if not cfg and not module:
            self.failures.append(f"{why}: find_package({name}) finds no CMake config on this machine and "
                                 "scripts/check_gpu_kit.py knows no Find module of that name (add it to MODULES)")

    def follow_config(self, name, cfg, why, depth):
        files = sorted(glob.glob(os.path.join(cfg, "*.cmake")))
        here = f"{why} -> find_package({name}) [{cfg}]"
        for f in files:
            self.add(f, here, "config")
            text = open(f, errors="replace").read()
            # The files its imported targets name: CMake refuses a target whose file does not exist.
            for m in re.finditer(r'"([^"]*\$\{_IMPORT_PREFIX\}/[^"]*)"', text):
                for item in m.group(1).split(";"):
                    if not item.startswith("${_IMPORT_PREFIX}/"):
                        continue
                    path = "/usr/" + item[len("${_IMPORT_PREFIX}/"):]
                    if not os.path.isdir(path):  # include folders: their headers are checked one by one
                        self.need_file(path if os.path.lexists(path) else None, path, f"{here} imports {path}",
                                       "imported")
            if os.path.basename(f).startswith("Find"):
                continue  # a module the config brings along: followed when a find_package names it
            for cmd, args, line in cmake_finds(f, text):
                if cmd in ("find_package", "find_dependency") and args:
                    self.find_package(args[0], f"{here}:{line}", depth + 1)
                elif cmd in ("pkg_check_modules", "pkg_search_module"):
                    self.pkg_check(args, f"{here}:{line}")
        # A Find module the config carries (e.g. gRPC's modules/Findre2.cmake) is covered by MODULES.

    def pkg_check(self, args, why):
        mods = [a for a in args[1:] if a not in PKG_KEYWORDS]
        optional = "REQUIRED" not in args
        for mod in mods:
            self.pkg_module(re.split(r"[<>=]", mod)[0], why, optional)

    def pkg_module(self, mod, why, optional=False, seen=None):
        seen = seen if seen is not None else set()
        if mod in seen:
            return
        seen.add(mod)
        if mod.startswith("lib") and mod[3:] in self.lists["ffmpeg"]:
            self.notes.append(f"{why}: pkg-config {mod} comes from the kit's own FFmpeg build (gpu_pack.sh)")
            return
        pc = self.pc_file(mod)
        if not pc:
            if not optional:
                self.missing(f"pkg-config module {mod}", why)
            return
        here = f"{why} -> pkg-config {mod}"
        self.add(pc, here, "pkgconfig")
        text = open(pc, errors="replace").read()
        variables = {}
        fields = {}
        for line in text.splitlines():
            m = re.match(r"^([A-Za-z0-9_.]+)\s*=\s*(.*)$", line)
            if m:
                variables[m.group(1)] = m.group(2)
            m = re.match(r"^([A-Za-z.]+):\s*(.*)$", line)
            if m:
                fields[m.group(1)] = m.group(2)

        def expand(s):
            for _ in range(10):
                s = re.sub(r"\$\{(\w+)\}", lambda v: variables.get(v.group(1), ""), s)
            return s
        for req_field in ("Requires", "Requires.private"):
            for req in re.split(r"[,\s]+", expand(fields.get(req_field, ""))):
                if req and not re.match(r"^[<>=!]|^\d", req):
                    self.pkg_module(req, here, optional, seen)
        libs = expand(fields.get("Libs", "")).split()
        libdirs = [x[2:] for x in libs if x.startswith("-L")]
        for x in libs:
            if x.startswith("-l"):
                found = self.first([os.path.join(d, f"lib{x[2:]}.so") for d in libdirs] + [self.library(x[2:]) or ""])
                self.need_file(found, f"lib{x[2:]}", f"{here} links -l{x[2:]}", "library")

    def need_file(self, path, what, why, kind):
        if path is None or not os.path.lexists(path):
            self.missing(what, why)
        else:
            self.add(path, why, kind)

    # ---- the project's own CMake and sources ------------------------------------------------------------------
    def walk(self, exts=None, names=None):
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            dirnames[:] = [d for d in dirnames if not (rel == "." and (d in SKIP_DIRS or d.startswith("build")))
                           and not d.startswith(".")]
            for f in filenames:
                if (names and f in names) or (exts and f.endswith(exts)):
                    yield os.path.join(dirpath, f)

    def project_cmake(self):
        for path in sorted(self.walk(exts=(".cmake",), names={"CMakeLists.txt"})):
            rel = os.path.relpath(path, self.root)
            for cmd, args, line in cmake_finds(path):
                why = f"{rel}:{line} {cmd}({' '.join(args)})"
                if not args:
                    continue
                if cmd in ("find_package", "find_dependency"):
                    self.find_package(args[0], f"{rel}:{line}")
                elif cmd in ("pkg_check_modules", "pkg_search_module"):
                    self.pkg_check(args, why)
                else:
                    var, rest = args[0], args[1:]
                    names = [a for a in (rest[rest.index("NAMES") + 1:] if "NAMES" in rest else rest[:1])
                             if a not in KEYWORDS]
                    names = names[:next((i for i, a in enumerate(names) if a in KEYWORDS), len(names))]
                    if var in OPTIONAL or any(n in OPTIONAL for n in names):
                        self.notes.append(f"{why}: optional ({OPTIONAL.get(var) or OPTIONAL.get(names[0])})")
                        continue
                    if not names:
                        continue
                    resolve = {"find_path": self.header, "find_file": self.header, "find_library": self.library,
                               "find_program": self.program}[cmd]
                    found = self.first(filter(None, (resolve(n) for n in names)))
                    kind = {"find_path": "header", "find_file": "header", "find_library": "library",
                            "find_program": "program"}[cmd]
                    target = found
                    if found and cmd == "find_path":
                        target = next(p for p in (resolve(n) for n in names) if p)
                    self.need_file(target, " or ".join(names), why, kind)

    def source_headers(self):
        """Without a build: the <...> headers ROOT's sources include that /usr/include holds."""
        for path in self.walk(exts=(".cc", ".h", ".cpp", ".hpp")):
            rel = os.path.relpath(path, self.root)
            for i, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s*<([^>]+)>', line)
                if m:
                    found = self.header(m.group(1))
                    if found and not self.exempt(found):
                        self.add(found, f"{rel}:{i} #include <{m.group(1)}>", "header")

    # ---- what a configured build recorded ---------------------------------------------------------------------
    def build_records(self):
        cache = os.path.join(self.build, "CMakeCache.txt")
        if not os.path.exists(cache):
            sys.exit(f"check_gpu_kit: no {cache}: configure the build first (scripts/setup.sh)")
        for line in open(cache, errors="replace"):
            m = re.match(r"^([^/#][^:]*):(FILEPATH|PATH)=(/.*)$", line.rstrip("\n"))
            if not m:
                continue
            var, typ, value = m.groups()
            if var.startswith("CMAKE_") or var in OPTIONAL:
                continue
            if var in EXEMPT_VARS:
                self.notes.append(f"CMakeCache.txt: {var} is {EXEMPT_VARS[var]}")
                continue
            prefix = next((p for p in EXEMPT_VAR_PREFIXES if var.startswith(p)), None)
            if prefix:
                self.notes.append(f"CMakeCache.txt: {var} ({value}) is {EXEMPT_VAR_PREFIXES[prefix]}")
                continue
            if var == "Torch_DIR" or var.endswith("_DIR") and "site-packages" in value:
                self.torch_prefixes.append(value.split("/share/cmake")[0].split("/lib/")[0])
            if self.exempt(value) or not os.path.exists(value):
                continue
            why = f"{os.path.relpath(cache, self.root) if cache.startswith(self.root) else cache}: {var}"
            if typ == "FILEPATH":
                self.add(value, why, "found")
            elif var.endswith("_DIR") and os.path.isdir(value):
                for f in sorted(glob.glob(os.path.join(value, "*.cmake"))):
                    self.add(f, why, "config")
        deps = self.read_deps()
        for path in deps:
            if path.startswith("/usr/") and not self.exempt(path):
                self.add(path, f"an #include of a compiled file (ninja -t deps)", "header")

    def read_deps(self):
        if self.deps_file:
            text = open(self.deps_file, errors="replace").read()
        else:
            if not os.path.exists(os.path.join(self.build, ".ninja_deps")):
                self.notes.append(f"{self.build} has no .ninja_deps (not a built Ninja build): headers from the "
                                  "sources' own #include lines instead")
                self.source_headers()
                return []
            r = subprocess.run([self.ninja, "-C", self.build, "-t", "deps"], capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                sys.exit(f"check_gpu_kit: {self.ninja} -t deps failed: {r.stderr[-500:]}")
            text = r.stdout
        return sorted({line.strip() for line in text.splitlines() if line.startswith((" ", "\t"))})

    def exempt(self, path):
        real = os.path.realpath(path)
        if any(path.startswith(p) or real.startswith(p) for p in EXEMPT_PREFIXES):
            return True
        if path.startswith(self.root.rstrip("/") + "/") or (self.build and path.startswith(self.build + "/")):
            return True
        if "/site-packages/" in path or any(path.startswith(t + "/") for t in self.torch_prefixes if t):
            return True
        return False

    # ---- packages ---------------------------------------------------------------------------------------------
    def owners(self, paths):
        """path -> set of Debian packages that ship it (dpkg -S; /usr-merged names tried both ways)."""
        out = {}
        variants = {}
        for p in paths:
            alt = p[4:] if p.startswith("/usr/") else "/usr" + p
            variants[p] = [p, alt, os.path.realpath(os.path.dirname(p)) + "/" + os.path.basename(p)]
        query = sorted({v for vs in variants.values() for v in vs})
        found = {}
        for i in range(0, len(query), 2000):
            r = subprocess.run(["dpkg-query", "-S"] + query[i:i + 2000], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if line.startswith("diversion "):
                    continue
                pkgs, _, path = line.partition(": ")
                found.setdefault(path, set()).update(x.strip().split(":")[0] for x in pkgs.split(","))
        for p, vs in variants.items():
            out[p] = set().union(*(found.get(v, set()) for v in vs))
        return out

    def pruned(self, path):
        for d in self.lists["pruned"]:
            if path == d or path.startswith(d.rstrip("/") + "/"):
                return f"under {d}, which gpu_pack.sh prunes"
        if path.endswith(".a"):
            import fnmatch
            if not any(fnmatch.fnmatch(os.path.basename(path), g) for g in self.lists["static_kept"]):
                return "a static archive, which gpu_pack.sh deletes (it keeps only " + \
                       ", ".join(self.lists["static_kept"]) + ")"
        return None

    def ffmpeg_file(self, pkgs):
        for p in pkgs:
            m = re.match(r"^lib(av\w+?|sw\w+?|postproc)(-dev|\d+)$", p)
            if m and m.group(1) in self.lists["ffmpeg"]:
                return True
        return False

    def check(self):
        """Sorts every needed file (and every file on the way from a link to its real file) by who provides it;
        fills self.failures, one line per missing package (with its first file and what needs it) and one per
        other problem."""
        chains = {}
        for n in self.needs:
            chain, p = [], n.path
            for _ in range(10):
                chain.append(p)
                if not os.path.islink(p) or self.exempt(p):
                    break
                t = os.readlink(p)
                p = os.path.normpath(t if t.startswith("/") else os.path.join(os.path.dirname(p), t))
                if not os.path.lexists(p):
                    chain.append(p)
                    break
            chains[n.path] = chain
        owners = self.owners({p for c in chains.values() for p in c if os.path.lexists(p)})
        kit, base = self.lists["kit"], self.lists["base"]
        verdicts = {}  # path -> (problems, how); a problem is (missing package or None, text)
        for path, chain in chains.items():
            problems, how = [], []
            for i, p in enumerate(chain):
                role = "" if i == 0 else f" (the file {chain[i - 1]} links to)"
                if not os.path.lexists(p):
                    problems.append((None, f"{p}{role} does not exist here"))
                    continue
                pkgs = owners.get(p, set())
                if pkgs & kit:
                    reason = self.pruned(p)
                    if reason:
                        problems.append((None, f"{p}{role} is in {', '.join(sorted(pkgs & kit))}, but {reason}"))
                    else:
                        how.append(f"{', '.join(sorted(pkgs & kit))} (kit)")
                elif pkgs & base:
                    how.append(f"{', '.join(sorted(pkgs & base))} (the machine"
                               f"{', brought along by gpu_pack.sh' if i else ''})")
                elif self.ffmpeg_file(pkgs):
                    how.append("the kit's FFmpeg build")
                elif self.exempt(p):
                    how.append("exempt")
                elif pkgs:
                    problems.append((", ".join(sorted(pkgs)), f"{p}{role}"))
                else:
                    problems.append((None, f"{p}{role} belongs to no Debian package: the kit cannot carry it"))
            verdicts[path] = (problems, how)
        missing = {}  # package -> [(file, why)]
        other = {}  # text -> [why]
        for n in self.needs:
            problems, how = verdicts[n.path]
            for pkg, text in problems:
                if pkg:
                    missing.setdefault(pkg, {}).setdefault(text, n.why)
                else:
                    other.setdefault(text, []).append(n.why)
            if not problems and self.verbose:
                print(f"  ok  {n.path}: {'; '.join(dict.fromkeys(how))}  <- {n.why}")
        for pkg, files in sorted(missing.items()):
            (first, why), more = next(iter(files.items())), len(files) - 1
            self.failures.append(f"Debian package {pkg} is neither in the kit nor on the GPU machine (add it, or a "
                                 f"package that depends on it, to DEV in scripts/gpu_pack.sh): {first} is in it, "
                                 f"needed by {why}" + (f"; and {more} more of its files" if more else ""))
        for text, whys in sorted(other.items()):
            self.failures.append(f"{text}; needed by {whys[0]}" + (f" (and {len(whys) - 1} more)" if len(whys) > 1
                                                                   else ""))
        return verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--build", default="", help="a configured (and built) build folder: its CMakeCache.txt and "
                    "ninja's header dependencies are checked too")
    ap.add_argument("--ninja", default="ninja")
    ap.add_argument("--deps", default="", help="`ninja -t deps` output saved in a file (instead of running ninja)")
    ap.add_argument("--verbose", action="store_true", help="print every file and where it comes from")
    a = ap.parse_args()
    root = os.path.realpath(a.root)
    build = os.path.realpath(a.build) if a.build else ""
    c = Checker(root, build, a.deps, a.ninja, a.verbose)
    c.load_lists()
    c.project_cmake()
    if build:
        c.build_records()
    elif a.deps:
        for path in c.read_deps():
            if path.startswith("/usr/") and not c.exempt(path):
                c.add(path, f"an #include of a compiled file (--deps)", "header")
    else:
        c.source_headers()
    verdicts = c.check()
    kinds = {}
    for n in c.needs:
        kinds.setdefault(n.kind, set()).add(n.path)
    summary = ", ".join(f"{len(v)} {k}" for k, v in sorted(kinds.items()))
    print(f"check_gpu_kit: {len(verdicts)} files the build looks for ({summary}) against scripts/gpu_pack.sh's "
          f"{len(c.lists['kit'])} kit packages and {len(c.lists['base'])} the machine is taken to have")
    for note in dict.fromkeys(c.notes):
        print(f"  exempt: {note}")
    if c.failures:
        print(f"check_gpu_kit: {len(c.failures)} not provided by the GPU kit:")
        for f in dict.fromkeys(c.failures):
            print(f"  FAIL {f}")
        return 1
    print("check_gpu_kit: every file the build looks for is in the kit, on the GPU machine, or exempt (above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
