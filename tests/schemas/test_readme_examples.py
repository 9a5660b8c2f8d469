"""The copy-paste examples of schemas/README.md work as printed."""

from __future__ import annotations

import re

import pytest

from schemas import codec
from tests.schemas import samples
from tests.schemas.third_party import load_order

README = (codec.SCHEMA_DIR / "README.md").read_text()


def block(language: str, after: str) -> str:
    """The first ```language block after the text ``after``."""
    found = re.search(rf"```{language}\n(.*?)```", README[README.index(after) :], re.DOTALL)
    assert found, f"no {language} block after {after!r}"
    return found.group(1)


def test_python_consumer_decodes_job_states() -> None:
    example: dict = {"__name__": "readme_example"}
    exec(compile(block("python", "A Python consumer"), "schemas/README.md", "exec"), example)
    example["SCHEMAS"] = codec.SCHEMA_DIR
    decode = example["decoder"]("job_state")
    samples.assert_contains(samples.job_state(), decode(codec.encode("job_state", samples.job_state())))
    with pytest.raises(ValueError, match="not a job_state of these schemas"):
        decode(codec.encode("queue", samples.queue()))


def test_java_example_parses_the_files_in_the_load_order() -> None:
    files = re.findall(r'"([a-z_]+\.avsc)"', block("java", "single-object decoder"))
    assert files == load_order()[: load_order().index("job_state.avsc") + 1]
