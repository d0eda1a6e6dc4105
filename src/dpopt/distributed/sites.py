"""Sites: the data owners of a distributed run; their rows are loaded where the site is.

A :class:`Site` describes *how to load* a site's data, not the data: a loader
``"package.module:function"`` called with ``kwargs``, or the path of a file the worker reads
(``.npz`` with arrays ``X`` and ``y``, or ``.csv`` with the label in the last column).  The
description is all the driver holds and sends; the loader runs inside the worker that hosts the
site (a local process, or a Ray actor placed on the site's machine through the custom resource
``site:NAME``), so the site's rows never enter the driver's process.  What comes back to the driver:
per site its number of rows B_i (public in the replace-one privacy model) and the dimension d
of the declared feature space, then, each round, the released primal vectors.  Nothing else about
the rows: a site does not report whether its rows satisfy the declared feature-norm bound, it
*enforces* the bound by mapping every row onto the declared ball before the run (a per-row map
that depends only on the row and the public bound, like ``DataBounds(clip=True)``), so rows
inside the bound are used unchanged and a row outside it is scaled down to the bound; no bit
about it leaves the site.  (A site whose data is malformed, e.g. non-finite values or labels
other than ±1, still stops the run with an error naming the site: that failure is visible to the
driver, before any noise is drawn.)

Several small sites may share one worker (``group=``): the worker then asks for every site's
resource, so Ray places it on a machine that holds all of them, and a site's data never leaves
its machine.  In-memory arrays and the in-process engine remain the tools for simulations and
reproductions (the loaders then run in the driver's process).

Examples
--------
>>> from dpopt.distributed.sites import Site
>>> site = Site("hospital-a", loader="mypkg.data:load_hospital", kwargs={"year": 2024})
>>> site.resource
'site:hospital-a'
>>> Site("b", loader="/data/b.npz").group
'b'
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_array, parse_numeric_table
from dpopt.exceptions import InvalidParameterError

__all__ = ["Site", "SiteShardSpec", "as_sites", "load_site", "make_site_shard", "site_groups"]

Array = NDArray[np.float64]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Site:
    """One data owner: a name and how its worker loads its rows ``(X, y)``.

    Parameters
    ----------
    name : str
        Letters, digits, ``_``, ``.``, ``-``; the Ray resource that pins the site's worker to its
        machine is ``"site:" + name``.
    loader : str
        ``"package.module:function"`` (called as ``function(**kwargs)`` in the worker, returning
        ``(X, y)``) or the path of a ``.npz`` (arrays ``X`` and ``y``) or ``.csv`` (comma
        separated, label in the last column) file readable where the worker runs.
    kwargs : mapping, optional
        Keyword arguments of the loader (picklable; they travel to the worker, so no data in them).
    group : str, optional
        Sites with the same group share one worker (default: the site's own name).
    """

    name: str
    loader: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    group: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidParameterError(
                "Site.name: use letters, digits, '_', '.' and '-' (it names the Ray resource site:NAME)"
            )
        if not isinstance(self.loader, str) or not self.loader:
            raise InvalidParameterError(
                f"site {self.name}: loader must be 'package.module:function' or a file path"
            )
        if not isinstance(self.kwargs, Mapping):
            raise InvalidParameterError(f"site {self.name}: kwargs must be a mapping")
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        if not self.group:
            object.__setattr__(self, "group", self.name)

    @property
    def resource(self) -> str:
        """The Ray custom resource of the site's machine: ``"site:" + name``."""
        return f"site:{self.name}"

    def load(self) -> tuple[Array, Array]:
        """Run the loader here (call it only where the site's data may be); see :func:`load_site`."""
        return load_site(self)


def _is_entry_point(loader: str) -> bool:
    mod, sep, fn = loader.partition(":")
    return bool(sep) and mod.replace(".", "").replace("_", "").isalnum() and fn.isidentifier()


def _resolve(site: Site) -> Callable[..., Any]:
    mod_name, _, fn_name = site.loader.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as err:
        raise InvalidParameterError(
            f"site {site.name}: cannot import the loader module {mod_name!r} where the site runs ({err})"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise InvalidParameterError(f"site {site.name}: {mod_name} has no function {fn_name!r}")
    return fn


def _read_file(site: Site) -> tuple[Any, Any]:
    path = Path(site.loader).expanduser()
    if not path.is_file():
        raise InvalidParameterError(f"site {site.name}: the data file {str(path)!r} does not exist here")
    if path.suffix == ".npz":
        return _read_npz(site, path)
    if path.suffix == ".csv":
        table = parse_numeric_table(path.read_text(), f"site {site.name} ({path.name})", delimiter=",")
        if table.shape[1] < 2:
            raise InvalidParameterError(f"site {site.name}: {path.name} needs features and a label column")
        return table[:, :-1], table[:, -1]
    raise InvalidParameterError(f"site {site.name}: data files must be .npz or .csv")


def _read_npz(site: Site, path: Path) -> tuple[Any, Any]:
    """Arrays ``X`` and ``y`` of a ``.npz`` without unpickling; errors name the file and key only."""
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile):  # not an .npz archive (or a pickle)
        raise InvalidParameterError(
            f"site {site.name}: {path.name} is not a readable .npz archive (write it with numpy.savez)"
        ) from None
    if not isinstance(z, np.lib.npyio.NpzFile):  # a single .npy renamed to .npz
        raise InvalidParameterError(f"site {site.name}: {path.name} must be an .npz with arrays 'X' and 'y'")
    with z:
        if "X" not in z or "y" not in z:
            raise InvalidParameterError(f"site {site.name}: {path.name} must hold arrays 'X' and 'y'")
        out = []
        for key in ("X", "y"):
            try:
                out.append(np.array(z[key]))
            except ValueError:  # object (pickled) arrays are refused by allow_pickle=False
                raise InvalidParameterError(
                    f"site {site.name}: {path.name}: array {key!r} is an object array (loading it would "
                    "unpickle); store numeric arrays, e.g. numpy.savez(path, X=X.astype(float), y=y.astype(float))"
                ) from None
            except (OSError, zipfile.BadZipFile, EOFError):
                raise InvalidParameterError(
                    f"site {site.name}: {path.name}: array {key!r} cannot be read (corrupt archive)"
                ) from None
        return out[0], out[1]


def load_site(site: Site, *, binary_labels: bool = True) -> tuple[Array, Array]:
    """Load and check one site's rows where this runs: ``X`` of shape (B, d), finite targets ``y``.

    With ``binary_labels`` (classification losses) the labels must be -1 or +1.  Errors name the
    site and the problem, never a data value.
    """
    raw = _resolve(site)(**site.kwargs) if _is_entry_point(site.loader) else _read_file(site)
    if not isinstance(raw, tuple | list) or len(raw) != 2:
        raise InvalidParameterError(f"site {site.name}: the loader must return a pair (X, y)")
    x = check_array(raw[0], f"X of site {site.name}", ndim=2)
    y = check_array(raw[1], f"y of site {site.name}", ndim=1)
    if x.shape[0] == 0:
        raise InvalidParameterError(f"site {site.name}: holds no rows")
    if y.shape[0] != x.shape[0]:
        raise InvalidParameterError(f"site {site.name}: {x.shape[0]} rows but {y.shape[0]} labels")
    if binary_labels and not np.all(np.abs(y) == 1.0):
        raise InvalidParameterError(f"site {site.name}: labels must be -1 or +1")
    return np.ascontiguousarray(x, dtype=np.float64), y.astype(np.float64)


def as_sites(data: Any) -> tuple[Site, ...] | None:
    """``data`` as a tuple of sites when every entry is a :class:`Site`; None for in-memory pairs."""
    if isinstance(data, Site):
        raise InvalidParameterError("data: expected one Site per node (a list), not a single Site")
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        return None
    items = list(data)
    kinds = {isinstance(d, Site) for d in items}
    if kinds == {True}:
        names = [s.name for s in items]
        if len(set(names)) != len(names):
            raise InvalidParameterError("data: two sites share a name (site names must be unique)")
        return tuple(items)
    if True in kinds:
        raise InvalidParameterError("data: mix of Site objects and in-memory pairs; use one kind")
    return None


def site_groups(sites: Sequence[Site]) -> list[NDArray[np.int64]]:
    """Node indices of each worker: sites sharing a ``group`` together, groups by first node."""
    order: dict[str, list[int]] = {}
    for i, s in enumerate(sites):
        order.setdefault(s.group, []).append(i)
    return [np.array(nodes, dtype=np.int64) for nodes in order.values()]


# ----------------------------------------------------------------------------------------------
# The worker side
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteShardSpec:
    """What a worker hosting some sites receives (no data: site descriptions and public plan).

    ``base`` is the algorithm's shard spec with its data field left empty (``None`` for the probe
    job that only reports the sites' public description); ``data_field`` names that field and
    ``to_rows`` turns a site's ``(X, y)`` into its value; ``factory`` builds the algorithm's
    shard program from the completed spec (the algorithm passes a ``to_rows`` that maps every row
    onto the declared feature ball, so the bound is enforced at the site and never reported);
    ``binary_labels`` whether labels must be ±1.
    """

    sites: tuple[Site, ...]
    base: Any = None
    factory: Callable[[Any], Any] | None = None
    data_field: str = "xy"
    to_rows: Callable[[Array, Array], Any] | None = None
    diagnostics: bool = False
    binary_labels: bool = True


_CACHE: dict[tuple[str, str, str], tuple[Array, Array]] = {}


def _key(site: Site) -> tuple[str, str, str]:
    return (site.name, site.loader, repr(sorted(site.kwargs.items())))


class SiteShard:
    """Shard program hosting sites: loads their rows here, then runs the algorithm's program.

    In the probe job (``spec.base is None``) it only answers ``call("describe")`` with each site's
    name, row count and dimension (the public quantities of the privacy model; nothing computed
    from the values of the rows); the rows it loaded are kept in this worker for the run job that
    follows (and dropped when it starts).
    In the run job the algorithm's diagnostics computed on the rows (losses, gradient norms) are
    withheld unless ``spec.diagnostics``: only the released vectors leave the site.
    """

    def __init__(self, spec: SiteShardSpec) -> None:
        self.spec = spec
        probe = spec.base is None
        rows = []
        for site in spec.sites:
            cached = _CACHE.pop(_key(site), None)
            rows.append(cached if cached is not None else load_site(site, binary_labels=spec.binary_labels))
        if probe:
            for site, r in zip(spec.sites, rows, strict=True):
                _CACHE[_key(site)] = r
            self.rows = rows
            self.program: Any = None
            return
        assert spec.factory is not None and spec.to_rows is not None
        full = dataclasses.replace(spec.base, **{spec.data_field: tuple(spec.to_rows(x, y) for x, y in rows)})
        self.rows = []
        self.program = spec.factory(full)

    def initial_output(self) -> Array:
        if self.program is None:
            return np.zeros((0, 0))
        return np.asarray(self.program.initial_output())

    def step(self, t: int, inputs: Sequence[Array]) -> tuple[Array, Any]:
        if self.program is None:
            raise RuntimeError("the probe job of a site worker cannot run rounds")
        out, diag = self.program.step(t, inputs)
        if not self.spec.diagnostics and isinstance(diag, dict):
            diag = {k: v for k, v in diag.items() if k == "models"}
        return out, diag

    def call(self, name: str, *args: Any) -> Any:
        if name == "describe":
            return [
                {"name": site.name, "n_rows": int(x.shape[0]), "dim": int(x.shape[1])}
                for site, (x, _) in zip(self.spec.sites, self.rows, strict=True)
            ]
        if name == "forget":
            for site in self.spec.sites:
                _CACHE.pop(_key(site), None)
            return None
        if name == "pid":
            import os

            return os.getpid()
        if self.program is None:
            raise RuntimeError(f"the probe job of a site worker has no call {name!r}")
        return self.program.call(name, *args)


def make_site_shard(spec: SiteShardSpec) -> SiteShard:
    """Factory used by the engines (module level, hence picklable)."""
    return SiteShard(spec)
