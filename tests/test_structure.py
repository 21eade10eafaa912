"""The structure of the code, checked over its import graph (grimp's, issue 34): no module
imports itself through others; ``shared/`` stands in layers (the foundation, raster and vector,
tiles, the seeding use cases), imports nothing of the API, the workers, Starlette or Celery;
route modules import none of each other."""

from __future__ import annotations

import grimp
import pytest

GRAPH = grimp.build_graph("api", "shared", "workers", include_external_packages=True)
OURS = ("api", "shared", "workers")
#: the packages of ``shared/``, from the top down; those in one layer import none of each other
SHARED_LAYERS = (
    grimp.Layer("shared.seeding"),
    grimp.Layer("shared.tiles"),
    grimp.Layer("shared.raster", "shared.vector", independent=True),
    grimp.Layer("shared.base"),
)
#: what the foundation may import of ours: the leaf modules at the bottom of ``shared/``
BASE_MAY_IMPORT = {"shared.errors", "shared.settings", "shared.mapnik_env"}


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def test_no_module_imports_itself_through_others() -> None:
    circles = []
    for importer in sorted(m for m in GRAPH.modules if _ours(m)):
        for imported in GRAPH.find_modules_directly_imported_by(importer):
            if _ours(imported) and GRAPH.chain_exists(importer=imported, imported=importer):
                circles.append(GRAPH.find_shortest_chain(importer=imported, imported=importer))
    assert circles == [], circles


def test_the_packages_of_shared_stand_in_layers() -> None:
    illegal = GRAPH.find_illegal_dependencies_for_layers(layers=SHARED_LAYERS)
    assert illegal == set(), sorted(
        f"{d.importer} -> {d.imported}: {[r.chain for r in d.routes]}" for d in illegal
    )


def test_the_foundation_imports_nothing_of_ours_but_the_leaves() -> None:
    found = {
        imported
        for module in GRAPH.find_descendants("shared.base") | {"shared.base"}
        for imported in GRAPH.find_modules_directly_imported_by(module)
        if imported.startswith("shared.") and not imported.startswith("shared.base")
    }
    assert found <= BASE_MAY_IMPORT, found - BASE_MAY_IMPORT


@pytest.mark.parametrize("outside", ["api", "workers", "starlette", "celery"])
def test_shared_imports_neither_the_api_the_workers_starlette_nor_celery(outside: str) -> None:
    chain = GRAPH.find_shortest_chains(importer="shared", imported=outside, as_packages=True)
    assert chain == set(), chain


def test_route_modules_import_none_of_each_other() -> None:
    routes = set(GRAPH.find_children("api.routes"))
    found = sorted(
        (module, imported)
        for module in routes
        for imported in GRAPH.find_modules_directly_imported_by(module)
        if imported in routes
    )
    assert found == [], found
