"""Work that never ends (issue 36 item 5): a split whose options no draw can satisfy is refused up
front where that can be computed (trees too large to draw at a depth, an output cap below every
input), and otherwise every row's search gives up after a bounded number of attempts, with a named
error (opgen.generate.Unsatisfiable) that names the split, the option and what was tried — in the
CLI (exit 1, nothing written, no lock), in the API (create_dataset, build_splits) and so wherever
rows are built in process (opgen serve's /tasks calls create_dataset)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import opgen
from opgen.generate import GeneratorError, Unsatisfiable


def _recipe(options: dict, generator: str = "trees") -> dict:
    return {"name": "impossible", "seed": 0, "defaults": {"role": "eval"},
            "splits": {"t": {"generator": generator, "options": options}}}


def _write(tmp_path: Path, options: dict, generator: str = "trees") -> Path:
    import yaml

    path = tmp_path / "impossible.yaml"
    path.write_text(yaml.safe_dump(_recipe(options, generator)))
    return path


def _build(runner, cli, recipe: Path, out: Path):
    res = runner.invoke(cli, ["build", str(recipe), "--out", str(out), "--no-progress"])
    assert "Traceback" not in res.output and (res.exception is None or isinstance(res.exception, SystemExit))
    return res


@pytest.mark.slow
def test_python_m_opgen_exits_1_with_the_message(tmp_path):
    recipe = _write(tmp_path, {"ops": "heldout", "depths": [99], "per_depth": 4})
    res = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"Error: {recipe}: splits.t.options.depths: trees of depth 99"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["impossible.yaml"]


def test_the_error_is_its_own_class_under_the_generator_error():
    assert issubclass(Unsatisfiable, GeneratorError) and issubclass(Unsatisfiable, ValueError)
    assert Unsatisfiable.exit_code == 1


def test_an_unreachable_depth_is_refused_up_front_naming_the_deepest_that_is_not(runner, cli, tmp_path):
    recipe = _write(tmp_path, {"ops": "heldout", "depths": [99], "per_depth": 4})
    res = _build(runner, cli, recipe, tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert (f"{recipe}: splits.t.options.depths: trees of depth 99 with p_binary 0.2 have about 4.14e+08 nodes "
            f"on average, past max_nodes (1,000,000)") in res.output
    assert "the deepest depth whose trees stay under it is 65" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["impossible.yaml"]  # no output, no lock
    # the same in the API, and before any row is drawn
    with pytest.raises(Unsatisfiable, match="depth 99 with p_binary 0.2"):
        opgen.create_dataset(_recipe({"ops": "heldout", "depths": [99], "per_depth": 4}), "t")
    with pytest.raises(Unsatisfiable, match="depth 99 with p_binary 0.2"):
        opgen.build_splits(_recipe({"ops": "heldout", "depths": [1, 99], "per_depth": 4}))


def test_a_depth_within_the_bound_is_built_and_max_nodes_moves_the_bound():
    ds = opgen.create_dataset(_recipe({"ops": "heldout", "depths": [3], "per_depth": 2}), "t")
    assert len(ds) == 2
    with pytest.raises(Unsatisfiable, match=r"past max_nodes \(5\).*deepest depth whose trees stay under it is 2"):
        opgen.create_dataset(_recipe({"ops": "heldout", "depths": [3], "per_depth": 2, "max_nodes": 5}), "t")


def test_a_tree_that_grows_past_max_nodes_while_drawn_ends_the_search(tmp_path):
    # depth 12 with p_binary 0.5: 388 nodes on average, so not refused up front; most draws pass 400
    options = {"ops": "heldout", "depths": [12], "per_depth": 3, "p_binary": 0.5, "max_nodes": 400}
    with pytest.raises(Unsatisfiable) as err:
        opgen.create_dataset(_recipe(options), "t")
    msg = str(err.value)
    assert "splits.t.options: row " in msg and ", depth 12: a candidate tree grew past 400 nodes" in msg
    assert "raise max_nodes" in msg


def test_a_row_whose_search_ends_names_the_depth_the_attempts_and_the_option(runner, cli, tmp_path):
    recipe = _write(tmp_path, {"ops": "heldout", "depths": [40], "per_depth": 2, "max_attempts": 20})
    res = _build(runner, cli, recipe, tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert f"{recipe}: splits.t.options: row 0, depth 40: no candidate met the constraints in 20 attempts " \
           f"(max_attempts); rejections among its first 20 candidates: " in res.output
    assert "output_too_long: 20" in res.output and "loosen max_output_chars, or ask for fewer rows" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["impossible.yaml"]
    with pytest.raises(Unsatisfiable, match="row 0, depth 40: no candidate met the constraints in 20 attempts"):
        opgen.create_dataset(_recipe({"ops": "heldout", "depths": [40], "per_depth": 2, "max_attempts": 20}), "t")


@pytest.mark.parametrize("generator, options", [
    ("trees", {"ops": "heldout", "depths": [1], "per_depth": 2, "max_output_chars": 2}),
    ("chains", {"ops": "heldout", "depths": [1], "per_depth": 2, "max_output_chars": 2}),
    ("atomic", {"ops": "heldout", "per_op": 1, "max_output_chars": 2}),
])
def test_an_output_cap_below_every_input_is_refused_up_front(runner, cli, tmp_path, generator, options):
    recipe = _write(tmp_path, options, generator)
    res = _build(runner, cli, recipe, tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert (f"{recipe}: splits.t.options.max_output_chars: 2 is below every input (input_len [3, 10]): each "
            f"candidate's input alone is over the cap") in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["impossible.yaml"]
    with pytest.raises(Unsatisfiable, match="max_output_chars: 2 is below every input"):
        opgen.create_dataset(_recipe(options, generator), "t")


def test_the_message_counts_the_failing_rows_own_rejections(tmp_path):
    """Rows of depth 1 reject many candidates (no_x, no_operator_call) on the way; the message counts
    only the failing row's, so it names the option that row runs into."""
    options = {"ops": "heldout", "depths": [1, 40], "per_depth": 200, "max_attempts": 20}
    with pytest.raises(Unsatisfiable) as err:
        opgen.create_dataset(_recipe(options), "t")
    msg = str(err.value)
    assert "row 200, depth 40" in msg and "output_too_long: 20" in msg
    assert "no_x" not in msg and "require_x" not in msg and "loosen max_output_chars," in msg
