"""Fan-out benchmark, pyinfra side (bench/fanout.py runs it): upload the unit's two files, start
it, read its status back -- the job every tool does, as a pyinfra deploy."""

from pathlib import Path

from pyinfra.operations import files, server

JOB = Path(__file__).resolve().parents[2] / "job"
UNIT_DIR = "/srv/fleet-bench/unit"

files.put(name="run script", src=str(JOB / "run.sh"), dest=f"{UNIT_DIR}/run.sh", mode="755")
files.put(name="env file", src=str(JOB / "env"), dest=f"{UNIT_DIR}/env", mode="600")
server.shell(name="start", commands=[f"sh {UNIT_DIR}/run.sh"])
server.shell(
    name="status",
    commands=['p=$(cat /run/fleet-bench/unit.pid) && kill -0 "$p" && echo "running $p"'],
)
