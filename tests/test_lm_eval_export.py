"""`opgen export lm-eval`: task files per build whose metric is `opgen score`'s grade.

Without lm-eval installed the files are checked against its documented task format (YAML keys,
the `!function` hooks, parquet data files); with it (the trl group's environment) lm-eval's own
TaskManager loads them and builds the documents.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml
from integration_fixtures import build, rows_of, scored_rows


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lmeval")
    out = build(tmp)
    tasks = tmp / "tasks"
    res = subprocess.run([sys.executable, "-m", "opgen", "export", "lm-eval", str(out), str(tasks)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = rows_of(out, "test")
    responses, scores = scored_rows(tmp, out, rows, "test", "test")
    return tasks, rows, responses, scores


def test_one_task_per_split_in_lm_evals_format(exported):
    tasks, rows, _, _ = exported
    assert sorted(p.name for p in tasks.iterdir()) == ["opgen.yaml", "opgen_test.yaml", "opgen_train.yaml",
                                                       "utils.py"]
    task = yaml.load((tasks / "opgen_test.yaml").read_text(), Loader=_Loader)
    assert task["output_type"] == "generate_until" and task["dataset_path"] == "parquet"
    assert task["process_results"] == ("function", "utils.process_results")
    assert task["doc_to_text"] == ("function", "utils.doc_to_text")
    files = task["dataset_kwargs"]["data_files"]["test"]
    assert [r for f in files for r in pq.read_table(f).to_pylist()] == rows
    group = yaml.load((tasks / "opgen.yaml").read_text(), Loader=_Loader)
    assert group["task"] == ["opgen_train", "opgen_test"] or sorted(group["task"]) == ["opgen_test", "opgen_train"]


def test_the_metric_is_opgen_scores_grade(exported):
    tasks, rows, responses, scores = exported
    spec = importlib.util.spec_from_file_location("opgen_lm_eval_utils", tasks / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    got = [utils.process_results(r, [x]) for r, x in zip(rows, responses)]
    assert [g["score"] for g in got] == scores
    assert utils.doc_to_text(rows[0]) == rows[0]["prompt"][0]["content"]


def test_a_directory_that_is_not_a_build_is_refused(tmp_path):
    res = subprocess.run([sys.executable, "-m", "opgen", "export", "lm-eval", str(tmp_path), str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "no manifest" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.trl
def test_lm_evals_task_manager_loads_the_tasks(exported):
    import tiny_model as tm

    tm.require("lm_eval")
    from lm_eval.tasks import TaskManager, get_task_dict

    tasks, rows, responses, scores = exported
    manager = TaskManager(include_path=str(tasks))
    task = get_task_dict(["opgen_test"], manager)["opgen_test"]
    docs = list(task.test_docs())
    assert len(docs) == len(rows)
    assert [task.process_results(d, [x])["score"] for d, x in zip(docs, responses)] == scores
    assert task.doc_to_text(docs[0]) == rows[0]["prompt"][0]["content"]
    # the !function aggregation of the metric return x cannot score on is lm-eval's own callable
    items = [task.process_results(d, [x])["acc_non_degenerate"] for d, x in zip(docs, responses)]
    assert task.aggregation()["acc_non_degenerate"](items) == pytest.approx(
        sum(a for a, counted in items if counted) / sum(counted for _, counted in items))
