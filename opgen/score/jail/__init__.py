"""The sandbox worker and its isolation mechanisms: a package of the standard library only.

A worker runs as a script (``python -I -S opgen/score/jail/__main__.py ARGS``, an empty environment):
neither opgen nor any directory of its caller is on its path. Its ``__main__`` adds one directory,
the one holding this package, after the standard library's, and imports the package as ``jail``;
inside opgen the same files are ``opgen.score.jail``. So every module here imports only the
standard library and its siblings (relative imports), never opgen (tests/test_isolation_registry.py
holds them to it).

- :mod:`.wire` — the wire format of ``opgen/score``: one framing (an 8-byte length, then ``marshal``)
  for every message between processes, the sandbox's typed messages, the child's frames and the caps;
- :mod:`.base` — the :class:`~.base.Mechanism` record and :class:`~.base.Jail`, the state the steps share;
- one module per isolation mechanism (its description, its risk and the code that applies it):
  :mod:`.uid_drop`, :mod:`.userns`, :mod:`.pidns`, :mod:`.netns`, :mod:`.ipcns`, :mod:`.utsns`,
  :mod:`.mountns`, :mod:`.chroot`, :mod:`.worktmpfs`, :mod:`.seccomp` (with :mod:`.bpf`, the filter's
  assembler and system-call tables), :mod:`.nondumpable`, :mod:`.zygote`, :mod:`.freshpidns`,
  :mod:`.imports`, :mod:`.hiddenclasses`, :mod:`.rlimits`;
- :mod:`.steps` — the registry and the short ordered lists of steps the worker runs (nsjail's ``contain.cc``);
- :mod:`.child` — the child: hostile code runs there; :mod:`.worker` — the worker's request loop and start.
"""
