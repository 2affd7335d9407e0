#!/usr/bin/env python3
"""Checks that every #include of project code points down a floor.

Baton is built in floors: core/ (itself floors, util at the bottom, the single-process trainer at the top) knows no
RPC, no socket and no process; rpc/ and collective/ (c10d groups) sit on core; the stage worker, the encoder worker and the stage driver on rpc; the
coordinator on the stage driver; the job service on the coordinator; the client (`baton`, no libtorch: core/util,
core/metrics, rpc, ui) beside the coordinator, never on either; the model tools (`baton-tools`) on the client and the
stage driver. LEVELS below names the floors
bottom first, and ALLOWED says, pair by pair and with the reason, which folder's code may include which folder's
headers. A file may always include its own folder. Test code may include more (allowed_for_tests); tests/ and
bench/ may include anything. FORBIDDEN_HEADERS names the few headers of a lower floor a folder must still not include
(the stage driver: no training job).

Every `#include "..."` of every .cc/.h under the project folders is read; one that names a folder its file may not
include is printed as file:line and the run fails. The table itself must point down LEVELS' order, so it cannot
hold a cycle, and a folder that is in neither (a new core/ floor, a new top-level folder in CMakeLists.txt) fails
until it is placed.

Usage: check_layering.py [ROOT]   (ROOT: the source tree, default this script's repository)
"""

import pathlib
import re
import sys

# Floors, bottom first; folders on one floor are siblings (neither includes the other). core/<x> is a floor of its own;
# "core" in ALLOWED stands for every core floor except core/testing.
LEVELS = [
    ["proto", "core/util"],  # proto: generated protobuf/gRPC code ("baton/v1/...", "grpc/health/v1/...")
    ["core/metrics"],  # the last floor without libtorch (util and metrics: what `baton` and the browser view use)
    ["core/tensor", "core/device", "core/keys", "core/image"],
    ["core/quant", "core/video", "core/data", "core/vae"],
    ["core/lora", "core/text"],
    ["core/model"],
    ["core/pipeline", "core/encode"],
    ["core/train"],
    ["core/sample"],
    ["core/train_local"],
    ["core/testing"],
    ["rpc", "collective"],
    ["wire"],
    ["stage_worker", "encoder_worker", "stage_driver", "ui"],
    ["coordinator", "client"],
    ["job_service", "tools"],
    ["tests", "bench"],
]
FLOORS = [f for level in LEVELS for f in level]
LEVEL = {f: i for i, level in enumerate(LEVELS) for f in level}
CORE_FLOORS = [f for f in FLOORS if f.startswith("core/")]
TOP_FOLDERS = sorted({f.split("/")[0] for f in FLOORS})

# (folder, may include, why). "core/*" as the folder: every core floor.
ALLOWED = [
    ("core/*", "core/util", "status, files, logging, flags, hashing and seeds: the ground floor"),
    # Tensors on disk and the devices they live on.
    ("core/tensor", "core/util", "safetensors files are read and written through files.h"),
    ("core/device", "core/metrics", "the device's memory (CUDA allocator, pinned host pool) is reported to Prometheus"),
    ("core/video", "core/tensor", "decoding is checked through TorchCall (core/tensor/torch_call.h)"),
    # 8-bit weights: formats, quantize/dequantize, the quantized matmul. Beneath LoRA, whose Linear stores them.
    ("core/quant", "core/tensor", "stored 8-bit layouts are read from safetensors files"),
    # LoRA adapters and the Linear that carries them.
    ("core/lora", "core/quant", "LoraLinear's frozen weight may be stored in 8 bits"),
    ("core/lora", "core/tensor", "LoRA files are safetensors"),
    ("core/lora", "core/keys", "BFL/ComfyUI LoRA files name modules as the BFL checkpoint does"),
    # Media and the encoders' inputs.
    ("core/video", "core/image", "video frames are images"),
    ("core/data", "core/tensor", "cache records are safetensors"),
    ("core/text", "core/tensor", "text encoder checkpoints are safetensors"),
    ("core/text", "core/quant", "the text encoders' Linear weights may be held in 8 bits (encoder_worker --quantize)"),
    ("core/vae", "core/tensor", "VAE checkpoints are safetensors"),
    # The transformers: FLUX.2 and Wan, as stages and shells behind ModelFamily.
    ("core/model", "core/lora", "every block Linear is a LoraLinear"),
    ("core/model", "core/quant", "a stage's block weights may be loaded as 8-bit"),
    ("core/model", "core/tensor", "checkpoints are safetensors"),
    ("core/model", "core/keys", "BFL and original-Wan checkpoints are read by their own names"),
    ("core/model", "core/device", "block swap copies frozen weights in through the stage's DeviceTransfer"),
    # Pipeline planning: partition, schedule, chunks, memory model.
    ("core/pipeline", "core/model", "plans are made from a model's config and ModelFamily's block figures"),
    ("core/pipeline", "core/quant", "8-bit weights change a stage's bytes"),
    ("core/pipeline", "core/lora", "each adapter type's parameter count sizes a stage's adapters and their state"),
    # Encoders: prompts and images to the cached conditioning a job trains on.
    ("core/encode", "core/text", "prompts go through the text encoders"),
    ("core/encode", "core/vae", "images and clips go through the VAE encoders"),
    ("core/encode", "core/image", "it encodes images"),
    ("core/encode", "core/tensor", "the CLIP image encoder's checkpoint is checked and loaded through checked_load"),
    ("core/encode", "core/model", "the tiny pipelines write a random transformer beside the encoders"),
    # Training: jobs, batches, the optimizer, one step.
    ("core/train", "core/model", "a step runs a ModelFamily's stage"),
    ("core/train", "core/lora", "jobs name a LoraSpec; steps read and assign adapters"),
    ("core/train", "core/data", "batches are drawn from the cache"),
    ("core/train", "core/pipeline", "a job says its stages' memory budgets and schedule"),
    ("core/train", "core/quant", "a job says its frozen weights' storage"),
    ("core/train", "core/device", "a job's model loads on a device"),
    ("core/train", "core/tensor", "LoRA and state files are safetensors"),
    # Sampling and validation: what a job renders and measures while it trains.
    ("core/sample", "core/train", "samples and validation follow the job and draw its batches"),
    ("core/sample", "core/model", "a denoiser runs a ModelFamily"),
    ("core/sample", "core/encode", "sample prompts are encoded"),
    ("core/sample", "core/vae", "samples are decoded"),
    ("core/sample", "core/image", "samples are written as images"),
    ("core/sample", "core/video", "Wan samples are written as MP4 videos"),
    ("core/sample", "core/data", "validation reads the validation cache"),
    ("core/sample", "core/tensor", "prompt embeddings are kept as safetensors"),
    # `baton train-local`: training with its samples and validation in one process, the pipeline's reference.
    ("core/train_local", "core/train", "it runs the training steps"),
    ("core/train_local", "core/sample", "it renders the job's samples and validation"),
    ("core/train_local", "core/model", "it loads the whole model"),
    ("core/train_local", "core/lora", "it attaches and saves the LoRA"),
    ("core/train_local", "core/data", "it opens the cache"),
    ("core/train_local", "core/device", "it sets deterministic kernels"),
    # Test support: tiny models, paths, subprocesses. Only test code includes it (allowed_for_tests).
    ("core/testing", "core", "fixtures build whole models"),
    # Processes and the wire.
    ("rpc", "proto", "the services and messages are generated from proto/"),
    ("rpc", "core/util", "status, files and logging"),
    ("rpc", "core/metrics", "every RPC is counted (rpc_metrics.h)"),
    ("wire", "rpc", "tensors travel in gRPC messages"),
    ("wire", "proto", "it fills stage.proto's and tensor.proto's messages"),
    ("wire", "core", "it encodes tensors and a job's optimizer settings"),
    ("collective", "core/util", "status, logging and the clock"),
    ("stage_worker", "rpc", "it serves StageService and sends to its peer"),
    ("stage_worker", "wire", "activations and gradients come and go as tensors on the wire"),
    ("stage_worker", "collective", "its stage-local optimizer sums gradients over a peer group"),
    ("stage_worker", "proto", "it speaks stage.proto"),
    ("stage_worker", "core", "it runs a stage of the model"),
    ("encoder_worker", "rpc", "it serves EncoderService"),
    ("encoder_worker", "wire", "latents and embeddings go back as tensors on the wire"),
    ("encoder_worker", "proto", "it speaks encoder.proto"),
    ("encoder_worker", "core", "it encodes with core/encode"),
    ("stage_driver", "rpc", "it is the stage workers' client"),
    ("stage_driver", "wire", "it sends activations and reads back adapters"),
    ("coordinator", "collective", "the replicas' exchange serves the peer groups' rendezvous store"),
    ("stage_driver", "proto", "it speaks stage.proto"),
    ("stage_driver", "core", "it plans and drives a model's stages"),
    ("coordinator", "stage_driver", "a run drives its stage workers through it"),
    ("coordinator", "rpc", "it serves JobService and talks to encoder workers"),
    ("coordinator", "wire", "encoded samples and LoRA states arrive as tensors on the wire"),
    ("coordinator", "proto", "it speaks job_service.proto and stage.proto"),
    ("coordinator", "core", "it trains: jobs, plans, optimizer, samples"),
    ("job_service", "coordinator", "it runs each job it admits as a training run"),
    ("job_service", "stage_driver", "its jobs share stage workers (SharedStageWorkers) by one frozen-weights key"),
    ("job_service", "rpc", "it serves JobService"),
    ("job_service", "proto", "it speaks job_service.proto"),
    ("job_service", "core", "it reads jobs, plans them, reads their logs and checkpoints, and converts a LoRA's naming"),
    ("client", "rpc", "it calls JobService and the workers' health"),
    ("client", "proto", "it speaks job_service.proto"),
    ("client", "core/util", "files, status, flags and the job file's size limit"),
    ("client", "core/metrics", "--version says the build's version"),
    ("client", "ui", "`baton ui` serves the browser view; watch says states and durations as the view does"),
    ("tools", "client", "the model tools are `baton` commands: its flags parser and Command"),
    ("tools", "stage_driver", "`baton sample --stages` drives stage workers itself"),
    ("tools", "rpc", "it starts and calls local stage workers"),
    ("tools", "wire", "`baton sample --stages` sends tensors to its stage workers"),
    ("tools", "proto", "it speaks stage.proto"),
    ("tools", "core", "the model tools run core directly"),
    ("ui", "rpc", "it calls JobService with the signed-in user's token"),
    ("ui", "proto", "it speaks job_service.proto"),
    ("ui", "core/util", "files, status, logging, hashing and civetweb's thread stacks"),
]

# Headers a folder may not include although their floor is beneath it: (folder, header, why).
FORBIDDEN_HEADERS = [
    ("stage_driver", "core/train/job.h",
     "the stage driver knows pipelines (stage_driver/pipeline_spec.h), not training jobs (issue 36)"),
]


def allowed_table():
    """{folder: {target: reason}}, with "core/*" and "core" expanded."""
    table = {f: {} for f in FLOORS}
    for folder, target, reason in ALLOWED:
        folders = CORE_FLOORS if folder == "core/*" else [folder]
        targets = [t for t in CORE_FLOORS if t != "core/testing"] if target == "core" else [target]
        for f in folders:
            for t in targets:
                if t != f:
                    table[f][t] = reason
    return table


def check_table():
    """Errors in the table itself: unknown folders, a pair that does not point down, a missing reason."""
    errors = []
    for folder, target, reason in ALLOWED:
        for name in (folder, target):
            if name not in FLOORS and name not in ("core/*", "core"):
                errors.append(f"ALLOWED names {name!r}, which is not in LEVELS")
        if not reason.strip():
            errors.append(f"ALLOWED ({folder}, {target}) has no reason")
    for folder, targets in allowed_table().items():
        for target in targets:
            if folder in LEVEL and target in LEVEL and LEVEL[target] >= LEVEL[folder]:
                errors.append(f"ALLOWED lets {folder} include {target}, which is not beneath it in LEVELS")
    return errors


FLOOR_LIBRARY = re.compile(r"^\s*baton_floor\((\w+)([^)]*)\)", re.M)


def check_floor_links(root):
    """core/CMakeLists.txt builds each floor as baton_core_<floor> and links the floors it names: each must be one the
    table lets that floor include, so the link order and the include order are one rule."""
    cmake = root / "core" / "CMakeLists.txt"
    if not cmake.is_file():
        return []
    table = allowed_table()
    problems = []
    for name, deps in FLOOR_LIBRARY.findall(cmake.read_text(encoding="utf-8")):
        floor = "core/" + name
        if floor not in FLOORS:
            problems.append(f"core/CMakeLists.txt: baton_floor({name}): {floor}/ is not in LEVELS: place it")
            continue
        for dep in re.findall(r"baton_core_(\w+)", deps):
            if "core/" + dep not in table[floor]:
                problems.append(f"core/CMakeLists.txt: baton_core_{name} links baton_core_{dep}, "
                                f"but {floor} may not include core/{dep}")
    return problems


def is_test_file(rel):
    name = rel.name
    return name.endswith(("_test.cc", "_test.h", "_cudatest.cc")) or rel.parts[0] in ("tests", "bench")


def folder_of(rel_parts, proto_roots):
    """The floor a path (as parts) belongs to; None for a path outside the project (a third-party header)."""
    if not rel_parts:
        return None
    head = rel_parts[0]
    if head in proto_roots:
        return "proto"
    if head == "core":
        return "core/" + rel_parts[1] if len(rel_parts) > 2 else "core"  # "core": core/pch.h, system headers only
    if head in TOP_FOLDERS:
        return head
    return None


def allowed_for_tests(folder, table):
    """Test code in `folder`: what the folder's code may include, core/testing, and in core/ any core floor (a floor's
    tests run in baton_core_tests, with fixtures that build whole models). tests/ and bench/: anything."""
    if folder in ("tests", "bench"):
        return set(FLOORS)
    allowed = set(table.get(folder, {})) | {"core/testing"}
    if folder.startswith("core/"):
        allowed |= set(CORE_FLOORS)
    return allowed


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def check_tree(root):
    """(violations, files checked, includes checked)."""
    table = allowed_table()
    proto_roots = {p.name for p in (root / "proto").iterdir() if p.is_dir()} if (root / "proto").is_dir() else set()
    problems = []
    # A top-level folder the build knows but the table does not.
    cmake = root / "CMakeLists.txt"
    if cmake.is_file():
        for sub in re.findall(r"^\s*add_subdirectory\((\w+)\)", cmake.read_text(encoding="utf-8"), re.M):
            if sub not in TOP_FOLDERS:
                problems.append(f"CMakeLists.txt: add_subdirectory({sub}): {sub}/ is not in LEVELS "
                                "(scripts/check_layering.py): place it")
    files = includes = 0
    for top in TOP_FOLDERS:
        if top == "proto" or not (root / top).is_dir():
            continue
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".cc", ".h") or not path.is_file():
                continue
            rel = path.relative_to(root)
            folder = folder_of(rel.parts, proto_roots)
            if folder not in FLOORS and folder != "core":
                problems.append(f"{rel}: {folder}/ is not in LEVELS (scripts/check_layering.py): place it")
                continue
            files += 1
            test = is_test_file(rel)
            allowed = allowed_for_tests(folder, table) if test else set(table.get(folder, {}))
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = folder_of(pathlib.PurePosixPath(m.group(1)).parts, proto_roots)
                if target is None:
                    continue
                includes += 1
                for banned_folder, header, why in FORBIDDEN_HEADERS:
                    if folder == banned_folder and m.group(1) == header:
                        problems.append(f"{rel}:{number}: includes {header}: {why}")
                if target == folder:
                    continue
                if target not in FLOORS:
                    problems.append(f"{rel}:{number}: includes {m.group(1)}: {target}/ is not in LEVELS")
                elif target not in allowed:
                    if target == "core/testing":
                        why = "only test code includes core/testing"
                    else:
                        why = f"{folder} may not include {target}"
                        if not test:
                            may = ", ".join(sorted(t for t in table.get(folder, {}) if t != "core/util")) or "nothing"
                            why += f" (it may include core/util and: {may})"
                    problems.append(f"{rel}:{number}: includes {m.group(1)}: {why}")
    return problems, files, includes


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1]) if len(argv) == 2 else pathlib.Path(__file__).resolve().parent.parent
    problems = check_table()
    tree_problems, files, includes = check_tree(root)
    problems += tree_problems + check_floor_links(root)
    if problems:
        print(f"check_layering: {len(problems)} include(s) or table entries point the wrong way:")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"check_layering: {includes} project includes in {files} files point down the floors "
          f"{' < '.join('|'.join(level) for level in LEVELS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
