"""What the node watch keeps of each node to tell a change from a heartbeat: its podCIDR(s),
read back whole, and a digest of flannel's annotations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.subnet.kube.kube import _material, _material_cidrs

# Any text JSON can carry, lone surrogates and the separators included.
texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)
cidrs = st.lists(texts, min_size=1, max_size=3).map(tuple)
annotations = st.lists(st.none() | texts, max_size=8).map(tuple)


@given(cidrs, annotations)
def test_the_pod_cidrs_are_read_back_whole(
    pod_cidrs: tuple[str, ...], values: tuple[str | None, ...]
) -> None:
    assert _material_cidrs(_material(pod_cidrs, values)) == pod_cidrs


@given(cidrs, annotations, cidrs, annotations)
def test_different_leases_make_different_material(
    a_cidrs: tuple[str, ...],
    a_values: tuple[str | None, ...],
    b_cidrs: tuple[str, ...],
    b_values: tuple[str | None, ...],
) -> None:
    same = (a_cidrs, a_values) == (b_cidrs, b_values)
    assert (_material(a_cidrs, a_values) == _material(b_cidrs, b_values)) == same


def test_an_unset_annotation_differs_from_any_value() -> None:
    for value in ("", "-", "0:", "None"):
        assert _material(("",), (None,)) != _material(("",), (value,))
    assert _material(("",), (None, "a")) != _material(("",), ("a", None))
