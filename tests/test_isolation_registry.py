"""Isolation mechanisms are one registry (opgen/score/jail/steps.py) of modules, each holding its
description, its risk and the code that applies it; the worker runs their steps from the ordered
lists there; the scorer's level, missing list and warning read the descriptions.

A new mechanism is one module of the jail package and its lines in steps.py: this file ties the
two (every module that describes a mechanism is registered, every step of every mechanism runs in
exactly one stage, every mechanism is reported by a real worker, in the registry's order).
"""

from __future__ import annotations

import ast
import itertools
import sys
from pathlib import Path

import pytest

from opgen.score import sandbox as S
from opgen.score.jail import base, steps

JAIL = Path(steps.__file__).parent


def test_every_mechanism_module_is_registered_and_every_step_runs_once():
    modules = {p.stem for p in JAIL.glob("*.py") if "MECHANISM = Mechanism(" in p.read_text(encoding="utf-8")}
    registered = {m.steps[0].__module__.rpartition(".")[2] for m in steps.MECHANISMS}
    assert modules == registered
    for m in steps.MECHANISMS:
        home = {step.__module__ for step in m.steps}
        assert len(home) == 1, (m.name, home)  # its code lives in its own module
        assert sys.modules[home.pop()].MECHANISM is m
        for step in m.steps:
            assert sum(step in stage for stage in steps.STAGES.values()) == 1, (m.name, step.__name__)
    listed = [step for stage in steps.STAGES.values() for step in stage]
    assert len(listed) == sum(len(m.steps) for m in steps.MECHANISMS)


def test_the_descriptions_and_the_scorer_read_one_registry():
    assert tuple(S.ISOLATION) == S.MECHANISMS == tuple(m.name for m in steps.MECHANISMS)
    for name, spec in S.ISOLATION.items():
        assert spec.name == name
        assert spec.need is None or spec.risk, name
    assert S.FULL_NEEDS == ("uid", "pidns", "netns", "ipcns", "utsns", "mountns", "chroot", "worktmpfs", "seccomp",
                            "zygote", "freshpidns", "imports")
    assert set(S.RISKS) == set(S.FULL_NEEDS)


def test_a_mechanism_cannot_be_described_without_its_code():
    with pytest.raises(TypeError, match="steps"):
        base.Mechanism("landlock", "landlock", "model code can open any path the uid can")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="the code that applies it"):
        base.Mechanism("landlock", "landlock", "model code can open any path the uid can", steps=())
    with pytest.raises(ValueError, match="states its risk"):
        base.Mechanism("nothing", "nothing", steps=(print,))
    m = base.Mechanism("landlock", None, steps=(print,))
    with pytest.raises(AttributeError, match="frozen"):
        m.need = "landlock"  # type: ignore[misc]
    # and no runtime registration: a mechanism the scorer registered would never run in a worker
    assert not hasattr(S, "register_mechanism") and not hasattr(steps, "register_mechanism")


def test_the_jail_imports_only_the_standard_library_and_itself():
    """The worker runs as a script (python -I -S): nothing of opgen, no third-party module."""
    allowed = set(sys.stdlib_module_names)
    for path in sorted(JAIL.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # a sibling
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                assert top in allowed or (path.name == "__main__.py" and top == "jail"), (path.name, name)


def test_a_worker_reports_every_mechanism_in_the_registrys_order():
    with pytest.warns(S.WeakSandboxWarning), S.Sandbox(workers=1, namespaces=False, allow_weak_sandbox=True) as box:
        reported = [k for k in box.isolation if k in S.ISOLATION]
        assert reported == list(S.MECHANISMS)
        assert box.isolation["rlimits"] is True and box.isolation["limits"]["RLIMIT_CORE"] == [0, 0]


def test_weak_message_works_for_every_subset_of_the_needed_mechanisms():
    needed = [m.name for m in S.ISOLATION.values() if m.need is not None]
    # every subset of the needed mechanisms (2^13 of them would be slow: all subsets of the first
    # 6, with the rest all on or all off, and each single one left out)
    head, tail = needed[:6], needed[6:]
    cases = [set(c) | rest for n in range(len(head) + 1) for c in itertools.combinations(head, n)
             for rest in (set(), set(tail))]
    cases += [set(needed) - {k} for k in needed]
    for on in cases:
        iso = {k: True for k in on}
        lack = S.missing(iso)
        if not lack:
            assert S.isolation_level(iso) == "full"
            continue
        text = S.weak_message(iso)
        assert f"(missing: {', '.join(lack)})" in text
        for k in lack:
            assert S.RISKS[k] in text


def test_the_texts_are_unchanged():
    iso = {k: True for k in ("userns", "pidns", "netns", "ipcns", "utsns", "worktmpfs", "seccomp", "zygote",
                             "freshpidns", "imports", "rlimits", "nondumpable")}
    assert S.weak_message(iso) == (
        "sandbox isolation is partial(userns+pidns+netns+ipcns+utsns+worktmpfs+seccomp+zygote+freshpidns+imports), "
        "below 'full' (missing: mountns, chroot); unprotected then:\n"
        "  - without mountns: model code sees the machine's files: data and answer files, /proc of other "
        "processes, and opgen's own operators, which it can import to pass without defining any")
    assert S.isolation_level({"rlimits": True, "nondumpable": True}) == "rlimits"
    assert S.mechanisms({"hiddenclasses": True, "uid_drop": True, "rlimits": True}) == (
        "uid_drop", "hiddenclasses", "rlimits")
