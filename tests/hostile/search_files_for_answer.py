# expect: wrong_output exception
import os


def main_solution(x):
    found = []
    for root, _dirs, files in os.walk("/"):
        found += [os.path.join(root, f) for f in files if f.endswith((".parquet", ".jsonl", ".json"))]
    return "|".join(found)
