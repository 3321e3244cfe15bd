"""The GitHub workflows call the README's commands (so they cannot drift apart), and the
Makefile has every target they use. The workflows' schema is checked by `make lint`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def readme_commands() -> dict[str, str]:
    """The two commands of the README's first code block: {'book': 'make book', 'test': ...}."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## The two commands\s+```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    return {c.split()[-1]: c for c in commands}


def run_lines(workflow: dict) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job.get("steps", [])
            if "run" in step]


def test_readme_names_the_two_commands():
    assert readme_commands() == {"book": "make book", "test": "make test"}


def test_test_workflow_runs_readme_test_command_on_push_and_pull_request():
    wf = load("test.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    matrix = wf["jobs"]["test"]["strategy"]["matrix"]["include"]
    commands = {entry["command"] for entry in matrix}
    assert readme_commands()["test"] in commands
    assert "${{ matrix.command }}" in run_lines(wf)
    # the three corners: pinned, newest Python, lowest torch
    pythons = sorted(entry["python"] for entry in matrix)
    assert len(matrix) == 3 and pythons[0] == "3.11" and pythons[-1] > "3.11"
    assert "make compat" in commands


def test_pages_workflow_builds_with_readme_command_and_deploys():
    wf = load("pages.yml")
    assert readme_commands()["book"] in run_lines(wf)
    uses = [step.get("uses", "") for job in wf["jobs"].values() for step in job["steps"]]
    upload = next(s for j in wf["jobs"].values() for s in j["steps"]
                  if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"
    assert any(u.startswith("actions/deploy-pages") for u in uses)
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"


def test_linkcheck_is_scheduled():
    wf = load("linkcheck.yml")
    assert "schedule" in wf["on"]
    assert "make linkcheck" in run_lines(wf)


def test_makefile_has_every_target_the_workflows_use():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9_-]*):", makefile, re.M))
    used = set()
    for name in ("test.yml", "pages.yml", "linkcheck.yml"):
        wf = load(name)
        commands = run_lines(wf) + [e["command"] for job in wf["jobs"].values()
                                    for e in job.get("strategy", {}).get("matrix", {}).get("include", [])]
        for command in commands:  # only lines that run make (not `apt-get install make ...`)
            used |= set(re.findall(r"^\s*make ([a-z][a-z0-9_-]*)", command, re.M))
    assert used and used <= targets, f"workflows call make targets the Makefile lacks: {used - targets}"
