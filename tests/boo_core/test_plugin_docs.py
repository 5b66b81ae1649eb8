"""Meta-tests: every hook specification is documented in docs/plugins.md and implemented by a
test or the example plugin, and the guide covers every helper of ``boo_core.testing``."""

from __future__ import annotations

import inspect
import re

import pytest

from boo_core import testing
from boo_core.plugins import hookspecs

from ..conftest import REPO

GUIDE = REPO / "docs" / "plugins.md"

HOOKS = {name: function for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
         if hasattr(function, f"{hookspecs.PROJECT_NAME}_spec")}


def sections(markdown: str) -> dict[str, str]:
    """Heading text -> the text under it, up to the next heading (code blocks' comments are
    not headings)."""
    fenced = re.sub(r"```.*?```", lambda m: m.group(0).replace("\n#", "\n\u2063#"), markdown, flags=re.S)
    parts = re.split(r"^#+ (.+)$", fenced, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_hook_specifications_are_found():
    assert set(HOOKS) >= {"boo_register_ops"}


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_documented_under_a_heading_with_its_parameters(name):
    parameters = list(inspect.signature(HOOKS[name]).parameters)
    heading = f"`{name}({', '.join(parameters)})`"
    body = sections(GUIDE.read_text()).get(heading)
    assert body is not None, f"docs/plugins.md has no heading {heading}"
    for parameter in parameters:
        assert f"`{parameter}`" in body, f"the section on {name} does not describe `{parameter}`"
    assert "**When:**" in body and "**Returns:**" in body, f"the section on {name} says neither when nor what"


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_implemented_by_a_test_or_the_example(name):
    files = [*(REPO / "tests").rglob("*.py"), *(REPO / "examples").rglob("*.py")]
    implementation = re.compile(rf"^\s*def {name}\(", re.MULTILINE)
    assert any(implementation.search(f.read_text()) for f in files), f"no test implements the hook {name}"


def test_the_guide_documents_every_testing_helper_and_points_at_the_example():
    guide = GUIDE.read_text()
    helpers = [name for name, value in vars(testing).items()
               if inspect.isfunction(value) and value.__module__ == testing.__name__ and not name.startswith("_")]
    assert helpers
    for name in helpers:
        assert f"`{name}(" in guide, f"docs/plugins.md does not document boo_core.testing.{name}"
    assert "(../examples/boo_ops_softmax)" in guide


def test_the_guide_documents_every_opspec_field():
    import dataclasses

    from boo_core import OpSpec

    body = sections(GUIDE.read_text())["The OpSpec: what BOO asks of one op"]
    for field in dataclasses.fields(OpSpec):
        assert f"| `{field.name}` |" in body, f"docs/plugins.md's OpSpec table lacks {field.name}"


def test_the_minimal_plugin_in_the_guide_is_complete():
    # The guide's minimal plugin declares every flag once, with its field: no build/format code.
    body = sections(GUIDE.read_text())["The minimal plugin"]
    assert "def build" not in body and "def format" not in body and "to_command" in body
    assert 'field="size"' in body and "register(OpSpec(" in body
