"""The product and its tests read nothing outside the repository: a clone has no shared folder beside it.

`.ci/bare-clone` runs the demo and the workload tests from such a copy; this guard names the line
that reaches out, before that run fails on a missing file.
"""

from __future__ import annotations

import re
from pathlib import Path

from serving.workloads import default_data_dir, load_trace

ROOT = Path(__file__).resolve().parents[1]
SHARED = "shared"  # the folder beside the repository that only the build environment has
OUTSIDE = re.compile(r"\.\./" + SHARED + r"""\b|parents\[\d\]\s*/\s*["']""" + SHARED + r"""["']|\.parent\s*/\s*["']""" + SHARED + """["']""")


def test_no_source_file_builds_a_path_outside_the_repository():
    sources = [p for d in ("infercost", "serving", "collectors", "schema", "alerts", "app", "tests", "benchmarks")
               for p in (ROOT / d).rglob("*.py")]
    sources += [ROOT / "Makefile", *(ROOT / ".ci").iterdir(), *(ROOT / "serving" / "vllm").glob("*.sh")]
    offending = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sources if p != Path(__file__)
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if OUTSIDE.search(line) and not line.lstrip().startswith("#")]
    assert offending == []


def test_the_traces_ship_inside_the_package_with_their_license():
    data = default_data_dir()
    assert data == ROOT / "serving" / "workloads" / "data"
    names = {p.name for p in data.iterdir()}
    assert {"azure_llm_inference_2023_conv.csv", "mooncake_conversation_trace.jsonl", "README.md",
            "LICENSE-Apache-2.0.txt"} <= names
    readme = (data / "README.md").read_text()
    assert "CC-BY 4.0" in readme and "Splitwise" in readme and "Apache-2.0" in readme
    # every row of both releases (README: 19,366 and 12,031 rows)
    assert len(load_trace("azure")) == 19_366 and len(load_trace("mooncake")) == 12_031
