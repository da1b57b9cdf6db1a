"""Isolation mechanisms are one registry of frozen descriptions (opgen.score.sandbox.ISOLATION).

Every mechanism the worker can report is described; the level, the missing list and the warning
read the descriptions; a new mechanism is one register call (made here, touching no package file).
"""

from __future__ import annotations

import itertools

import pytest

from opgen.score import sandbox as S
from opgen.score import worker as W


def test_every_mechanism_the_worker_reports_is_described_in_its_order():
    assert tuple(S.ISOLATION) == W.MECHANISMS
    for name, spec in S.ISOLATION.items():
        assert spec.name == name
        assert spec.need is None or spec.risk, name
    assert S.FULL_NEEDS == ("uid", "pidns", "netns", "ipcns", "utsns", "mountns", "chroot", "worktmpfs", "seccomp",
                            "zygote", "freshpidns", "imports")
    assert set(S.RISKS) == set(S.FULL_NEEDS)


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
                             "freshpidns", "imports")}
    assert S.weak_message(iso) == (
        "sandbox isolation is partial(userns+pidns+netns+ipcns+utsns+worktmpfs+seccomp+zygote+freshpidns+imports), "
        "below 'full' (missing: mountns, chroot); unprotected then:\n"
        "  - without mountns: model code sees the machine's files: data and answer files, /proc of other "
        "processes, and opgen's own operators, which it can import to pass without defining any")


@pytest.fixture
def throwaway():
    spec = S.register_mechanism(S.Mechanism("landlock", "landlock", "model code can open any path the uid can"))
    try:
        yield spec
    finally:
        S.unregister_mechanism(spec.name)
    assert "landlock" not in S.ISOLATION and "landlock" not in S.RISKS


def test_a_new_mechanism_is_one_register_call(throwaway):
    everything = {k: True for k in W.MECHANISMS}
    assert S.missing(everything) == ("landlock",)
    assert S.isolation_level(everything).startswith("partial(")
    assert "  - without landlock: model code can open any path the uid can" in S.weak_message(everything)
    assert S.isolation_level({**everything, "landlock": True}) == "full"
    assert S.mechanisms({"landlock": True, "uid_drop": True}) == ("uid_drop", "landlock")


def test_a_description_must_be_complete():
    with pytest.raises(ValueError, match="states its risk"):
        S.register_mechanism(S.Mechanism("nothing", "nothing"))
    with pytest.raises(ValueError, match="another risk"):
        S.register_mechanism(S.Mechanism("setuid_drop", "uid", "different words"))
    with pytest.raises(ValueError, match="already registered"):
        S.register_mechanism(S.Mechanism("pidns", None))
    assert "nothing" not in S.ISOLATION and "setuid_drop" not in S.ISOLATION
