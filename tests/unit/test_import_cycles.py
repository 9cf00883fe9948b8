"""No import cycle inside a layer of ``shardkit`` (the layers' one-way order is import-linter's
contract, pyproject.toml). Imports inside functions count too: a cycle broken only by a
function-level import is still a cycle a reader has to hold in mind."""

from __future__ import annotations

import grimp
import pytest

LAYERS = ("format", "storage", "plan", "read", "write", "loader", "cli")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("shardkit", exclude_type_checking_imports=True)


def cycles_within(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """One import chain per module pair of ``package`` that import each other (directly or not)."""
    modules = {m for m in graph.modules if m.startswith(package + ".")}
    found = []
    for importer in sorted(modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & modules):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None and set(back) <= modules:
                found.append([importer, *back])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_of_a_layer_imports_itself_back(graph: grimp.ImportGraph, layer: str) -> None:
    found = cycles_within(graph, f"shardkit.{layer}")
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(chain) for chain in found)


def test_the_check_sees_a_cycle() -> None:
    """The check itself: a cycle added to the graph is reported."""
    copy = grimp.build_graph("shardkit", exclude_type_checking_imports=True)
    copy.add_import(importer="shardkit.format.checksum", imported="shardkit.format.manifest")
    copy.add_import(importer="shardkit.format.manifest", imported="shardkit.format.checksum")
    assert cycles_within(copy, "shardkit.format")
