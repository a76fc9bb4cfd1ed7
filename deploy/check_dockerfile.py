#!/usr/bin/env python3
"""A small Dockerfile linter for tpserve's multi-stage Dockerfile (no Docker needed).

    check_dockerfile.py [DOCKERFILE] [--target NAME ...] [--default NAME]

Checks: every stage is named (FROM ... AS name); each --target (default: cpu, cuda) is a
stage and the last stage is --default (cuda); each target stage runs as a non-root USER,
has an exec-form (JSON) ENTRYPOINT and a HEALTHCHECK; no ADD of a URL; no image without a
tag or with `latest` (global ARG defaults are substituted); every `apt-get install` uses
--no-install-recommends and the same RUN removes /var/lib/apt/lists; no model file (models/,
*.gguf, *.safetensors) is COPY'd or ADD'ed, and a COPY of the whole context has a
.dockerignore beside the Dockerfile that leaves models/ out. Prints one line per problem, FILE:LINE: message;
exits 0 when there is none, 1 otherwise.
"""
import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

_URL = re.compile(r"^(https?|ftp)://|^git@", re.IGNORECASE)
_MODEL = re.compile(r"(^|/)models(/|$)|\.gguf$|\.safetensors$", re.IGNORECASE)
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::?[-+][^}]*)?\}?")


@dataclass
class Instruction:
    line: int  # 1-based line of the instruction's first line
    keyword: str  # upper case
    args: str  # continuation lines joined, comments dropped


@dataclass
class Stage:
    line: int
    image: str  # as written
    name: str  # "" when unnamed
    instructions: list = field(default_factory=list)


def parse(text):
    """Returns (global instructions before the first FROM, stages)."""
    instructions = []
    escape = "\\"
    pending, start = [], 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not pending:
            directive = re.match(r"^#\s*escape\s*=\s*(\S)", line)
            if directive and not instructions:
                escape = directive.group(1)
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        elif line.lstrip().startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if line.endswith(escape):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(part.strip() for part in pending)
        pending = []
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), args.strip()))
    if pending:
        joined = " ".join(part.strip() for part in pending)
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), args.strip()))

    globals_, stages = [], []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--platform")]
            image = words[0] if words else ""
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else ""
            stages.append(Stage(ins.line, image, name))
        elif stages:
            stages[-1].instructions.append(ins)
        else:
            globals_.append(ins)
    return globals_, stages


def _global_args(globals_):
    values = {}
    for ins in globals_:
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            values[name.strip()] = default.strip().strip('"')
    return values


def _substitute(text, values):
    return _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _image_problem(image, earlier_stages):
    if image.lower() == "scratch" or image in earlier_stages:
        return None
    if "$" in image:
        return f"image {image} uses an ARG without a default"
    reference = image.split("@", 1)
    if len(reference) == 2:
        return None  # pinned by digest
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image} has no tag (that means latest): pin one"
    if last.rsplit(":", 1)[1].lower() == "latest":
        return f"image {image} uses the latest tag: pin a version"
    return None


def _json_array(args):
    try:
        value = json.loads(args)
    except ValueError:
        return None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


def _copy_sources(args):
    """COPY/ADD arguments -> (flags, sources); handles the JSON form."""
    array = _json_array(args)
    words = array if array is not None else args.split()
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1]


def _ignores_models(dockerignore):
    patterns = [l.strip().lstrip("/").rstrip("/") for l in dockerignore.splitlines()
                if l.strip() and not l.lstrip().startswith("#")]
    return any(p in ("models", "models/*", "models/**", "**/models") for p in patterns)


def check(text, targets=("cpu", "cuda"), default="cuda", filename="Dockerfile",
          dockerignore=None):
    """Returns a list of 'FILE:LINE: problem' strings (empty when the file passes).
    dockerignore: the text of the build context's .dockerignore ("" when there is none), to
    check that a `COPY .` of the whole context leaves models/ out; None skips that check."""
    problems = []

    def problem(line, message):
        problems.append(f"{filename}:{line}: {message}")

    globals_, stages = parse(text)
    if not stages:
        return [f"{filename}:1: no FROM instruction"]
    args = _global_args(globals_)
    names = []
    for stage in stages:
        if not stage.name:
            problem(stage.line, f"stage FROM {stage.image} has no name (FROM image AS name)")
        image = _substitute(stage.image, args)
        why = _image_problem(image, names)
        if why:
            problem(stage.line, why)
        names.append(stage.name)

    by_name = {s.name: s for s in stages if s.name}
    for target in targets:
        if target not in by_name:
            problem(1, f"no stage named {target} (docker build --target {target} would fail)")
    if default and stages[-1].name != default:
        problem(stages[-1].line,
                f"the last stage (the default target) is {stages[-1].name or 'unnamed'}, "
                f"not {default}")

    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword in ("ADD", "COPY"):
                flags, sources = _copy_sources(ins.args)
                from_stage = any(f.startswith("--from") for f in flags)
                for source in sources:
                    if ins.keyword == "ADD" and _URL.search(source):
                        problem(ins.line, f"ADD of a URL ({source}): download in a RUN and "
                                          "verify a checksum, or COPY")
                    if not from_stage and _MODEL.search(source.rstrip("/")):
                        problem(ins.line, f"{ins.keyword} of model files ({source}): mount the "
                                          "model at run time instead")
                    if (not from_stage and source in (".", "./") and dockerignore is not None
                            and not _ignores_models(dockerignore)):
                        problem(ins.line, f"{ins.keyword} {source} copies the whole context, "
                                          "and .dockerignore does not leave models/ out")
            if ins.keyword == "RUN" and re.search(r"\bapt(-get)?\s+(-\S+\s+)*install\b",
                                                   ins.args):
                if "--no-install-recommends" not in ins.args:
                    problem(ins.line, "apt-get install without --no-install-recommends")
                if not re.search(r"rm\s+-(rf|fr|r)\s+[^&;|]*/var/lib/apt/lists", ins.args):
                    problem(ins.line, "apt-get install without rm -rf /var/lib/apt/lists/* "
                                      "in the same RUN")

    for target in targets:
        stage = by_name.get(target)
        if stage is None:
            continue
        users = [i for i in stage.instructions if i.keyword == "USER"]
        if not users:
            problem(stage.line, f"stage {target} has no USER: it would run as root")
        else:
            user = users[-1].args.split(":", 1)[0].strip()
            if user in ("root", "0", ""):
                problem(users[-1].line, f"stage {target} runs as root (USER {users[-1].args})")
        entrypoints = [i for i in stage.instructions if i.keyword == "ENTRYPOINT"]
        if not entrypoints:
            problem(stage.line, f"stage {target} has no ENTRYPOINT")
        elif _json_array(entrypoints[-1].args) is None:
            problem(entrypoints[-1].line,
                    f"stage {target}: ENTRYPOINT is not in exec form (a JSON array): "
                    "signals would go to a shell, not to tpserve")
        healthchecks = [i for i in stage.instructions if i.keyword == "HEALTHCHECK"]
        if not healthchecks:
            problem(stage.line, f"stage {target} has no HEALTHCHECK")
        elif healthchecks[-1].args.strip().upper() == "NONE":
            problem(healthchecks[-1].line, f"stage {target}: HEALTHCHECK NONE")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dockerfile", nargs="?", default="Dockerfile")
    parser.add_argument("--target", action="append", dest="targets",
                        help="a stage that must build and run (repeatable; default cpu, cuda)")
    parser.add_argument("--default", default="cuda", help="the stage that must come last")
    args = parser.parse_args(argv)
    with open(args.dockerfile, encoding="utf-8") as f:
        text = f.read()
    ignore_path = os.path.join(os.path.dirname(os.path.abspath(args.dockerfile)),
                               ".dockerignore")
    dockerignore = ""
    if os.path.exists(ignore_path):
        with open(ignore_path, encoding="utf-8") as f:
            dockerignore = f.read()
    problems = check(text, tuple(args.targets or ("cpu", "cuda")), args.default,
                     args.dockerfile, dockerignore)
    for p in problems:
        print(p)
    if not problems:
        print(f"{args.dockerfile}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
