# expect: exception
import subprocess


def main_solution(x):
    return subprocess.check_output(["sh", "-c", "cat /etc/passwd"]).decode()
